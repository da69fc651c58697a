"""A minute-by-minute simulation of Debian cron 3.0pl1, used as the oracle for schedules.

This module deliberately shares no code with `chronod.core.schedule`: it re-implements
what Debian's `cron.c` and `entry.c` do, so that comparing the two finds real bugs.

The daemon loop being simulated (cron.c, `main`): cron wakes once per real minute and
computes `clockTime`, the local wall clock in minutes since the epoch (UTC epoch minutes
plus the zone's offset). `virtualTime` is the last local minute whose jobs have all run.
With `timeDiff = clockTime - virtualTime`:

* `timeDiff == 1` — the normal case: run every job matching `clockTime`.
* `0 < timeDiff <= 5` — woke up late: run every job for each missed minute.
* `5 < timeDiff <= 180` — clock went forward (DST begins): run wildcard jobs for the
  current minute only, and fixed-time jobs for every skipped minute (each evaluated at
  the skipped local time, its own date and weekday).
* `-180 < timeDiff <= 0` — clock went back (DST ends): run wildcard jobs for the current
  minute only; `virtualTime` stays put, so fixed-time jobs wait until local time passes it.
* anything else — a clock correction: jump `virtualTime` and run the current minute only.

A job is *wildcard* when its minute or hour field starts with `*` (MIN_STAR | HR_STAR).

Every start is reported at the start of the real minute in which cron acts. cron runs its
job queue after each virtual minute it replays, so a fixed-time job that matches several
times inside one skipped DST hour starts once for each, all in the first seconds after the
jump: `simulate` lists that minute once per start. Debian's cron 3.0pl1-162 on a fake clock
(tests/realcron/run_dst_cases.py, fixture tests/fixtures/cron_dst) started `0,30 2 * * *`
twice at 03:00 EDT on New York's 2027 spring-forward and `0-59/20 2 * * *` three times.

One simplification:

* The zone offset is re-read every minute. Debian's `set_time` only re-reads it when
  `tm_isdst` flips, which matters for offset changes that keep the DST flag (Pacific/Apia
  on 2011-12-30 stayed "DST" while jumping a day).

The thresholds are cron.c's, so this oracle and the DST rules of docs/reference.md part when a clock goes back by
3 hours or more: chrono (and `chronod.core.schedule`) repeats nothing, while cron.c treats
exactly 3 hours (timeDiff -179) as "DST ends" (wildcard jobs repeat) and more than that
as a jump of its virtual clock (every job repeats as the wall clock passes it again). In
the tz database only Antarctica/Casey (2010-2023, 3 hours) and Antarctica/Vostok (1994,
7 hours) went back that far, both standard-time changes that Debian's cron, which only
re-reads the offset when tm_isdst flips, would not have seen. A jump of 3 hours or more
forward is a correction in both.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_EPOCH_DATE = date(1970, 1, 1)
_MINUTES_PER_DAY = 1440
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MAX_DIFF = 3 * 60  # cron.c: 3 * MINUTE_COUNT


class VixieParseError(ValueError):
    """cron would refuse this entry (entry.c `load_entry` returns an error)."""


@dataclass(frozen=True)
class Entry:
    """One parsed crontab time specification, as entry.c stores it (bit sets and flags)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]  # 0..6, Sunday is 0 (7 folded into 0)
    dom_star: bool
    dow_star: bool
    wildcard: bool  # MIN_STAR or HR_STAR
    reboot: bool = False

    def day_matches(self, d: date) -> bool:
        """Vixie's day rule: AND when either day field is `*`-led, else OR."""
        if d.month not in self.months:
            return False
        dom_ok = d.day in self.doms
        dow_ok = (d.isoweekday() % 7) in self.dows
        if self.dom_star or self.dow_star:
            return dom_ok and dow_ok
        return dom_ok or dow_ok


def _get_number(text: str, i: int, low: int, names: tuple[str, ...] | None) -> tuple[int, int]:
    """entry.c `get_number`: the run of ASCII letters and digits at `i`, as a name (any
    case) or a plain number; (index after it, value)."""
    j = i
    while j < len(text) and text[j].isascii() and text[j].isalnum():
        j += 1
    token = text[i:j]
    if not token:
        raise VixieParseError(
            f"expected a number at {text[i : i + 1]!r} in {text!r}" if i < len(text) else f"{text!r} ends early"
        )
    if names is not None and token.lower() in names:
        return j, names.index(token.lower()) + low
    if token.isdigit():
        return j, int(token)
    raise VixieParseError(f"{token!r} is not a number{' or a name' if names else ''}")


