"""Fire times: cron expressions, @every and @reboot, evaluated like Vixie cron in a zone.

A cron schedule is evaluated in two steps: `cronexpr` gives the sorted allowed values of
each field; `_next_wall` jumps field by field to the next matching *wall* time (naive,
in the job's zone); `_CronSchedule` maps wall times to UTC instants with cron's DST rules
(gap: a fixed-time job fires once for each matching time the clock skipped, at the
transition and one second apart after it; fold: fixed-time jobs fire in the first pass only,
wildcard jobs in both; a change of 3 hours or more is a clock correction:
nothing caught up, nothing repeated).

A fixed-time job may choose other rules for the two DST cases: `dst_gap` `skip` (a time
the clock skips is not run that day, as wildcard jobs do) and `dst_repeat` `last` (the
second pass only) or `both` (each pass, as wildcard jobs do). Wildcard jobs always follow
the wall clock, and clock corrections keep their rule whatever the policy.
"""

from __future__ import annotations

import bisect
import calendar
import difflib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from chronod.core.bounds import EARLIEST, LATEST, MAX_EVERY_S, days_text
from chronod.core.calendar import CalendarError, CalendarSpec, CalendarStuck, next_elapse, parse_calendar
from chronod.core.cronexpr import CronFields, ScheduleError, parse_fields
from chronod.core.durations import DurationError, parse_duration
from chronod.core.model import DST_GAP_POLICIES, DST_REPEAT_POLICIES

__all__ = ["DstEvent", "Schedule", "ScheduleError", "compile_schedule", "parse_fields"]

UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_CORRECTION = timedelta(hours=3)  # a clock change this large is a correction, not DST
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"})
_MONTH_LEN = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_SEARCH_YEARS = 400  # the Gregorian calendar repeats every 400 years
_PREV_HORIZON = timedelta(days=5 * 366)
_LATEST_S = (LATEST - _EPOCH) // _SECOND
_FIRST_S = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // _SECOND


@dataclass(frozen=True)
class DstEvent:
    """A date on which a zone's clock change alters what a schedule does."""

    date: str  # local date, YYYY-MM-DD
    transition_at: datetime  # the UTC instant of the clock change
    change: str  # "spring-forward" | "fall-back" | "clock-correction"
    shift_s: int  # size of the change in seconds (positive)
    effect: str  # one sentence: "02:30 does not exist; fires once at 03:00 EDT instead"


class Schedule:
    """A compiled schedule. Build with `compile_schedule`; all methods are pure.

    `compile_schedule` hands out one object per (expression, zone, DST policy): thousands of jobs
    with the same schedule share it, so it must never be changed after it is built."""

    expr: str  # as written
    tz: str  # IANA zone name
    kind: str  # "cron" | "every" | "reboot" | "calendar"
    is_fixed_time: (
        bool  # docs/reference.md, Time zones and daylight saving time: minute and hour fields do not start with '*'
    )
    every_s: int | None  # for kind "every"
    dst_gap: str = "shift"  # as asked for; only fixed-time cron schedules act on it
    dst_repeat: str = "first"

    def __repr__(self) -> str:
        policy = (
            "" if (self.dst_gap, self.dst_repeat) == ("shift", "first") else f", {self.dst_gap!r}, {self.dst_repeat!r}"
        )
        return f"compile_schedule({self.expr!r}, {self.tz!r}{policy})"

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire instant strictly after `after` (aware), as aware UTC; None for @reboot
        and when there is none up to `bounds.LATEST` (the engine never computes past it)."""
        raise NotImplementedError

    def fires(self, start: datetime, end: datetime, limit: int | None = None) -> list[datetime]:
        """Every fire instant in (start, end], ascending, aware UTC (at most `limit`)."""
        end = _as_utc(end)
        out: list[datetime] = []
        t = self.next_after(start)
        while t is not None and t <= end and (limit is None or len(out) < limit):
            out.append(t)
            t = self.next_after(t)
        return out

    def prev_at_or_before(self, at: datetime) -> datetime | None:
        """The last fire instant <= `at` (aware UTC), or None if none in the last 5 years
        (or `at` is outside `bounds.EARLIEST`..`bounds.LATEST`)."""
        at = _as_utc(at)
        if not _reachable(at):
            return None
        window = timedelta(seconds=(self.max_gap_s() or 0) + 60)
        while True:
            window = min(window, _PREV_HORIZON)
            found = self.fires(at - window, at)
            if found:
                return found[-1]
            if window >= _PREV_HORIZON:
                return None
            window *= 2

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
        return []


def _reachable(t: datetime) -> bool:
    return EARLIEST <= t <= LATEST


def _within(t: datetime | None) -> datetime | None:
    return t if t is not None and t <= LATEST else None


def _offset(t: datetime) -> timedelta:
    """The UTC offset of an aware datetime (a datetime with a zone always has one)."""
    off = t.utcoffset()
    assert off is not None, t
    return off


def _as_utc(t: datetime) -> datetime:
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"naive datetime {t.isoformat()}: pass an aware datetime (UTC or with a zone)")
    return t.astimezone(UTC)


# ---------------------------------------------------------------------------------------
# @reboot and @every


class _RebootSchedule(Schedule):
    """@reboot: once per boot of the daemon, never from the calendar."""

    def __init__(self, expr: str, tz: str):
        self.expr, self.tz, self.kind = expr, tz, "reboot"
        self.is_fixed_time, self.every_s = False, None

    def next_after(self, after: datetime) -> datetime | None:
        _as_utc(after)
        return None

    def fires(self, start: datetime, end: datetime, limit: int | None = None) -> list[datetime]:
        _as_utc(start), _as_utc(end)
        return []

    def prev_at_or_before(self, at: datetime) -> datetime | None:
        _as_utc(at)
        return None

    def min_gap_s(self) -> int | None:
        return None

    def max_gap_s(self) -> int | None:
        return None

    def describe(self) -> str:
        return "once at every boot"


class _EverySchedule(Schedule):
    """@every DURATION: UTC epoch multiples of the duration, whatever the zone."""

    def __init__(self, expr: str, tz: str, seconds: int, written: str):
        self.expr, self.tz, self.kind = expr, tz, "every"
        self.is_fixed_time = False
        self.every_s: int = seconds
        self._written = written

    def _epoch_seconds(self, t: datetime) -> int:
        return (_as_utc(t) - _EPOCH) // _SECOND

    def next_after(self, after: datetime) -> datetime | None:
        n = self._epoch_seconds(after) // self.every_s + 1
        return self._instant(n * self.every_s)

    def prev_at_or_before(self, at: datetime) -> datetime | None:
        if not _reachable(_as_utc(at)):
            return None
        n = self._epoch_seconds(at) // self.every_s
        return self._instant(n * self.every_s)

    @staticmethod
    def _instant(seconds: int) -> datetime | None:
        """The instant `seconds` after the epoch; None past LATEST or before the calendar."""
        if not _FIRST_S <= seconds <= _LATEST_S:
            return None
        return _EPOCH + timedelta(seconds=seconds)

    def min_gap_s(self) -> int | None:
        return self.every_s

    def max_gap_s(self) -> int | None:
        return self.every_s

    def describe(self) -> str:
        return f"every {self._written} (UTC epoch multiples)"


class _CalendarSchedule(Schedule):
    """@calendar EXPR[; EXPR...]: systemd calendar expressions (OnCalendar=), each evaluated as
    systemd does (chronod.core.calendar); the schedule fires at the union of their elapses,
    once per instant, as one timer with several OnCalendar= lines does. DST follows systemd:
    a skipped time is not run, a repeated time runs in the pass the search is in."""

    def __init__(self, expr: str, tz: str, specs: tuple[CalendarSpec, ...], written: tuple[str, ...]):
        self.expr, self.tz, self.kind = expr, tz, "calendar"
        self.is_fixed_time, self.every_s = False, None
        self.specs, self._written = specs, written

    def next_after(self, after: datetime) -> datetime | None:
        a = _as_utc(after)
        if a >= LATEST:
            return None
        found = [t for t in (_elapse(spec, a, self.tz) for spec in self.specs) if t is not None]
        return _within(min(found)) if found else None

    def min_gap_s(self) -> int | None:
        return _calendar_gaps(self.expr, self.tz)[0]

    def max_gap_s(self) -> int | None:
        return _calendar_gaps(self.expr, self.tz)[1]

    def describe(self) -> str:
        words = " or ".join(f"'{w}'" for w in self._written)
        zone = "" if self.tz in _UTC_NAMES else f" ({self.tz})"
        return f"at systemd calendar {words}{zone}"


def _elapse(spec: CalendarSpec, after: datetime, tz: str) -> datetime | None:
    """The next elapse, or None where systemd's own search gives up (its timer stops there)."""
    try:
        return next_elapse(spec, after, tz)
    except CalendarStuck:
        return None


