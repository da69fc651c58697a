"""Fire times: cron expressions, @every and @reboot, evaluated like Vixie cron in a zone.

INTERFACE STUB — to be implemented (see docs/architecture.md). Signatures are the contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


class ScheduleError(ValueError):
    """The schedule expression is not valid; `hint` says what to write instead."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class DstEvent:
    """A date on which a zone's clock change alters what a schedule does."""

    date: str  # local date, YYYY-MM-DD
    transition_at: datetime  # the UTC instant of the clock change
    change: str  # "spring-forward" | "fall-back" | "clock-correction"
    shift_s: int  # size of the change in seconds (positive)
    effect: str  # one sentence: "02:30 does not exist; fires once at 03:00 EDT instead"


class Schedule:
    """A compiled schedule. Build with `compile_schedule`; all methods are pure."""

    expr: str  # as written
    tz: str  # IANA zone name
    kind: str  # "cron" | "every" | "reboot"
    is_fixed_time: bool  # DESIGN §4: minute and hour fields do not start with '*'
    every_s: int | None  # for kind "every"

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire instant strictly after `after` (aware), as aware UTC; None for @reboot."""
        raise NotImplementedError

    def fires(self, start: datetime, end: datetime, limit: int | None = None) -> list[datetime]:
        """Every fire instant in (start, end], ascending, aware UTC (at most `limit`)."""
        raise NotImplementedError

    def prev_at_or_before(self, at: datetime) -> datetime | None:
        """The last fire instant <= `at` (aware UTC), or None if none in the last 5 years."""
        raise NotImplementedError

    def min_gap_s(self) -> int | None:
        """Smallest gap in seconds between two consecutive occurrences (None for @reboot)."""
        raise NotImplementedError

    def max_gap_s(self) -> int | None:
        """Largest gap in seconds between two consecutive occurrences (None for @reboot)."""
        raise NotImplementedError

    def describe(self) -> str:
        """The schedule in words: 'at 02:00 every day (America/New_York)'."""
        raise NotImplementedError

    def dst_events(self, start: datetime, end: datetime) -> list[DstEvent]:
        """Every zone transition in [start, end) that changes what this schedule does."""
        raise NotImplementedError


def compile_schedule(expr: str, tz: str = "UTC") -> Schedule:
    """Parse and compile `expr` for zone `tz` (cached). Raise ScheduleError when invalid,
    when the zone is unknown, or when the expression can never fire (`0 0 31 2 *`)."""
    raise NotImplementedError
