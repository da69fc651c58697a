"""What of a run's output is stored (pure): the job's own `output_limit_kb` is one cap,
the host's output budget another (CHRONO_OUTPUT_BUDGET, bytes stored per run whatever a
job file asks), and a database that is full stores none of it. Each cut says so in a note
kept with the run."""

from __future__ import annotations

import re

DEFAULT_OUTPUT_BUDGET = 4 * 1024 * 1024  # bytes of output stored per run on this host
DB_FULL_NOTE = "output dropped: database full"

_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]i?B?|B)?\s*$", re.IGNORECASE)


def parse_budget(text: str | None) -> int | None:
    """CHRONO_OUTPUT_BUDGET as bytes: a number with an optional K, M or G (binary units);
    None when it is not one (empty means the default)."""
    if text is None or not text.strip():
        return DEFAULT_OUTPUT_BUDGET
    m = _SIZE.match(text)
    if not m:
        return None
    unit = (m.group(2) or "B")[0].upper()
    return int(m.group(1)) * {"B": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[unit]


def within_budget(tail: str | None, budget: int) -> tuple[str | None, str | None]:
    """The stored tail of a run's output under the host's budget (its last `budget` bytes,
    cut on a character), and a note when it was cut (None: nothing cut)."""
    if not tail:
        return tail, None
    data = tail.encode("utf-8", errors="surrogateescape")
    if len(data) <= budget:
        return tail, None
    kept = data[len(data) - budget :].decode("utf-8", errors="ignore") if budget > 0 else ""
    return kept, f"output cut to the host's output budget ({budget} bytes a run, CHRONO_OUTPUT_BUDGET)"


def with_note(error: str | None, note: str | None) -> str | None:
    """A run's error text with a note about its output added."""
    if not note:
        return error
    return f"{error}; {note}" if error else note


def is_database_full(error: BaseException) -> bool:
    """Whether a store error says the database's disk or file is full (SQLite's
    `database or disk is full`, ENOSPC, PostgreSQL's disk_full, SQLSTATE 53100)."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e).lower()
        if (
            "database or disk is full" in text
            or "no space left on device" in text
            or "could not extend file" in text
            or getattr(e, "sqlstate", None) == "53100"
            or getattr(e, "pgcode", None) == "53100"
        ):
            return True
        e = getattr(e, "orig", None) or e.__cause__ or e.__context__
    return False