def _get_range(text: str, i: int, low: int, high: int, names: tuple[str, ...] | None) -> tuple[int, set[int]]:
    """entry.c `get_range` at `i`: `*`, `N` or `N-M`, then an optional `/S`.

    Debian's entry.c (3.0pl1-162, checked with its `crontab`) refuses a step after a
    single number ("5/10"), a step of 0 and range ends outside the field; it accepts any
    positive step and a reversed range ("22-2"), which sets nothing at all. What follows
    a complete range other than `,` ends the field: get_list skips it (`*/5/2` is `*/5`).
    """
    if text[i : i + 1] == "*":
        first, last, i = low, high, i + 1
    else:
        i, first = _get_number(text, i, low, names)
        if text[i : i + 1] != "-":
            if text[i : i + 1] == "/":
                raise VixieParseError(f"a step needs a range or '*', not {text!r}")
            _check_bounds(first, low, high, text)
            return i, {first}
        i, last = _get_number(text, i + 1, low, names)
        _check_bounds(first, low, high, text)
        _check_bounds(last, low, high, text)
    step = 1
    if text[i : i + 1] == "/":
        i, step = _get_number(text, i + 1, 0, None)
        if step == 0:
            raise VixieParseError(f"bad step 0 in {text!r}")
    return i, set(range(first, last + 1, step))


def _check_bounds(value: int, low: int, high: int, text: str) -> None:
    if not low <= value <= high:
        raise VixieParseError(f"{value} in {text!r} is out of range {low}-{high}")


def _parse_field(text: str, low: int, high: int, names: tuple[str, ...] | None = None) -> frozenset[int]:
    """entry.c `get_list`: ranges joined by `,`; anything after the last one is skipped."""
    values: set[int] = set()
    i = 0
    while True:
        i, got = _get_range(text, i, low, high, names)
        values |= got
        if text[i : i + 1] != ",":
            return frozenset(values)
        i += 1


def parse_entry(expr: str) -> Entry:
    """Parse five time fields or an `@` macro the way Debian's entry.c does."""
    text = expr.strip()
    if text == "@reboot":
        empty: frozenset[int] = frozenset()
        return Entry(empty, empty, empty, empty, empty, False, False, False, reboot=True)
    if text.startswith("@"):
        if text not in _MACROS:  # entry.c compares with strcmp: "@Daily" is refused
            raise VixieParseError(f"unknown macro {text!r}")
        text = _MACROS[text]
    fields = text.replace("\t", " ").split(" ")
    fields = [f for f in fields if f]  # entry.c separates fields by blanks and tabs only
    if len(fields) != 5:
        raise VixieParseError(f"expected 5 time fields, got {len(fields)}")
    minute, hour, dom, month, dow = fields
    minutes, hours = _parse_field(minute, 0, 59), _parse_field(hour, 0, 23)  # in entry.c's order:
    doms, months = _parse_field(dom, 1, 31), _parse_field(month, 1, 12, _MONTHS)  # the first bad field
    dows = set(_parse_field(dow, 0, 7, _DAYS))  # is the one reported
    if 7 in dows:
        dows.discard(7)
        dows.add(0)
    return Entry(
        minutes=minutes,
        hours=hours,
        doms=doms,
        months=months,
        dows=frozenset(dows),
        dom_star=dom.startswith("*"),
        dow_star=dow.startswith("*"),
        wildcard=minute.startswith("*") or hour.startswith("*"),
    )


class _Zone:
    """UTC offsets (in whole minutes) of one zone over a span, with the transition minutes."""

    def __init__(self, tz: str, first_min: int, last_min: int):
        self._zone = ZoneInfo(tz)
        self.changes: list[int] = []  # UTC minutes at which a new offset starts
        self.offsets: list[int] = [self._offset(first_min)]
        step = 60
        m = first_min
        while m < last_min:
            nxt = min(m + step, last_min)
            if self._offset(nxt) != self.offsets[-1]:
                at = self._bisect(m, nxt)
                self.changes.append(at)
                self.offsets.append(self._offset(at))
                m = at
            else:
                m = nxt

    def _offset(self, utc_min: int) -> int:
        instant = _EPOCH + timedelta(minutes=utc_min)
        offset = instant.astimezone(self._zone).utcoffset()
        assert offset is not None  # an aware datetime in a zone has one
        return int(offset.total_seconds()) // 60

    def _bisect(self, lo: int, hi: int) -> int:
        """The first minute in (lo, hi] whose offset differs from lo's."""
        before = self._offset(lo)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._offset(mid) == before:
                lo = mid
            else:
                hi = mid
        return hi


