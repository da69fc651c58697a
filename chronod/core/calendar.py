"""systemd calendar expressions (`OnCalendar=`) -> fire instants, as systemd computes them.

The grammar is systemd.time(7)'s: `[WEEKDAYS] [[YEAR-]MONTH-DAY] [HOUR:MINUTE[:SECOND]] [ZONE]`
with `*`, values, `a..b` ranges, `/step` repetitions and `,` lists in every field, `~`
for days counted from the end of the month, the shorthands (`minutely`, `hourly`, `daily`,
`weekly`, `monthly`, `quarterly`, `semiannually`, `yearly`…), `@EPOCH`, two-digit years and a
time zone (`UTC`, an IANA name, or the zone's own abbreviation such as `EST`) at the end.

The next elapse is systemd's `find_next` (calendarspec.c), field by field on a broken-down
local time that the C library's `mktime` normalises after each step. Its DST rules follow
from that normalisation, not from cron's:

* a time the clock skips is not run that day: `mktime` moves it past the jump, the search
  goes on from there (`*-*-* 02:30` does not fire on a spring-forward day; `hourly` skips
  02:00);
* a time that happens twice is taken in the pass the search is in: searching from before
  it, the first pass (and not again in the second: the next search starts after it, on the
  wall clock); searching from inside the second pass, the second.

`mktime` resolves a repeated time by its previous answer's offset; this module keeps that
"guess" the same way (the offset of the last instant it resolved). Fractional seconds are
refused: chrono schedules whole seconds. Pure: no clock reads, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MIN_YEAR = 1970
MAX_YEAR = 2199
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_WEEKDAYS = (
    ("monday", 0),
    ("mon", 0),
    ("tuesday", 1),
    ("tue", 1),
    ("wednesday", 2),
    ("wed", 2),
    ("thursday", 3),
    ("thu", 3),
    ("friday", 4),
    ("fri", 4),
    ("saturday", 5),
    ("sat", 5),
    ("sunday", 6),
    ("sun", 6),
)
_ALL_WEEKDAYS = 127
_COMPONENTS_MAX = 240


class CalendarError(ValueError):
    """Not a calendar expression systemd (or chrono) accepts; `hint` says what to write."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Component:
    """One item of a field: `start`, `start..stop`, `start/repeat` or `start..stop/repeat`
    (stop -1: open; repeat 0: a single value)."""

    start: int
    stop: int = -1
    repeat: int = 0


Chain = tuple[Component, ...]  # () is `*` (any value)


@dataclass(frozen=True)
class CalendarSpec:
    """A parsed expression. `seconds` holds whole seconds (systemd keeps microseconds)."""

    weekdays: int  # bit 0 Monday .. bit 6 Sunday; -1 any
    years: Chain
    months: Chain
    days: Chain
    end_of_month: bool
    hours: Chain
    minutes: Chain
    seconds: Chain
    utc: bool
    zone: str | None  # an IANA zone named in the expression
    dst: int  # -1: the zone decides; 0/1: the expression named its standard or summer abbreviation


# --- parsing ------------------------------------------------------------------------------

_SHORTHANDS: dict[str, dict[str, Chain]] = {}


def _const(*values: int) -> Chain:
    return tuple(Component(v) for v in values)


_SHORTHANDS = {
    "minutely": {"seconds": _const(0)},
    "hourly": {"minutes": _const(0), "seconds": _const(0)},
    "daily": {"hours": _const(0), "minutes": _const(0), "seconds": _const(0)},
    "monthly": {"days": _const(1), "hours": _const(0), "minutes": _const(0), "seconds": _const(0)},
    "weekly": {"hours": _const(0), "minutes": _const(0), "seconds": _const(0)},
    "yearly": {"months": _const(1), "days": _const(1), "hours": _const(0), "minutes": _const(0), "seconds": _const(0)},
    "quarterly": {
        "months": _const(1, 4, 7, 10),
        "days": _const(1),
        "hours": _const(0),
        "minutes": _const(0),
        "seconds": _const(0),
    },
    "semiannually": {
        "months": _const(1, 7),
        "days": _const(1),
        "hours": _const(0),
        "minutes": _const(0),
        "seconds": _const(0),
    },
}
for _alias, _name in (
    ("annually", "yearly"),
    ("anually", "yearly"),
    ("biannually", "semiannually"),
    ("bi-annually", "semiannually"),
    ("semi-annually", "semiannually"),
):
    _SHORTHANDS[_alias] = _SHORTHANDS[_name]