_GAP_SAMPLE = 1000  # fires
_GAP_YEARS = 8


@lru_cache(maxsize=4096)
def _calendar_gaps(expr: str, tz: str) -> tuple[int | None, int | None]:
    """Smallest and largest gap between fires, measured over the first fires from 2024 on
    (at most 1,000, at most 8 years): a calendar expression has no closed form for them."""
    schedule = compile_schedule(expr, tz)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    fires = schedule.fires(start, start + timedelta(days=366 * _GAP_YEARS), limit=_GAP_SAMPLE)
    gaps = [int((b - a).total_seconds()) for a, b in zip(fires, fires[1:])]
    return (min(gaps), max(gaps)) if gaps else (None, None)


def _calendar(expr: str, tz: str, rest: str) -> _CalendarSchedule:
    written = tuple(part.strip() for part in rest.split(";"))
    if not rest.strip() or not all(written):
        raise ScheduleError(
            f"{expr!r}: @calendar needs systemd calendar expressions, separated by ';'",
            "write @calendar Mon..Fri *-*-* 10:00, or @calendar daily; *-*-01 04:00",
        )
    specs = []
    for part in written:
        try:
            specs.append(parse_calendar(part, tz))
        except CalendarError as exc:
            raise ScheduleError(exc.message, exc.hint) from exc
    probe = datetime(2024, 1, 1, tzinfo=UTC)
    if all(_elapse(spec, probe, tz) is None for spec in specs):
        raise ScheduleError(f"{expr!r} never elapses after 2024", "check the year and the day (2030-02-30 never comes)")
    return _CalendarSchedule(expr, tz, tuple(specs), written)


# ---------------------------------------------------------------------------------------
# cron: wall-time search


def _month_length(y: int, m: int) -> int:
    if m == 2 and y % 4 == 0 and (y % 100 != 0 or y % 400 == 0):
        return 29
    return _MONTH_LEN[m]


def _matching_days(f: CronFields, y: int, m: int) -> tuple[int, ...]:
    first_cron_dow = (date(y, m, 1).weekday() + 1) % 7
    return f.days_in_month(first_cron_dow, _month_length(y, m))


# the first index of a sorted tuple whose value is >= x (the fields' values are sorted):
# bisect's C loop, ten times a Python scan of a 60-value field
_bisect_left = bisect.bisect_left


