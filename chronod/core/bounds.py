"""The limits of every time quantity chrono computes with, stated once.

The schedule engine, the validator of job files and chronoctl's parsing of flags all take
their bounds from here, so whatever a job file or a flag may say, the engine can compute
with it: a value the validator accepts never overflows the calendar (Python's ends at
9999-12-31) and never makes a schedule raise.
"""

from __future__ import annotations

from datetime import datetime, timezone

DAY_S = 86400
YEAR_S = 366 * DAY_S

EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
"""The first instant chrono answers about: @every counts from it, no run is older."""

LATEST = datetime(9000, 1, 1, tzinfo=timezone.utc)
"""The last instant a schedule reaches; later, every schedule answers "never". It leaves
room below the calendar's end for a cron search over its 400-year cycle plus PLAN_S."""

PLAN_S = 100 * YEAR_S
"""How far ahead every accepted schedule can be planned without raising (a tested promise)."""

MAX_EVERY_S = 10 * YEAR_S
"""The longest `@every` interval (and the longest max_silence_s)."""

MAX_RUN_S = YEAR_S
"""The longest timeout_s and catchup_window_s."""

MAX_SPAN_S = 100 * YEAR_S
"""The longest duration a command-line flag gives (`--since`, `--window`) and the longest
period a report covers."""

MAX_DURATION_DIGITS = 15
"""The most digits one number of a duration may have ("999999999999999s" is still a number
the engine can hold; longer ones are refused before any arithmetic)."""


def in_range(at: datetime) -> bool:
    """Whether the aware instant `at` lies within [EARLIEST, LATEST]."""
    return EARLIEST <= at <= LATEST


def range_text() -> str:
    """The instant range in words, for messages."""
    return f"{EARLIEST:%Y-%m-%dT%H:%M:%SZ} to {LATEST:%Y-%m-%dT%H:%M:%SZ}"


def days_text(seconds: int) -> str:
    """`seconds` as whole days with years in words, for messages: '36600d (100 years)'."""
    days = seconds // DAY_S
    years = seconds // YEAR_S
    return f"{days}d ({years} years)" if years > 1 else f"{days}d"