class _Reader:
    def __init__(self, text: str, whole: str):
        self.text, self.i, self.whole = text, 0, whole

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.text[j] if j < len(self.text) else ""

    def fail(self, what: str) -> CalendarError:
        return CalendarError(
            f"calendar expression {self.whole!r}: {what}",
            "write it as systemd.time(7) does, e.g. 'Mon..Fri *-*-* 10:00', '*-*-01 04:00:00', 'daily'",
        )


def _number(r: _Reader, seconds: bool) -> int:
    j = r.i
    while r.peek().isdigit():
        r.i += 1
    if j == r.i:
        raise r.fail(f"expected a number at {r.text[j:] or 'the end'!r}")
    value = int(r.text[j : r.i])
    if seconds and r.peek() == "." and r.peek(1) != ".":
        frac = r.i + 1
        while r.i + 1 < len(r.text) and r.text[r.i + 1].isdigit():
            r.i += 1
        r.i += 1
        if int(r.text[frac : r.i] or "0"):
            raise r.fail("fractional seconds: chrono schedules whole seconds")
    if value > 2**31 - 1:
        raise r.fail(f"{value} is too large")
    return value


def _chain(r: _Reader, seconds: bool) -> Chain:
    if r.peek() == "*":
        r.i += 1
        return ()
    items: list[Component] = []
    while True:
        if len(items) > _COMPONENTS_MAX:
            raise r.fail("too many list items")
        start = _number(r, seconds)
        stop, repeat = -1, 0
        if r.peek() == "." and r.peek(1) == ".":
            r.i += 2
            stop, repeat = _number(r, seconds), 1
        if r.peek() == "/":
            r.i += 1
            repeat = _number(r, seconds)
            if repeat == 0:
                raise r.fail("a repetition of 0")
        if r.peek() not in ("", " ", ",", "-", "~", ":"):
            raise r.fail(f"unexpected {r.peek()!r}")
        items.append(Component(start, stop, repeat))
        if r.peek() != ",":
            return tuple(items)
        r.i += 1


def _weekdays(r: _Reader) -> int:
    bits, low, first = 0, -1, True
    while True:
        rest = r.text[r.i :].lower()
        found = next(((name, nr) for name, nr in _WEEKDAYS if rest.startswith(name)), None)
        if found is None:
            if first:
                return 0
            raise r.fail("expected a weekday after ',' or '..'")
        name, nr = found
        after = r.text[r.i + len(name) : r.i + len(name) + 1]
        if after not in ("", "-", ".", ",", " "):
            raise r.fail(f"{r.text[r.i : r.i + len(name) + 1]!r} is not a weekday")
        bits |= 1 << nr
        if low >= 0:
            if low > nr:
                raise r.fail("a weekday range must go forward (Mon..Fri, not Fri..Mon)")
            for j in range(low + 1, nr):
                bits |= 1 << j
        r.i += len(name)
        if r.peek() == "":
            return bits
        if r.peek() == " ":
            while r.peek() == " ":
                r.i += 1
            return bits
        if r.peek() == ".":
            if low >= 0 or r.peek(1) != ".":
                raise r.fail("weekday ranges are written Mon..Fri")
            low = nr
            r.i += 2
        elif r.peek() == "-":
            if low >= 0:
                raise r.fail("weekday ranges are written Mon..Fri")
            low = nr
            r.i += 1
        elif r.peek() == ",":
            low = -1
            r.i += 1
        if r.peek() in ("", " "):
            while r.peek() == " ":
                r.i += 1
            if low >= 0:
                raise r.fail("an open weekday range")
            return bits
        first = False


