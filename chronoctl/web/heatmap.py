"""A job's calendar heat map: the audit report's occurrences (chronod.core.report) counted
per UTC day, each day coloured by its worst category. The report decides every
occurrence's state; this module only counts them and picks a colour."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from typing import Any, Iterable

DAYS = 90
MOST_LINES = 100_000  # occurrences a job page's heat map lists at most (`days_shown`)
ZERO = timedelta(0)

# worst first: the colour class of each report category (chronod.core.report.CATEGORY)
LEVELS = ("bad", "warn", "held", "running", "pruned", "ok", "future", "none")
LEVEL_OF_CATEGORY = {
    "failure": "bad",
    "missing": "bad",
    "account": "bad",  # a locked or expired account: the job runs no more until it is fixed
    "outage": "warn",
    "resource": "warn",
    "policy": "warn",
    "paused": "held",
    "maintenance": "held",
    "not finished": "running",
    "pruned": "pruned",
    "": "ok",
    "not due": "future",
}
LEVEL_WORDS = {
    "bad": "failed, missing, or its account locked or expired",
    "warn": "skipped (outage, resource, overlap) or cancelled",
    "held": "paused or in a maintenance window",
    "running": "not finished",
    "pruned": "pruned by retention",
    "ok": "all succeeded",
    "future": "not due yet",
    "none": "nothing expected",
}


@dataclass(frozen=True)
class Day:
    day: date
    level: str
    counts: dict[str, int]  # state -> occurrences that day

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def title(self) -> str:
        parts = ", ".join(f"{n} {state}" for state, n in self.counts.items())
        return f"{self.day.isoformat()}: {parts or 'nothing expected'}"


def days_shown(schedule: Any, now: datetime) -> int:
    """How many days a job's heat map covers: DAYS, or fewer for a job that falls due so
    often that a report of DAYS days would list more than MOST_LINES occurrences (every
    5 s: 1,555,200 in 90 days; the page took seconds, then refused). Judged by its last day."""
    if getattr(schedule, "kind", None) == "reboot":
        return DAYS
    per_day = len(schedule.fires(now - timedelta(days=1), now, limit=MOST_LINES + 1))
    return max(1, min(DAYS, MOST_LINES // max(per_day, 1)))


def period(today: date, days: int = DAYS) -> tuple[datetime, datetime]:
    """[start, end) in UTC of the `days` days that end with `today`."""
    end = datetime.combine(today + timedelta(days=1), time(), tzinfo=timezone.utc)
    return end - timedelta(days=days), end


def level_of(line: Any) -> str:
    return LEVEL_OF_CATEGORY.get(line.category, "warn")


def days(lines: Iterable[Any], start: datetime, end: datetime) -> list[Day]:
    """One Day per UTC date of [start, end), oldest first."""
    by_day: dict[date, list[Any]] = {}
    for line in lines:
        at = line.scheduled_at
        d = at.date() if at.utcoffset() == ZERO else at.astimezone(timezone.utc).date()
        by_day.setdefault(d, []).append(line)
    out = []
    d = start.date()
    while d < end.date():
        found = by_day.get(d, [])
        cats = {line.category for line in found}
        levels = {LEVEL_OF_CATEGORY.get(c, "warn") for c in cats}
        level = next((lv for lv in LEVELS if lv in levels), "none")
        out.append(Day(d, level, dict(Counter(line.state for line in found).most_common())))
        d += timedelta(days=1)
    return out


def weeks(all_days: list[Day]) -> list[list[Day | None]]:
    """The days as calendar columns (Monday to Sunday), padded with None at both ends."""
    if not all_days:
        return []
    cells: list[Day | None] = [None] * all_days[0].day.weekday() + list(all_days)
    cells += [None] * (-len(cells) % 7)
    return [cells[i : i + 7] for i in range(0, len(cells), 7)]