def next_wall(f: CronFields, t: datetime, max_year: int | None = None) -> datetime | None:
    """The first wall time >= `t` (naive, whole seconds) that matches `f`, or None."""
    y, mo, d, h, mi, s = t.year, t.month, t.day, t.hour, t.minute, t.second
    months, hours, minutes, seconds = f.months, f.hours, f.minutes, f.seconds
    last_year = min(9999, max_year if max_year is not None else y + _SEARCH_YEARS)
    while y <= last_year:
        i = _bisect_left(months, mo)
        if i == len(months):
            y, mo, d, h, mi, s = y + 1, 1, 1, 0, 0, 0
            continue
        if months[i] != mo:
            mo, d, h, mi, s = months[i], 1, 0, 0, 0
        days = _matching_days(f, y, mo)
        j = _bisect_left(days, d)
        if j == len(days):
            mo, d, h, mi, s = mo + 1, 1, 0, 0, 0
            if mo > 12:
                y, mo = y + 1, 1
            continue
        if days[j] != d:
            d, h, mi, s = days[j], 0, 0, 0
        k = _bisect_left(hours, h)
        if k == len(hours):
            d, h, mi, s = d + 1, 0, 0, 0
            continue
        if hours[k] != h:
            h, mi, s = hours[k], 0, 0
        m = _bisect_left(minutes, mi)
        if m == len(minutes):
            h, mi, s = h + 1, 0, 0
            continue
        if minutes[m] != mi:
            mi, s = minutes[m], 0
        n = _bisect_left(seconds, s)
        if n == len(seconds):
            mi, s = mi + 1, 0
            continue
        return datetime(y, mo, d, h, mi, seconds[n])
    return None


def _bisect_last(values: tuple[int, ...], x: int) -> int:
    """Index of the largest value <= x, or -1."""
    for i in range(len(values) - 1, -1, -1):
        if values[i] <= x:
            return i
    return -1


def prev_wall(f: CronFields, t: datetime, min_year: int | None = None) -> datetime | None:
    """The last wall time <= `t` (naive, whole seconds) that matches `f`, or None."""
    y, mo, d, h, mi, s = t.year, t.month, t.day, t.hour, t.minute, t.second
    months, hours, minutes, seconds = f.months, f.hours, f.minutes, f.seconds
    first_year = max(1, min_year if min_year is not None else y - _SEARCH_YEARS)
    while y >= first_year:
        i = _bisect_last(months, mo)
        if i < 0:
            y, mo, d, h, mi, s = y - 1, 12, 31, 23, 59, 59
            continue
        if months[i] != mo:
            mo, d, h, mi, s = months[i], 31, 23, 59, 59
        days = _matching_days(f, y, mo)
        j = _bisect_last(days, d)
        if j < 0:
            mo, d, h, mi, s = mo - 1, 31, 23, 59, 59
            if mo < 1:
                y, mo = y - 1, 12
            continue
        if days[j] != d:
            d, h, mi, s = days[j], 23, 59, 59
        k = _bisect_last(hours, h)
        if k < 0:
            d, h, mi, s = d - 1, 23, 59, 59
            continue
        if hours[k] != h:
            h, mi, s = hours[k], 59, 59
        m = _bisect_last(minutes, mi)
        if m < 0:
            h, mi, s = h - 1, 59, 59
            continue
        if minutes[m] != mi:
            mi, s = minutes[m], 59
        n = _bisect_last(seconds, s)
        if n < 0:
            mi, s = mi - 1, 59
            continue
        return datetime(y, mo, d, h, mi, seconds[n])
    return None


def _naive(t: datetime) -> datetime:
    return t.replace(tzinfo=None)


def _walls_in(f: CronFields, lo: datetime, hi: datetime) -> list[datetime]:
    """Every wall time in (lo, hi] (naive) that matches `f`, field by field: the fast path of
    `fires` for frequent schedules."""
    out: list[datetime] = []
    y, mo = lo.year, lo.month
    first_day = lo.replace(hour=0, minute=0, second=0, microsecond=0)
    while (y, mo) <= (hi.year, hi.month):
        if mo in f.months:
            for d in _matching_days(f, y, mo):
                day = datetime(y, mo, d)
                if day < first_day or day > hi:
                    continue
                for h in f.hours:
                    for mi in f.minutes:
                        for sec in f.seconds:
                            w = datetime(y, mo, d, h, mi, sec)
                            if lo < w <= hi:
                                out.append(w)
        mo += 1
        if mo > 12:
            y, mo = y + 1, 1
    return out


def wall_matches(f: CronFields, wall: datetime) -> bool:
    """Whether the naive wall time `wall` matches every field of `f` (Vixie's day rule)."""
    return (
        wall.second in f.seconds
        and wall.minute in f.minutes
        and wall.hour in f.hours
        and wall.month in f.months
        and f.day_matches(wall.day, (wall.weekday() + 1) % 7)
    )


# ---------------------------------------------------------------------------------------
# cron: zone mapping