def _date(r: _Reader, out: dict[str, object]) -> bool:
    """Parse the date part into `out`; True when the expression is complete (`@EPOCH`)."""
    if r.peek() == "":
        return False
    if r.peek() == "@":
        r.i += 1
        stamp = _number(r, False)
        t = _EPOCH + timedelta(seconds=stamp)
        out.update(
            years=_const(t.year),
            months=_const(t.month),
            days=_const(t.day),
            hours=_const(t.hour),
            minutes=_const(t.minute),
            seconds=_const(t.second),
            utc=True,
        )
        return True
    start = r.i
    first = _chain(r, False)
    if r.peek() in ("", ":"):
        r.i = start  # a time, not a date
        return False
    if r.peek() == "~":
        out["end_of_month"] = True
    elif r.peek() != "-":
        raise r.fail(f"unexpected {r.peek()!r} in the date")
    r.i += 1
    second = _chain(r, False)
    if r.peek() in ("", " "):
        while r.peek() == " ":
            r.i += 1
        out.update(months=first, days=second)
        return False
    if out.get("end_of_month"):
        raise r.fail("'~' goes between the month and the day")
    if r.peek() == "~":
        out["end_of_month"] = True
    elif r.peek() != "-":
        raise r.fail(f"unexpected {r.peek()!r} in the date")
    r.i += 1
    third = _chain(r, False)
    if r.peek() not in ("", " "):
        raise r.fail(f"unexpected {r.peek()!r} after the date")
    while r.peek() == " ":
        r.i += 1
    out.update(years=first, months=second, days=third)
    return False


def _time(r: _Reader, out: dict[str, object]) -> None:
    if r.peek() == "":
        out.update(hours=_const(0), minutes=_const(0), seconds=_const(0))
        return
    hours = _chain(r, False)
    if r.peek() != ":":
        raise r.fail("expected ':' between the hour and the minute")
    r.i += 1
    minutes = _chain(r, False)
    seconds: Chain = _const(0)
    if r.peek() == ":":
        r.i += 1
        seconds = _chain(r, True)
    elif r.peek() != "":
        raise r.fail(f"unexpected {r.peek()!r} in the time")
    if r.peek() != "":
        raise r.fail(f"unexpected {r.text[r.i :]!r} at the end")
    out.update(hours=hours, minutes=minutes, seconds=seconds)


def _fix_years(chain: Chain) -> Chain:
    def fix(v: int) -> int:
        if 0 <= v < 70:
            return v + 2000
        if 70 <= v < 100:
            return v + 1900
        return v

    return tuple(Component(fix(c.start), fix(c.stop) if c.stop >= 0 else c.stop, c.repeat) for c in chain)


def _normalize(chain: Chain) -> Chain:
    fixed = []
    for c in chain:
        stop = c.stop
        if stop > c.start and c.repeat > 0:
            stop -= (stop - c.start) % c.repeat
        if stop == c.start:  # a range the repetition leaves one value of is that value
            fixed.append(Component(c.start))
            continue
        fixed.append(Component(c.start, stop, c.repeat))
    return tuple(sorted(set(fixed), key=lambda c: (c.start, c.stop, c.repeat)))


def _valid(chain: Chain, low: int, high: int, end_of_month: bool = False) -> bool:
    if end_of_month:
        high -= 3
    for c in chain:
        if not low <= c.start <= high or c.repeat > high - low:
            return False
        if c.stop >= 0:
            if not low <= c.stop <= high or c.start + c.repeat > c.stop:
                return False
        elif end_of_month and c.start - c.repeat < low:
            return False
        elif not end_of_month and c.start + c.repeat > high:
            return False
    return True


def zone_abbreviations(zone: ZoneInfo) -> tuple[str | None, str | None]:
    """(standard, summer) abbreviations of a zone as tzset() sets tzname, from the current rules."""
    std = dst = None
    for month in (1, 7):
        t = datetime(2026, month, 15, 12, tzinfo=zone)
        if t.dst():
            dst = t.tzname()
        else:
            std = t.tzname()
    return std, dst


