"""A local append-only spool of run records written while the database is unreachable.

One JSON object per line, flushed and fsynced on every append so that a crash during an
outage loses nothing the node did. The daemon replays the spool, in order, once the
database answers again, then empties it, or keeps only what its lapsed lease kept it
from writing (`keep`).
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$dt": value.isoformat()}
    raise TypeError(f"cannot spool a {type(value).__name__}")


def _hook(d: dict[str, Any]) -> Any:
    if set(d) == {"$dt"}:
        return datetime.fromisoformat(d["$dt"])
    return d


class Spool:
    """Records of one node, in the order they happened."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def append(self, kind: str, **record: Any) -> None:
        """Add one record durably (`kind`: start, finish, skip)."""
        line = json.dumps({"kind": kind, **record}, default=_default, sort_keys=True) + "\n"
        # never through a link: the spool lives in the daemon's own state directory
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def records(self) -> list[dict[str, Any]]:
        """Every record, oldest first; a torn last line (crash mid-write) is dropped."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return []
        with open(fd, encoding="utf-8", errors="replace") as f:
            text = f.read()
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line, object_hook=_hook))
            except json.JSONDecodeError:
                continue
        return out

    def __len__(self) -> int:
        return len(self.records())

    def keep(self, records: list[dict[str, Any]]) -> None:
        """Replace the spool by `records`, in order, at once (a crash leaves the old one or the new)."""
        tmp = self.path.with_name(self.path.name + ".new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            for rec in records:
                os.write(fd, (json.dumps(rec, default=_default, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)

    def clear(self) -> None:
        """Forget every record (after a successful replay)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
