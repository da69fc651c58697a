"""busybox `crond`'s crontab rules (Alpine images run it: /etc/crontabs/USER), re-implemented
from its source (miscutils/crond.c) so that an imported busybox crontab keeps what busybox did.
Pure: text in, value sets out; `simulate` is the oracle the import's check compares with.

Where busybox differs from Debian's cron:

* A field is read by `ParseField`: `*` fills the whole array, *from index 0* (so `*/2` in the
  day-of-month field is the even days 2, 4, …, 30; Debian's are 1, 3, …, 31); `a-b` ranges wrap
  around (`22-2` is 22, 23, 0, 1, 2); names are the first three letters, any case.
* The day rule (`FixDayDow`): a field is "used" unless every value of it is set; when exactly
  one is used only it decides, when both are they are OR-ed. `*/2` therefore counts as used.
* Every minute busybox looks at each UTC minute since its last look and matches its *local*
  time: a time a clock change skips never runs, a repeated time runs in both passes
  (chrono's `dst_gap: skip`, `dst_repeat: both`), whatever the job.
* A job whose previous run is still going is not started again (`overlap: forbid`).
* The command goes to `sh -c` as written: no `%` rule. `#` starts a comment anywhere.
* Only `SHELL=`, `PATH=` and `MAILTO=` lines set anything; `@yearly`…`@hourly` and
  `@reboot` are known (`@hourly` is minute 0 of every hour).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

_DOW = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MON = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
SPECIALS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class BusyboxParseError(ValueError):
    """busybox logs "parse error" for this field (and runs the line on what it had read)."""


@dataclass(frozen=True)
class BusyboxLine:
    """One line's value sets, as busybox fills its arrays (days 1-31, months 1-12, dows 0-6)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]

    def matches(self, local: datetime) -> bool:
        return (
            local.minute in self.minutes
            and local.hour in self.hours
            and local.month in self.months
            and (local.day in self.days or (local.isoweekday() % 7) in self.dows)
        )


def parse_field(text: str, size: int, off: int = 0, names: tuple[str, ...] | None = None) -> list[bool]:
    """ParseField: the array busybox fills for one field (index 0 .. size-1)."""
    ary = [False] * size
    i = 0
    while True:
        n1 = n2 = -1
        while True:
            skip = 0
            if text[i : i + 1] == "*":
                n1, n2, skip, i = 0, size - 1, 1, i + 1
            elif text[i : i + 1].isdigit():
                j = i
                while j < len(text) and text[j].isdigit():
                    j += 1
                value = int(text[i:j]) + off
                if n1 < 0:
                    n1 = value
                else:
                    n2 = value
                skip, i = 1, j
            elif names is not None and text[i : i + 3].lower() in names:
                value = names.index(text[i : i + 3].lower())
                if n1 < 0:
                    n1 = value
                else:
                    n2 = value
                skip, i = 1, i + 3
            if skip == 0:
                raise BusyboxParseError(f"parse error at {text!r}")
            if text[i : i + 1] == "-" and n2 < 0:
                i += 1
                continue
            break
        if n2 < 0:
            n2 = n1
        if text[i : i + 1] == "/":
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            skip, i = int(text[i + 1 : j] or "0"), j
        s0, failsafe, n = 1, 1024, n1 - 1
        while True:
            n = (n + 1) % size
            s0 -= 1
            if s0 == 0:
                ary[n % size] = True
                s0 = skip
            failsafe -= 1
            if failsafe == 0:
                raise BusyboxParseError(f"parse error at {text!r}")
            if n == n2:
                break
        if text[i : i + 1] != ",":
            break
        i += 1
    if i != len(text):
        raise BusyboxParseError(f"parse error at {text!r}")
    return ary


def parse_line(fields: list[str]) -> BusyboxLine:
    """Five time fields -> the sets busybox matches, its day rule applied."""
    minutes = parse_field(fields[0], 60)
    hours = parse_field(fields[1], 24)
    days = parse_field(fields[2], 32)
    months = parse_field(fields[3], 12, -1, _MON)
    dows = parse_field(fields[4], 7, 0, _DOW)
    week_used, days_used = not all(dows), not all(days)
    if week_used != days_used:
        if week_used:
            days = [False] * 32
        else:
            dows = [False] * 7
    return BusyboxLine(
        frozenset(i for i, v in enumerate(minutes) if v),
        frozenset(i for i, v in enumerate(hours) if v),
        frozenset(i for i in range(1, 32) if days[i]),
        frozenset(i + 1 for i, v in enumerate(months) if v),
        frozenset(i for i, v in enumerate(dows) if v),
    )


def _list(values: frozenset[int], full: range) -> str:
    return "*" if set(full) <= values else ",".join(str(v) for v in sorted(values))


def chrono_schedule(line: BusyboxLine) -> str:
    """A five-field chrono expression firing at the local times busybox matches. A day field
    busybox ignores is `*` (chrono ANDs it away); two used day fields are explicit lists, which
    chrono ORs, as busybox does. An empty day field matches nothing: such a line never runs."""
    minutes, hours, months = (
        _list(line.minutes, range(60)),
        _list(line.hours, range(24)),
        _list(line.months, range(1, 13)),
    )
    if line.days and line.dows:
        days, dows = _list(line.days, range(1, 32)), _list(line.dows, range(7))
        if days == "*" or dows == "*":  # one of them matches every day: so does the OR
            days, dows = "*", "*"
    elif line.days:
        days, dows = _list(line.days, range(1, 32)), "*"
    else:
        days, dows = "*", _list(line.dows, range(7))
    return f"{minutes} {hours} {days} {months} {dows}"


def simulate(line: BusyboxLine, tz: str, start: datetime, end: datetime) -> list[datetime]:
    """The UTC minutes in (start, end] at which busybox crond, running in zone `tz`, starts the
    line: every UTC minute whose local time matches. Walked by local day and matching wall time
    (not minute by minute): a wall time a clock change skips has no UTC minute, a repeated one
    has two (busybox runs both), any other one."""
    zone = ZoneInfo(tz)
    lo, hi = start.astimezone(timezone.utc), end.astimezone(timezone.utc)
    day = (lo - timedelta(days=1)).astimezone(zone).date()
    last = (hi + timedelta(days=1)).astimezone(zone).date()
    out: list[datetime] = []
    while day <= last:
        if day.month in line.months and (day.day in line.days or (day.isoweekday() % 7) in line.dows):
            for h in sorted(line.hours):
                for m in sorted(line.minutes):
                    wall = datetime(day.year, day.month, day.day, h, m)
                    first = wall.replace(tzinfo=zone, fold=0).astimezone(timezone.utc)
                    second = wall.replace(tzinfo=zone, fold=1).astimezone(timezone.utc)
                    if first > second:  # in a gap: the clock never shows it
                        continue
                    for t in (first,) if first == second else (first, second):
                        if lo < t <= hi and t.astimezone(zone).replace(tzinfo=None) == wall:
                            out.append(t)
        day += timedelta(days=1)
    return sorted(out)