def parse_calendar(text: str, local_zone: str = "UTC") -> CalendarSpec:
    """One `OnCalendar=` expression. `local_zone` is the zone the expression is read in when
    it names none (its abbreviations, such as EST and EDT, are recognised at the end)."""
    whole = text
    p = text.strip(" ")
    utc, zone, dst = False, None, -1
    if p.lower().endswith(" utc"):
        utc, p = True, p[:-4]
    else:
        try:
            std, summer = zone_abbreviations(ZoneInfo(local_zone))
        except (ZoneInfoNotFoundError, ValueError):
            std = summer = None
        for j, name in enumerate((std, summer)):
            if name and p.lower().endswith(" " + name.lower()) and len(p) > len(name) + 1:
                p, dst = p[: -len(name) - 1], j
                break
        else:
            head, space, last = p.rpartition(" ")
            if space and _is_zone(last):
                zone, p = last, head
    if not p:
        raise CalendarError(f"calendar expression {whole!r} is empty", "write e.g. 'daily' or '*-*-* 04:00:00'")
    if zone == "UTC":
        utc, zone = True, None
    fields: dict[str, object] = {}
    shorthand = _SHORTHANDS.get(p.lower())
    weekdays = 0
    if shorthand is not None:
        fields.update(shorthand)
        if p.lower() == "weekly":
            weekdays = 1
    else:
        r = _Reader(p, whole)
        weekdays = _weekdays(r)
        if not _date(r, fields):
            _time(r, fields)
        if r.peek() != "":
            raise r.fail(f"unexpected {r.text[r.i :]!r} at the end")
    utc = utc or bool(fields.pop("utc", False))
    end_of_month = bool(fields.get("end_of_month", False))
    days = _normalize(_chain_of(fields, "days"))
    if end_of_month and not days:
        end_of_month = False
    spec = CalendarSpec(
        weekdays=-1 if weekdays <= 0 or weekdays >= _ALL_WEEKDAYS else weekdays,
        years=_normalize(_fix_years(_chain_of(fields, "years"))),
        months=_normalize(_chain_of(fields, "months")),
        days=days,
        end_of_month=end_of_month,
        hours=_normalize(_chain_of(fields, "hours")),
        minutes=_normalize(_chain_of(fields, "minutes")),
        seconds=_normalize(_chain_of(fields, "seconds")),
        utc=utc,
        zone=zone,
        dst=dst,
    )
    if not (
        _valid(spec.years, MIN_YEAR, MAX_YEAR)
        and _valid(spec.months, 1, 12)
        and _valid(spec.days, 1, 31, spec.end_of_month)
        and _valid(spec.hours, 0, 23)
        and _valid(spec.minutes, 0, 59)
        and _valid(spec.seconds, 0, 59)
    ):
        raise CalendarError(
            f"calendar expression {whole!r}: a value or repetition is out of range",
            f"years {MIN_YEAR}-{MAX_YEAR}, months 1-12, days 1-31 (1-28 with '~'), hours 0-23, minutes and "
            "seconds 0-59; a repetition must fit its range",
        )
    return spec


def _chain_of(fields: dict[str, object], name: str) -> Chain:
    value = fields.get(name, ())
    assert isinstance(value, tuple)
    return value


@lru_cache(maxsize=4096)
def _is_zone(name: str) -> bool:
    if not re.fullmatch(r"[A-Za-z0-9_+\-/]+", name) or name.startswith("/") or ".." in name:
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


# --- the C library's mktime, as find_next uses it --------------------------------------------


@dataclass
class _Tm:
    """A broken-down time as struct tm holds it (month 0-11, day 1-31, may be out of range)."""

    year: int
    mon: int
    mday: int
    hour: int
    min: int
    sec: int
    isdst: int = -1

    def copy(self) -> _Tm:
        return _Tm(self.year, self.mon, self.mday, self.hour, self.min, self.sec, self.isdst)

    def same_fields(self, other: _Tm) -> bool:
        return (self.year, self.mon, self.mday, self.hour, self.min, self.sec) == (
            other.year,
            other.mon,
            other.mday,
            other.hour,
            other.min,
            other.sec,
        )


