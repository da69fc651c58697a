"""Structured log lines on stderr (journald keeps them): `event=... key=value ...`."""

from __future__ import annotations

import functools
import re
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

from chronod.core.escape import CONTROL, escape_control

_QUOTED = re.compile('[ "=' + CONTROL.pattern[1:])  # what makes a value need quotes or escapes


def _value(v: Any) -> str:
    kind = type(v)
    if kind is int:  # the most common values, first: never quoted
        return str(v)
    if kind is str and v and not _QUOTED.search(v):
        return str(v)
    if isinstance(v, datetime):
        return v.astimezone(timezone.utc).isoformat(timespec="milliseconds")
    if isinstance(v, float):
        return f"{v:.3f}"
    s = str(v)
    if not s or any(c in s for c in ' "=') or CONTROL.search(s):
        s = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
        s = '"' + escape_control(s, keep="") + '"'
    return s


@functools.lru_cache(maxsize=4096)  # events and field names are the code's own few words
def _key(k: str) -> str:
    """A field name or an event as one bare word: controls escaped, blanks and '=' as '_'."""
    return escape_control(k, keep="").replace(" ", "_").replace("=", "_").replace('"', "_")


class Log:
    """Writes one line per event; `level` is info, warning or error."""

    def __init__(self, stream: TextIO | None = None, *, timestamps: bool = True):
        self.stream = stream or sys.stderr
        self.timestamps = timestamps

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        parts = []
        if self.timestamps:
            parts.append(datetime.now(timezone.utc).isoformat(timespec="milliseconds"))
        parts.append(f"level={level}")
        parts.append(f"event={_key(event)}")
        parts.extend(f"{_key(k)}={_value(v)}" for k, v in fields.items() if v is not None)
        try:
            self.stream.write(" ".join(parts) + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # stderr gone (journald restarting): never let logging stop the scheduler