class _Matcher:
    """Does a local epoch minute match the entry? Day results are cached per local day."""

    def __init__(self, entry: Entry):
        self.entry = entry
        self.minute_of_day = [(m % 60) in entry.minutes and (m // 60) in entry.hours for m in range(_MINUTES_PER_DAY)]
        self.any_minute = any(self.minute_of_day)
        self._days: dict[int, bool] = {}

    def day(self, day_number: int) -> bool:
        hit = self._days.get(day_number)
        if hit is None:
            hit = self.entry.day_matches(_EPOCH_DATE + timedelta(days=day_number))
            self._days[day_number] = hit
        return hit

    def __call__(self, local_min: int) -> bool:
        return self.minute_of_day[local_min % _MINUTES_PER_DAY] and self.day(local_min // _MINUTES_PER_DAY)


def _to_minute(instant: datetime) -> int:
    if instant.tzinfo is None:
        raise ValueError("simulate() needs aware datetimes")
    return int((instant - _EPOCH).total_seconds() // 60)


def _wakeup(matcher: _Matcher, virtual: int, running: int) -> tuple[int, int]:
    """One non-normal wakeup of cron.c's loop: (how many times the job starts, new
    virtualTime). cron calls find_jobs once per virtual minute it replays and runs the job
    queue after each, so a job matching several replayed minutes starts once for each."""
    diff = running - virtual
    wild = matcher.entry.wildcard
    if 0 < diff <= 5:
        return sum(1 for v in range(virtual + 1, running + 1) if matcher(v)), running
    if 5 < diff <= _MAX_DIFF:
        if wild:
            return int(matcher(running)), running
        return sum(1 for v in range(virtual + 1, running + 1) if matcher(v)), running
    if -_MAX_DIFF < diff <= 0:
        return int(wild and matcher(running)), virtual
    return int(matcher(running)), running


def simulate(
    expr: str,
    tz: str,
    start: datetime,
    end: datetime,
    warmup: timedelta = timedelta(days=1),
) -> list[datetime]:
    """The aware-UTC instants in (start, end] at which Debian cron, running in zone `tz`,
    would start the job `expr` (five fields or an `@` macro; `@reboot` never fires here).

    Each instant is the start of the real minute in which cron acts. cron is assumed to
    have been running since `start - warmup`, so the state of its virtual clock at
    `start` (say, inside a repeated DST hour) is what a long-running daemon would have.
    """
    entry = parse_entry(expr)
    if entry.reboot:
        return []
    matcher = _Matcher(entry)
    if not matcher.any_minute:
        return []
    first, last = _to_minute(start), _to_minute(end)
    boot = _to_minute(start - warmup)
    zone = _Zone(tz, boot, last + 1)
    return [
        _EPOCH + timedelta(minutes=m)
        for m in _run(matcher, zone, boot, last)
        if m > first or (m == first and _EPOCH + timedelta(minutes=m) > start)
    ]


def _run(matcher: _Matcher, zone: _Zone, boot: int, last: int) -> list[int]:
    """Drive cron's loop from `boot` (cron starts; runs nothing) to real minute `last`."""
    fired: list[int] = []
    changes = zone.changes + [last + 1]
    seg = 0
    offset = zone.offsets[0]
    virtual = boot + offset
    m = boot + 1
    while m <= last:
        while m >= changes[seg]:
            seg += 1
            offset = zone.offsets[seg]
        seg_end = changes[seg]  # first real minute with a different offset
        running = m + offset
        if running - virtual == 1:
            m, virtual = _steady(matcher, fired, m, virtual, offset, min(seg_end, last + 1))
            continue
        starts, virtual = _wakeup(matcher, virtual, running)
        fired.extend([m] * starts)
        m += 1
    return fired


def _steady(matcher: _Matcher, fired: list[int], m: int, virtual: int, offset: int, stop: int) -> tuple[int, int]:
    """Normal wakeups (timeDiff == 1) from real minute `m` up to, not including, `stop`,
    while the offset is constant. Whole local days that cannot match are skipped."""
    minute_of_day = matcher.minute_of_day
    while m < stop:
        local = m + offset
        day = local // _MINUTES_PER_DAY
        day_end_real = (day + 1) * _MINUTES_PER_DAY - offset
        chunk_end = min(day_end_real, stop)
        if matcher.day(day):
            base = day * _MINUTES_PER_DAY - offset
            for real in range(m, chunk_end):
                if minute_of_day[real - base]:
                    fired.append(real)
        m = chunk_end
    return m, m - 1 + offset


def minutes_of(instants: list[datetime]) -> list[datetime]:
    """Fire instants as the minutes cron acts in (seconds dropped, one entry per fire): how
    chrono's fires compare with `simulate`, whose starts are minutes (a DST gap's skipped
    times fire one second apart in chrono, all within cron's first minute after the jump)."""
    return [t.replace(second=0, microsecond=0) for t in instants]