class _Clock:
    """mktime and localtime in one zone (or UTC), with mktime's memory of its last offset."""

    def __init__(self, zone: ZoneInfo | None):
        self.zone = zone
        self.guess: timedelta | None = None

    def wall(self, tm: _Tm) -> datetime | None:
        """The naive wall time `tm` denotes once normalised, or None beyond datetime's range."""
        y, m = divmod(tm.mon, 12)
        year = tm.year + y
        if not 1 <= year <= 9998:
            return None
        return datetime(year, m + 1, 1) + timedelta(days=tm.mday - 1, hours=tm.hour, minutes=tm.min, seconds=tm.sec)

    def mktime(self, tm: _Tm) -> datetime | None:
        """Normalise `tm` in place (mktime's side effect) and return its instant (aware UTC)."""
        wall = self.wall(tm)
        if wall is None:
            return None
        if self.zone is None:
            t = wall.replace(tzinfo=UTC)
        else:
            t = self._resolve(wall, tm.isdst)
            self.guess = _offset(t.astimezone(self.zone))
        self._set(tm, t)
        return t

    def _resolve(self, wall: datetime, isdst: int) -> datetime:
        assert self.zone is not None
        first = wall.replace(tzinfo=self.zone, fold=0)
        second = wall.replace(tzinfo=self.zone, fold=1)
        o1, o2 = _offset(first), _offset(second)
        if o1 == o2:
            if isdst >= 0 and bool(first.dst()) != bool(isdst):
                # glibc reads the wall time with the offset of the asked-for kind (summer or
                # standard) in force nearest to it: an hour off across a clock change
                other = self._nearest_offset((wall - o1).replace(tzinfo=UTC), bool(isdst))
                if other is not None:
                    return (wall - other).replace(tzinfo=UTC)
            return first.astimezone(UTC)
        u1, u2 = (wall - o1).replace(tzinfo=UTC), (wall - o2).replace(tzinfo=UTC)
        if u1 > u2:  # in a gap: read with the offset in force before the jump
            return u1
        if isdst >= 0:  # repeated: the pass whose DST flag was asked for
            want = first if bool(first.dst()) == bool(isdst) else second
            return want.astimezone(UTC)
        return u2 if self.guess == o2 else u1

    def _nearest_offset(self, u: datetime, summer: bool) -> timedelta | None:
        assert self.zone is not None
        for days in range(1, 400, 7):
            for probe in (u - timedelta(days=days), u + timedelta(days=days)):
                local = probe.astimezone(self.zone)
                if bool(local.dst()) == summer:
                    return _offset(local)
        return None

    def localtime(self, t: datetime) -> _Tm:
        tm = _Tm(0, 0, 0, 0, 0, 0)
        self._set(tm, t)
        return tm

    def _set(self, tm: _Tm, t: datetime) -> None:
        local = t.astimezone(self.zone) if self.zone is not None else t
        tm.year, tm.mon, tm.mday = local.year, local.month - 1, local.day
        tm.hour, tm.min, tm.sec = local.hour, local.minute, local.second
        if self.zone is not None:
            tm.isdst = 1 if local.dst() else 0


def _offset(t: datetime) -> timedelta:
    off = t.utcoffset()
    assert off is not None
    return off


# --- find_next -------------------------------------------------------------------------------


def _end_of_month(clock: _Clock, tm: _Tm, day: int) -> int:
    t = tm.copy()
    t.mon += 1
    t.mday = 1 - day
    if clock.mktime(t) is None or t.mon != tm.mon:
        return -1
    return t.mday