def _transition_in(zone: ZoneInfo, lo: datetime, hi: datetime) -> datetime:
    """The first instant in (lo, hi] (UTC, whole seconds) whose offset differs from lo's."""
    before = _offset(lo.astimezone(zone))
    while hi - lo > _SECOND:
        mid = lo + timedelta(seconds=((hi - lo) // _SECOND) // 2)
        if _offset(mid.astimezone(zone)) == before:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class _Wall:
    """How one wall time maps to instants: 'normal', 'gap' or 'fold'."""

    case: str
    first: datetime  # the instant (normal), the first pass (fold), or the transition (gap)
    second: datetime | None  # second pass (fold)
    shift: timedelta  # size of the change (gap/fold), else 0
    resume: datetime | None  # gap: the first wall time after the gap
    before: datetime | None = None  # gap: the last wall time before the gap


def _map_wall(zone: ZoneInfo, wall: datetime) -> _Wall:
    u0 = wall.replace(tzinfo=zone).astimezone(UTC)
    u1 = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if u0 == u1:
        return _Wall("normal", u0, None, timedelta(0), None)
    if u0 < u1:
        return _Wall("fold", u0, u1, u1 - u0, None)
    # in a gap: fold=1 uses the offset after the change, fold=0 the offset before
    shift = u0 - u1
    t = _transition_in(zone, u1, u0)
    resume = t.astimezone(zone).replace(tzinfo=None)
    before = (t - _SECOND).astimezone(zone).replace(tzinfo=None)
    return _Wall("gap", t, None, shift, resume, before)


@lru_cache(maxsize=4096)
def _gap_fires(f: CronFields, zone: ZoneInfo, t: datetime, shift: timedelta) -> tuple[datetime, ...]:
    """Where a fixed-time job's matches inside a clock's forward jump at `t` fire under
    `dst_gap: shift`, as Debian's cron runs them: each skipped match once, right after the
    jump. Each needs its own instant (its own run id), so they take the seconds from `t` on,
    one each, in the order of the skipped times, leaving out the seconds at which the job
    fires anyway after the jump (`0 2,3 * * *`: 03:00 itself at `t`, the skipped 02:00 at
    `t` + 1 s). Skipped matches beyond the free seconds of the jump's length (only possible
    with a seconds field) are not run."""
    start = (t + _offset((t - _SECOND).astimezone(zone))).replace(tzinfo=None)  # the old clock at `t`
    size = int(shift.total_seconds())
    skipped = 0
    w = next_wall(f, start, max_year=start.year + 1)
    while w is not None and w < start + shift:
        skipped += 1
        w = next_wall(f, w + _SECOND, max_year=start.year + 1)
    after = start + shift  # the new clock at `t`
    out: list[datetime] = []
    for k in range(size):
        if len(out) == skipped:
            break
        if not wall_matches(f, after + timedelta(seconds=k)):
            out.append(t + timedelta(seconds=k))
    return tuple(out)


def _fmt_time(t: datetime, seconds: bool) -> str:
    return t.strftime("%H:%M:%S" if seconds else "%H:%M")


class _CronSchedule(Schedule):
    """A 5- or 6-field cron expression evaluated in a zone like Debian's cron."""

    def __init__(self, expr: str, tz: str, zone: ZoneInfo, fields: CronFields, dst_gap: str, dst_repeat: str):
        self.expr, self.tz, self.kind = expr, tz, "cron"
        self.is_fixed_time, self.every_s = fields.is_fixed_time, None
        self.dst_gap, self.dst_repeat = dst_gap, dst_repeat
        self.fields = fields
        self._zone = zone
        self._utc = tz in _UTC_NAMES
        # the rules in force: wildcard jobs follow the wall clock whatever was asked
        self._shift_gap = fields.is_fixed_time and dst_gap == "shift"
        self._repeat = dst_repeat if fields.is_fixed_time else "both"

    # -- many at once -------------------------------------------------------------------

    def fires(self, start: datetime, end: datetime, limit: int | None = None) -> list[datetime]:
        """As Schedule.fires, faster for long spans of frequent schedules: away from clock
        changes (more than 3 hours from any) wall times map to instants by one offset, so they
        are listed field by field; within 3 hours of a change the DST rules decide, one fire
        at a time."""
        a, b = _as_utc(start), _as_utc(end)
        if limit is not None or b - a < timedelta(days=2) or b >= LATEST or not _reachable(a):
            return super().fires(a, b, limit)
        if self._utc:
            return [w.replace(tzinfo=UTC) for w in _walls_in(self.fields, _naive(a), _naive(b))]
        out: list[datetime] = []
        lo = a
        for t in _transitions(self._zone, a - _CORRECTION, b + _CORRECTION):
            near_lo, near_hi = max(t - _CORRECTION, a), min(t + _CORRECTION, b)
            if near_lo > lo:
                out += self._calm(lo, near_lo)
            if near_hi > max(lo, near_lo):
                out += super().fires(max(lo, near_lo), near_hi)
            lo = max(lo, near_hi)
        if lo < b:
            out += self._calm(lo, b)
        return out

    def _calm(self, a: datetime, b: datetime) -> list[datetime]:
        """Fires in (a, b], a span with one UTC offset and no clock change within 3 hours."""
        off = _offset(a.astimezone(self._zone))
        return [(w - off).replace(tzinfo=UTC) for w in _walls_in(self.fields, _naive(a + off), _naive(b + off))]

    # -- next ---------------------------------------------------------------------------

    def next_after(self, after: datetime) -> datetime | None:
        return _cron_next_after(self, _as_utc(after))

    def _next_after(self, a: datetime) -> datetime | None:
        """`next_after`, computed (`a` in UTC)."""
        if a >= LATEST:
            return None
        if self._utc:
            w = next_wall(self.fields, a.replace(tzinfo=None, microsecond=0) + _SECOND)
            return None if w is None else _within(w.replace(tzinfo=UTC))
        return _within(self._next_zoned(a))

    def _candidates(self, m: _Wall) -> tuple[datetime, ...]:
        """The instants a matching wall time fires at, ascending (none, one or two)."""
        if m.case == "normal" or m.shift >= _CORRECTION:
            return (m.first,) if m.case != "gap" else ()
        if m.case == "fold":
            assert m.second is not None
            return {"first": (m.first,), "last": (m.second,), "both": (m.first, m.second)}[self._repeat]
        return _gap_fires(self.fields, self._zone, m.first, m.shift) if self._shift_gap else ()

    def _recent_gap_fires(self, a: datetime) -> tuple[datetime, ...]:
        """The skipped times' fires of a clock jump at or shortly before `a`: a wall-time
        search from `a` starts after such a gap, but its fires (one second apart from the
        jump on) may lie on either side of `a`."""
        zone = self._zone
        lo = a.replace(microsecond=0) - _CORRECTION
        before, now = _offset(lo.astimezone(zone)), _offset(a.astimezone(zone))
        if not timedelta(0) < now - before < _CORRECTION:
            return ()
        t = _transition_in(zone, lo, a.replace(microsecond=0) + _SECOND)
        shift = _offset(t.astimezone(zone)) - _offset((t - _SECOND).astimezone(zone))
        if not timedelta(0) < shift < _CORRECTION:
            return ()
        return _gap_fires(self.fields, zone, t, shift)

    def _pending_gap_fire(self, a: datetime) -> datetime | None:
        return next((f for f in self._recent_gap_fires(a) if f > a), None)

    def _next_zoned(self, a: datetime) -> datetime | None:
        calm = self._next_calm(a)
        if calm is not None:
            return calm
        zone = self._zone
        local = a.astimezone(zone)
        second = self._next_second_pass(a, local) if self._repeat != "first" else None
        pending = self._pending_gap_fire(a) if self._shift_gap else None
        if pending is not None:
            second = pending if second is None else min(second, pending)
        if local.fold:
            # `a` is in the second pass: every first-pass instant of the repeated interval is
            # behind it, so the search resumes where the repeated interval ends
            old = _offset(local.replace(fold=0))
            lo = a.replace(microsecond=0) - (old - _offset(local))
            wall = (_transition_in(zone, lo, a.replace(microsecond=0)) + old).replace(tzinfo=None)
        else:
            wall = local.replace(tzinfo=None, microsecond=0)
        w = next_wall(self.fields, wall)
        while w is not None:
            m = _map_wall(zone, w)
            if m.case == "gap" and m.shift < _CORRECTION:
                # a gap's skipped times fire one second apart from the jump on, possibly
                # after the first times that follow the gap: keep the earliest, search on
                later = [t for t in self._candidates(m) if t > a]
                if later:
                    second = later[0] if second is None else min(second, later[0])
                assert m.resume is not None  # a gap says where wall time resumes
                w = next_wall(self.fields, m.resume)
                continue
            # first-pass instants (and transition instants) never decrease with wall time
            if m.first > a and self._candidates(m):
                # a fold's only instant may be its second pass (`dst_repeat: last`)
                found = self._candidates(m)[0]
                return found if second is None else min(found, second)
            if second is not None and m.first >= second:
                return second
            resume = m.resume if m.case == "gap" else w + _SECOND
            assert resume is not None  # a gap says where wall time resumes
            w = next_wall(self.fields, resume)
        return second

    def _next_calm(self, a: datetime) -> datetime | None:
        """`_next_zoned` when the zone's clock changes neither within 2 days of `a` nor
        within 2 days of the answer (most asks): the first matching wall time after `a`'s
        reading, at the offset of its own time. A change between them (far from both)
        skips or repeats only wall times between the two, where nothing matches, so no
        second pass, skipped time or repeated time can come first. None: the search
        below decides."""
        zone = self._zone
        if _changes_near(zone, a - _CALM, a + _CALM):
            return None
        off = _offset(a.astimezone(zone))
        wall = (a + off).replace(tzinfo=None, microsecond=0)
        w = next_wall(self.fields, wall)
        if w is not None and (w - off).replace(tzinfo=UTC) <= a:  # `a`'s own second, a fraction past it
            w = next_wall(self.fields, w + _SECOND)
        if w is None:
            return None
        found = (w - off).replace(tzinfo=UTC)
        if found <= a + _CALM:  # by `a`'s offset, which holds there
            return found
        found = (w - _offset(found.astimezone(zone))).replace(tzinfo=UTC)
        if found <= a or _changes_near(zone, found - _CALM, found + _CALM):
            return None
        return found

    def _next_second_pass(self, a: datetime, local: datetime) -> datetime | None:
        """For jobs that fire in second passes: the first second-pass instant > `a` of a
        repeated interval (shorter than 3 hours) that `a` is in or that starts within 3
        hours of `a`."""
        zone = self._zone
        if local.fold:
            if _offset(local.replace(fold=0)) - _offset(local) >= _CORRECTION:
                return None
            w = next_wall(self.fields, local.replace(tzinfo=None, microsecond=0))
            while w is not None:
                m = _map_wall(zone, w)
                if m.case != "fold":
                    return None
                if m.second is not None and m.second > a:  # a fold has a second pass
                    return m.second
                w = next_wall(self.fields, w + _SECOND)
            return None
        soon = _offset((a + _CORRECTION).astimezone(zone))
        back = _offset(local) - soon
        if not timedelta(0) < back < _CORRECTION:
            return None
        lo = a.replace(microsecond=0)
        t = _transition_in(zone, lo, lo + _CORRECTION)
        fold_start = t.astimezone(zone).replace(tzinfo=None)
        w = next_wall(self.fields, fold_start)
        if w is None or w >= fold_start + back:
            return None
        return w.replace(tzinfo=zone, fold=1).astimezone(UTC)

    # -- previous -----------------------------------------------------------------------

    def prev_at_or_before(self, at: datetime) -> datetime | None:
        a = _as_utc(at)
        if not _reachable(a):
            return None
        floor = a.replace(microsecond=0)
        if self._utc:
            w = prev_wall(self.fields, floor.replace(tzinfo=None), min_year=a.year - 6)
            best = None if w is None else w.replace(tzinfo=UTC)
        else:
            best = self._prev_zoned(a)
        return best if best is not None and best >= a - _PREV_HORIZON else None

    def _prev_zoned(self, a: datetime) -> datetime | None:
        zone = self._zone
        local = a.astimezone(zone)
        wall = local.replace(tzinfo=None, microsecond=0)
        # `a` in the second pass of a fold: later wall times had their first pass already
        ahead = _offset((a - _CORRECTION).astimezone(zone)) - _offset(local)
        if timedelta(0) < ahead < _CORRECTION:
            wall += ahead
        best = None
        if self._shift_gap:
            best = max((f for f in self._recent_gap_fires(a) if f <= a), default=None)
        w = prev_wall(self.fields, wall, min_year=a.year - 6)
        while w is not None:
            m = _map_wall(zone, w)
            for inst in self._candidates(m):
                if inst <= a and (best is None or inst > best):
                    best = inst
            # the latest instant of a wall time never decreases with wall time
            fires = self._candidates(m)
            latest = m.second if m.case == "fold" else (fires[-1] if fires else m.first)
            if best is not None and latest is not None and latest <= best:
                if self._shift_gap:
                    # a jump up to 3 hours before `latest` may have fired its skipped times
                    # after `latest` (one second apart from the jump, beyond the wall times
                    # that follow it); earlier jumps fired theirs before `latest`
                    late = (f for f in self._recent_gap_fires(latest) if best < f <= a)
                    best = max(late, default=best)
                break
            back = m.before if m.case == "gap" else w - _SECOND
            assert back is not None  # a gap says where wall time stopped
            w = prev_wall(self.fields, back, min_year=a.year - 6)
        return best

    # -- gaps ---------------------------------------------------------------------------

    def min_gap_s(self) -> int | None:
        return _gaps(self.fields)[0]

    def max_gap_s(self) -> int | None:
        return _gaps(self.fields)[1]

    # -- words --------------------------------------------------------------------------

    def describe(self) -> str:
        text = _describe_fields(self.fields)
        return text if self._utc else f"{text} ({self.tz})"

    # -- DST ----------------------------------------------------------------------------

    def dst_events(self, start: datetime, end: datetime) -> list[DstEvent]:
        if self._utc:
            return []
        events = []
        for t in _transitions_between(self._zone, _as_utc(start), _as_utc(end)):
            event = self._event_at(t)
            if event is not None:
                events.append(event)
        return events

    def _walls_between(self, lo: datetime, hi: datetime, cap: int = 10000) -> list[datetime]:
        out: list[datetime] = []
        w = next_wall(self.fields, lo, max_year=hi.year)
        while w is not None and w < hi and len(out) < cap:
            out.append(w)
            w = next_wall(self.fields, w + _SECOND, max_year=hi.year)
        return out

    def _event_at(self, t: datetime) -> DstEvent | None:
        zone = self._zone
        before, after = (t - _SECOND).astimezone(zone), t.astimezone(zone)
        shift = _offset(after) - _offset(before)
        if not shift:
            return None
        wall_at_t = (t + _offset(before)).replace(tzinfo=None)  # the old clock's reading
        size = abs(shift)
        lo, hi = (wall_at_t, wall_at_t + shift) if shift > timedelta(0) else (wall_at_t + shift, wall_at_t)
        walls = self._walls_between(lo, hi)
        if not walls:
            return None
        secs = self.fields.has_seconds
        names = _list_times(walls, secs)
        n_before, n_after = before.tzname(), after.tzname()
        big = size >= _CORRECTION
        day = lo.date().isoformat()
        if shift > timedelta(0):
            change = "clock-correction" if big else "spring-forward"
            verb = "does" if len(walls) == 1 else "do"
            if big:
                effect = (
                    f"the clock jumps from {_fmt_time(lo, secs)} {n_before} to {hi:%Y-%m-%d %H:%M} {n_after} "
                    f"on {day}; {names} {verb} not exist and {_count(walls)} skipped "
                    f"(a jump of 3 hours or more is a correction: nothing is caught up)"
                )
            elif self._shift_gap and (fires := _gap_fires(self.fields, zone, t, shift)):
                first = fires[0].astimezone(zone)
                if len(walls) == 1:
                    effect = (
                        f"{names} {n_before} {verb} not exist on {day}; "
                        f"fires once at {_fmt_time(first, secs or first.second != 0)} {n_after} instead"
                    )
                else:
                    effect = (
                        f"{names} {n_before} {verb} not exist on {day}; fires {len(fires)} times right after the jump, "
                        f"once for each, one second apart from {_fmt_time(first, True)} {n_after}"
                    )
                if len(fires) < len(walls):
                    effect += f"; {_count(walls[len(fires) :])} skipped (no second after the jump is free for them)"
            elif self._shift_gap:
                # every second after the jump is one the job fires at anyway: no instant is
                # left for a skipped match (`_gap_fires`)
                effect = (
                    f"{names} {n_before} {verb} not exist on {day}; {_count(walls)} skipped "
                    f"(the job fires at every second right after the jump anyway)"
                )
            else:
                effect = f"{names} {n_before} {verb} not exist on {day}; {_count(walls)} skipped"
        else:
            change = "clock-correction" if big else "fall-back"
            verb = "happens" if len(walls) == 1 else "happen"
            passes = "first" if big else self._repeat
            effect = (
                f"{names} {verb} twice on {day} ({n_before}, then {n_after}); "
                + {
                    "first": f"fires only the first time ({n_before})",
                    "last": f"fires only the second time ({n_after})",
                    "both": "fires in both passes",
                }[passes]
            )
        return DstEvent(day, t, change, int(size.total_seconds()), effect)


# the next fire instants asked for lately, by schedule and UTC instant: the jobs that share
# a schedule (one object per expression, zone and DST policy: `compile_schedule`) ask for
# the same instants as their occurrences fall due together, and the checks that list a
# span's fires ask for each of them again; the answer is the schedule's, so it never goes stale
@lru_cache(maxsize=65536)
def _cron_next_after(schedule: _CronSchedule, after: datetime) -> datetime | None:
    return schedule._next_after(after)


def _count(walls: list[datetime]) -> str:
    n = len(walls)
    more = "+" if n >= 10000 else ""
    return "its fire is" if n == 1 else f"its {n}{more} fires are"


def _list_times(walls: list[datetime], seconds: bool) -> str:
    shown = [_fmt_time(w, seconds) for w in walls[:3]]
    if len(walls) > 3:
        return f"{', '.join(shown)}, … {_fmt_time(walls[-1], seconds)}"
    if len(shown) > 1:
        return f"{', '.join(shown[:-1])} and {shown[-1]}"
    return shown[0]


def _transitions(zone: ZoneInfo, start: datetime, end: datetime) -> Iterator[datetime]:
    """Every instant in [start, end) where the zone's UTC offset changes."""
    step = timedelta(hours=6)
    lo = start.replace(microsecond=0) - _SECOND
    off = _offset(lo.astimezone(zone))
    while lo < end:
        hi = min(lo + step, end)
        hi_off = _offset(hi.astimezone(zone))
        if hi_off != off:
            t = _transition_in(zone, lo, hi)
            if start <= t < end:
                yield t
            lo, off = t, _offset(t.astimezone(zone))
            continue
        lo = hi
        if hi == end:
            break


_CALM = timedelta(days=2)  # farther than any clock change reaches (a correction of a whole day)


def _changes_near(zone: ZoneInfo, lo: datetime, hi: datetime) -> bool:
    """Whether the zone's UTC offset changes in [lo, hi] (a span of days; at the ends of
    the calendar: True)."""
    if lo.year < 2 or hi.year > 9998:
        return True
    for year in range(lo.year, hi.year + 1):
        changes = _year_changes(zone, year)
        i = bisect.bisect_left(changes, lo)
        if i < len(changes) and changes[i] <= hi:
            return True
    return False


@lru_cache(maxsize=1024)
def _year_changes(zone: ZoneInfo, year: int) -> tuple[datetime, ...]:
    """The instants the zone's UTC offset changes in a calendar year (UTC), in order."""
    return tuple(_transitions(zone, datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)))


@lru_cache(maxsize=256)
def _transitions_between(zone: ZoneInfo, start: datetime, end: datetime) -> tuple[datetime, ...]:
    """`_transitions`, kept: a file's validation asks each fixed-time job near a clock change
    for its DST events over the same year (`validate._dst_events`), and the walk of a year
    in 6-hour steps cost 2 ms, per job, where the events themselves cost microseconds."""
    return tuple(_transitions(zone, start, end))


# ---------------------------------------------------------------------------------------
# cron: gaps between occurrences (in UTC terms, ignoring DST)


def _diffs(values: Sequence[int]) -> list[int]:
    return [b - a for a, b in zip(values, values[1:])]


@lru_cache(maxsize=65536)
def _gaps(f: CronFields) -> tuple[int, int]:
    S, M, H = f.seconds, f.minutes, f.hours
    inner: list[int] = []
    inner += _diffs(S)
    inner += [d * 60 - (S[-1] - S[0]) for d in _diffs(M)]
    in_hour = (M[-1] * 60 + S[-1]) - (M[0] * 60 + S[0])
    inner += [d * 3600 - in_hour for d in _diffs(H)]
    span = (H[-1] - H[0]) * 3600 + in_hour  # last time of day minus first time of day
    across = [d * 86400 - span for d in _day_steps(f)]
    gaps = inner + across
    return min(gaps), max(gaps)


_DAY_STEPS: dict[tuple[object, ...], set[int]] = {}


def _day_steps(f: CronFields) -> set[int]:
    # Only the day fields matter, and registries repeat them far more than whole expressions.
    key = (f.months, f.doms, f.dows, f.dom_star, f.dow_star)
    steps = _DAY_STEPS.get(key)
    if steps is None:
        if len(_DAY_STEPS) >= 65536:
            _DAY_STEPS.clear()
        steps = _DAY_STEPS[key] = _day_steps_of(f)
    return steps


def _day_steps_of(f: CronFields) -> set[int]:
    every_day = f.dom_star and f.dow_star and len(f.doms) == 31 and len(f.dows) == 7
    if every_day and len(f.months) == 12:
        return {1}
    for years in (8, _SEARCH_YEARS):
        ordinals: list[int] = []
        for y in range(2024, 2024 + years):
            for m in f.months:
                base = date(y, m, 1).toordinal() - 1
                ordinals.extend(base + d for d in _matching_days(f, y, m))
        if len(ordinals) >= 2:
            return set(_diffs(ordinals))
    raise AssertionError("a schedule that passed the never-fires check fires every 400 years")


# ---------------------------------------------------------------------------------------
# cron: words

_DOW_WORDS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


def _runs(values: tuple[int, ...]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for v in values:
        if out and out[-1][1] == v - 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def _words(values: tuple[int, ...], name: Callable[[int], str] = str, through: str = "-") -> str:
    parts: list[str] = []
    for a, b in _runs(values):
        if a == b:
            parts.append(name(a))
        elif b == a + 1:
            parts += [name(a), name(b)]
        else:
            parts.append(f"{name(a)}{through}{name(b)}")
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _step_of(values: tuple[int, ...], size: int) -> int | None:
    """k when values are 0, k, 2k, ... covering the whole field evenly."""
    if values[0] != 0 or len(values) < 2:
        return None
    k = values[1]
    return k if size % k == 0 and values == tuple(range(0, size, k)) else None


def _time_words(f: CronFields) -> tuple[str, bool]:
    """The time-of-day phrase, and whether it names specific times of a day."""
    S, M, H = f.seconds, f.minutes, f.hours
    all_h = len(H) == 24
    every_s = _step_of(S, 60) if (len(M) == 60 and all_h) else None
    if len(S) == 60 and len(M) == 60 and all_h:
        return "every second", False
    if every_s:
        return f"every {every_s} seconds", False
    sec = f" at second {S[0]}" if len(S) == 1 and S[0] else ""
    if len(S) == 1:
        if len(M) == 60 and all_h:
            return "every minute" + sec, False
        k = _step_of(M, 60)
        if k and all_h:
            return f"every {k} minutes" + sec, False
        if all_h:
            which = "minute" if len(M) == 1 else "minutes"
            return f"at {which} {_words(M)} of every hour" + sec, False
        if len(M) * len(H) <= 6:
            fmt = "%02d:%02d:%02d" if f.has_seconds else "%02d:%02d"
            times = [fmt % ((h, m, S[0]) if f.has_seconds else (h, m)) for h in H for m in M]
            return "at " + _words_list(times), True
        if len(M) == 60:
            return f"every minute{sec} during hour {_words(H)}", False
        which = "minute" if len(M) == 1 else "minutes"
        return f"at {which} {_words(M)} of hours {_words(H)}" + sec, False
    return f"at seconds {_words(S)} of minutes {_words(M)} of hours {_words(H)}", False


def _words_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _day_words(f: CronFields) -> str:
    doms = (
        None
        if len(f.doms) == 31
        else (f"on day {f.doms[0]} of the month" if len(f.doms) == 1 else f"on days {_words(f.doms)} of the month")
    )
    dows = None if len(f.dows) == 7 else "on " + _words(f.dows, lambda d: _DOW_WORDS[d], " through ")
    if doms and dows:
        days = f"{doms} or {dows}" if f.days_are_or else f"{doms} if it is {dows[3:]}"
    else:
        days = doms or dows or ""
    if len(f.months) < 12:
        months = "in " + _words(f.months, lambda m: calendar.month_name[m], " through ")
        days = f"{days} {months}".strip()
    return days


def _describe_fields(f: CronFields) -> str:
    time_text, specific = _time_words(f)
    days = _day_words(f)
    if not days:
        return f"{time_text} every day" if specific else time_text
    return f"{time_text} {days}"


# ---------------------------------------------------------------------------------------
# compile


@lru_cache(maxsize=1)
def _zone_names() -> tuple[str, ...]:
    from zoneinfo import available_timezones

    return tuple(sorted(available_timezones()))


def _zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        pass
    names = _zone_names()
    by_lower = {n.lower(): n for n in names}
    close = [by_lower[tz.lower()]] if tz.lower() in by_lower else difflib.get_close_matches(tz, names, n=3)
    hint = ("did you mean " + " or ".join(repr(c) for c in close) + "? ") if close else ""
    raise ScheduleError(f"unknown time zone {tz!r}", hint + "use an IANA name such as 'Europe/Berlin' or 'UTC'")


def _every_seconds(expr: str, arg: str) -> int:
    try:
        seconds = parse_duration(arg)
    except DurationError as exc:
        raise ScheduleError(f"@every {exc}", "write @every 90s, @every 5m, @every 1h30m or @every 1d") from exc
    if seconds <= 0:
        raise ScheduleError(f"{expr!r}: @every needs a duration above zero", "write @every 1s or longer")
    if seconds > MAX_EVERY_S:
        raise ScheduleError(
            f"{expr!r}: @every is longer than {days_text(MAX_EVERY_S)}",
            "write a cron expression for rarer jobs, such as '0 3 1 1 *' (yearly)",
        )
    return seconds


def compile_schedule(expr: str, tz: str = "UTC", dst_gap: str = "shift", dst_repeat: str = "first") -> Schedule:
    """Parse and compile `expr` for zone `tz` (cached). Raise ScheduleError when invalid,
    when the zone is unknown, or when the expression can never fire (`0 0 31 2 *`).

    `dst_gap` and `dst_repeat` are the job's DST policy (the defaults are cron's rules);
    only fixed-time cron schedules act on them."""
    return _compile(expr, tz, dst_gap, dst_repeat)


def _check_policy(dst_gap: str, dst_repeat: str) -> None:
    if dst_gap not in DST_GAP_POLICIES:
        raise ScheduleError(
            f"dst_gap {dst_gap!r} is not one of {', '.join(DST_GAP_POLICIES)}",
            "shift fires each skipped time when the clock jumps; skip does not run that day",
        )
    if dst_repeat not in DST_REPEAT_POLICIES:
        raise ScheduleError(
            f"dst_repeat {dst_repeat!r} is not one of {', '.join(DST_REPEAT_POLICIES)}",
            "first or last fires in that pass of the repeated time; both fires in each",
        )


def is_reboot(expr: str) -> bool:
    """Whether `expr` is an `@reboot` schedule (the kind `compile_schedule` gives it), told
    without compiling it."""
    return "@" in expr and expr.strip().partition(" ")[0].lower() == "@reboot"


@lru_cache(maxsize=131072)
def _compile(expr: str, tz: str, dst_gap: str, dst_repeat: str) -> Schedule:
    _check_policy(dst_gap, dst_repeat)
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleError("the schedule is empty", "write five fields such as '30 2 * * *', or @daily, @every 5m")
    zone = _zone(tz)
    head, _, rest = expr.strip().partition(" ")
    word = head.lower()
    if is_reboot(expr):
        if rest.strip():
            raise ScheduleError(f"{expr!r}: @reboot takes no argument", "write just @reboot")
        return _RebootSchedule(expr, tz)  # no clock times: the DST policy changes nothing
    if word == "@calendar":
        return _calendar(expr, tz, rest)
    if word == "@every":
        if not rest.strip():
            raise ScheduleError(f"{expr!r}: @every needs a duration", "write @every 90s, @every 5m or @every 1h30m")
        return _EverySchedule(expr, tz, _every_seconds(expr, rest.strip()), rest.strip())
    return _CronSchedule(expr, tz, zone, parse_fields(expr), dst_gap, dst_repeat)