def _matching(spec: CalendarSpec, chain: Chain, clock: _Clock, tm: _Tm, value: int, is_day: bool) -> tuple[int, int]:
    """(r, new value): r 0 the value matches, 1 it moved forward, -1 none is left."""
    if not chain:
        return 0, value
    best: int | None = None
    for c in chain:
        start, stop = c.start, c.stop
        if spec.end_of_month and is_day:
            start = _end_of_month(clock, tm, start)
            stop = _end_of_month(clock, tm, stop)
            if stop > 0:
                start, stop = stop, start
        if start >= value:
            if best is None or start < best:
                best = start
        elif c.repeat > 0:
            k = start + c.repeat * -(-(value - start) // c.repeat)
            if (best is None or k < best) and (stop < 0 or k <= stop):
                best = k
    if best is None:
        return -1, value
    return (1 if best != value else 0), best


def _within_bounds(clock: _Clock, tm: _Tm) -> int:
    """1 when mktime keeps `tm` as it is; 0 when it moves it forward (`tm` becomes the moved
    time, the unit below the first field that changed reset to its start, as systemd 249+
    does so that normalising 3-33 into 4-2 does not skip 4-1); -1 when it moves it back
    (systemd refuses to go backward) or past the last year."""
    if tm.year > MAX_YEAR:
        return -1
    t = tm.copy()
    if clock.mktime(t) is None:
        return -1
    cmp = 0
    for name, below, start in (
        ("year", "mon", 0),
        ("mon", "mday", 1),
        ("mday", "hour", 0),
        ("hour", "min", 0),
        ("min", "sec", 0),
        ("sec", "", 0),
    ):
        a, b = getattr(t, name), getattr(tm, name)
        if a != b:
            cmp = 1 if a > b else -1
            if below:
                setattr(t, below, start)
            break
    if cmp < 0:
        return -1
    if cmp > 0:
        tm.year, tm.mon, tm.mday, tm.hour, tm.min, tm.sec = t.year, t.mon, t.mday, t.hour, t.min, t.sec
        tm.isdst = t.isdst
        return 0
    return 1


def _weekday_matches(bits: int, clock: _Clock, tm: _Tm) -> bool:
    if bits < 0:
        return True
    t = tm.copy()
    if clock.mktime(t) is None:
        return False
    wall = clock.wall(t)
    assert wall is not None
    return bool(bits & (1 << wall.weekday()))


class CalendarStuck(Exception):
    """systemd gives up after 1,000 rounds of its search ("Infinite loop in calendar
    calculation"): the timer computes no next elapse and stops."""


MAX_ITERATIONS = 1000  # calendarspec.c's MAX_CALENDAR_ITERATIONS


def _find_next(spec: CalendarSpec, clock: _Clock, c: _Tm) -> _Tm | None:
    for _ in range(MAX_ITERATIONS):
        clock.mktime(c)
        c.isdst = spec.dst
        r, c.year = _matching(spec, spec.years, clock, c, c.year, False)
        if r > 0:
            c.mon, c.mday, c.hour, c.min, c.sec = 0, 1, 0, 0, 0
        if r < 0 or _within_bounds(clock, c) <= 0:
            return None
        r, month = _matching(spec, spec.months, clock, c, c.mon + 1, False)
        c.mon = month - 1
        if r > 0:
            c.mday, c.hour, c.min, c.sec = 1, 0, 0, 0
        if r < 0 or (r := _within_bounds(clock, c)) < 0:
            c.year, c.mon, c.mday, c.hour, c.min, c.sec = c.year + 1, 0, 1, 0, 0, 0
            continue
        if r == 0:
            continue
        r, c.mday = _matching(spec, spec.days, clock, c, c.mday, True)
        if r > 0:
            c.hour, c.min, c.sec = 0, 0, 0
        if r < 0 or (r := _within_bounds(clock, c)) < 0:
            c.mon, c.mday, c.hour, c.min, c.sec = c.mon + 1, 1, 0, 0, 0
            continue
        if r == 0:
            continue
        if not _weekday_matches(spec.weekdays, clock, c):
            c.mday, c.hour, c.min, c.sec = c.mday + 1, 0, 0, 0
            continue
        r, c.hour = _matching(spec, spec.hours, clock, c, c.hour, False)
        if r > 0:
            c.min, c.sec = 0, 0
        if r < 0 or (r := _within_bounds(clock, c)) < 0:
            c.mday, c.hour, c.min, c.sec = c.mday + 1, 0, 0, 0
            continue
        if r == 0:
            continue
        r, c.min = _matching(spec, spec.minutes, clock, c, c.min, False)
        if r > 0:
            c.sec = 0
        if r < 0 or (r := _within_bounds(clock, c)) < 0:
            c.hour, c.min, c.sec = c.hour + 1, 0, 0
            continue
        if r == 0:
            continue
        r, c.sec = _matching(spec, spec.seconds, clock, c, c.sec, False)
        if r < 0 or (r := _within_bounds(clock, c)) < 0:
            c.min, c.sec = c.min + 1, 0
            continue
        if r == 0:
            continue
        return c
    raise CalendarStuck(f"no elapse found in {MAX_ITERATIONS} rounds")


def next_elapse(spec: CalendarSpec, after: datetime, local_zone: str = "UTC") -> datetime | None:
    """The first elapse strictly after `after` (aware), as aware UTC, or None when the
    expression never elapses again (before MAX_YEAR's end). Raises CalendarStuck where
    systemd's own search gives up (its timer then stops). Whole seconds: systemd adds one
    microsecond to `after` and searches from the second that holds it."""
    name = None if spec.utc else (spec.zone or local_zone)
    zone = None if name is None or name in ("UTC", "Etc/UTC") else ZoneInfo(name)
    clock = _Clock(zone)
    base = after.astimezone(UTC) + timedelta(microseconds=1)
    start = base.replace(microsecond=0) + (timedelta(seconds=1) if base.microsecond else timedelta(0))
    # systemd starts from the second holding after + 1 µs and keeps the microseconds; with
    # whole-second values only, the first candidate second is the next whole one
    tm = clock.localtime(base.replace(microsecond=0))
    clock.mktime(tm.copy())  # localtime's answer, with its DST flag, seeds mktime's guess
    if start != base.replace(microsecond=0):
        tm.sec += 1
    found = _find_next(spec, clock, tm)
    if found is None:
        return None
    return clock.mktime(found)
