"""Cron expressions -> sorted value sets per field, with Vixie cron's parsing rules.

This module only parses; `schedule.py` turns the field sets into fire instants in a zone.
"""

from __future__ import annotations

import calendar
import difflib
from dataclasses import dataclass, field
from functools import lru_cache


class ScheduleError(ValueError):
    """The cron expression is not valid; `hint` says what to write instead."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint


MONTH_NAMES = {n.lower(): i for i, n in enumerate(calendar.month_abbr) if n}
DOW_NAMES = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
SPECIAL = tuple(MACROS) + ("@every", "@reboot")

# (name, low, high, names) per position; day-of-week accepts 7 as a second Sunday.
_SPECS = {
    "second": (0, 59, None),
    "minute": (0, 59, None),
    "hour": (0, 23, None),
    "day-of-month": (1, 31, None),
    "month": (1, 12, MONTH_NAMES),
    "day-of-week": (0, 7, DOW_NAMES),
}
FIVE = ("minute", "hour", "day-of-month", "month", "day-of-week")
SIX = ("second",) + FIVE
_MAX_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}


@dataclass(frozen=True, slots=True)
class CronFields:
    """One cron expression as sorted tuples of allowed values per field.

    Kept small, as 100,000 jobs hold thousands of these: the value tuples are shared
    between expressions (`parse_field` is cached), the day fields are also bit masks, and
    the matching days of a month come from one cache for all expressions."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    doms: tuple[int, ...]
    months: tuple[int, ...]
    dows: tuple[int, ...]  # 0 = Sunday .. 6 = Saturday (7 folded into 0)
    dom_star: bool  # the field starts with '*' (Vixie's DOM_STAR): not restricted
    dow_star: bool
    minute_star: bool
    hour_star: bool
    has_seconds: bool
    _dom_mask: int = field(default=0, compare=False, repr=False)  # bit d set: day d of the month allowed
    _dow_mask: int = field(default=0, compare=False, repr=False)  # bit w set: weekday w allowed

    @property
    def is_fixed_time(self) -> bool:
        """docs/reference.md, Time zones and daylight saving time: neither the minute nor the hour field starts with '*'."""
        return not (self.minute_star or self.hour_star)

    @property
    def days_are_or(self) -> bool:
        """Both day fields restricted: a day matches when either of them matches."""
        return not (self.dom_star or self.dow_star)

    def day_matches(self, dom: int, cron_dow: int) -> bool:
        """Vixie's day rule for a day of the month and a weekday (0 = Sunday)."""
        return _day_matches(self._dom_mask, self._dow_mask, self.days_are_or, dom, cron_dow)

    def days_in_month(self, first_cron_dow: int, length: int) -> tuple[int, ...]:
        """The matching days of a month that starts on `first_cron_dow` and has `length` days
        (the month itself is checked by the caller)."""
        return _days_in_month(self._dom_mask, self._dow_mask, self.days_are_or, first_cron_dow, length)


def _mask(values: tuple[int, ...]) -> int:
    out = 0
    for v in values:
        out |= 1 << v
    return out


def _day_matches(dom_mask: int, dow_mask: int, days_are_or: bool, dom: int, cron_dow: int) -> bool:
    in_dom = (dom_mask >> dom) & 1
    in_dow = (dow_mask >> cron_dow) & 1
    return bool(in_dom or in_dow) if days_are_or else bool(in_dom and in_dow)


@lru_cache(maxsize=65536)
def _days_in_month(
    dom_mask: int, dow_mask: int, days_are_or: bool, first_cron_dow: int, length: int
) -> tuple[int, ...]:
    # one entry per distinct pair of day fields and month shape: shared by every expression
    return tuple(
        d
        for d in range(1, length + 1)
        if _day_matches(dom_mask, dow_mask, days_are_or, d, (first_cron_dow + d - 1) % 7)
    )


def _fail(name: str, text: str, what: str, hint: str) -> ScheduleError:
    return ScheduleError(f"{name} field {text!r}: {what}", hint)


def _number(name: str, whole: str, token: str) -> int:
    low, high, names = _SPECS[name]
    t = token.lower()
    if names and t in names:
        return names[t]
    if not t.isdigit():
        hint = f"use numbers {low}-{high}"
        if names:
            hint += " or names " + "/".join(list(names)[:3]) + "/…"
            close = difflib.get_close_matches(t, list(names), n=1)
            if close:
                hint = f"did you mean {close[0]!r}? " + hint
        raise _fail(name, whole, f"{token!r} is not a number", hint)
    value = int(t)
    if not low <= value <= high:
        raise _fail(name, whole, f"{value} is out of range {low}-{high}", f"use values from {low} to {high}")
    return value


def _item(name: str, whole: str, item: str) -> range:
    low, high, _ = _SPECS[name]
    if not item:
        raise _fail(name, whole, "empty list item", "separate values with single commas: 1,15,30")
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit():
            raise _fail(name, whole, f"step {step_text!r} is not a number", "write a step like */5 or 1-30/5")
        step = int(step_text)
        if step == 0:
            raise _fail(name, whole, "a step of 0 never advances", "use a step of 1 or more, such as */5")
    if base == "*":
        return range(low, high + 1, step)
    first_text, dash, last_text = base.partition("-")
    first = _number(name, whole, first_text)
    if dash:
        last = _number(name, whole, last_text)
    else:
        last = high if slash else first  # "N/S" means N-max/S, as Vixie accepts
    if last < first:
        raise _fail(
            name,
            whole,
            f"range {base!r} runs backwards",
            f"write it as two ranges, such as {first}-{high},{low}-{last}",
        )
    return range(first, last + 1, step)


@lru_cache(maxsize=16384)
def parse_field(name: str, text: str) -> tuple[int, ...]:
    """The sorted allowed values of one field ("day-of-week" folds 7 into 0)."""
    values: set[int] = set()
    for item in text.split(","):
        values.update(_item(name, text, item))
    if name == "day-of-week" and 7 in values:
        values.discard(7)
        values.add(0)
    return tuple(sorted(values))


def _expand_macro(text: str) -> str:
    word = text.lower()
    if word in MACROS:
        return MACROS[word]
    close = difflib.get_close_matches(word, SPECIAL, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise ScheduleError(f"unknown macro {text!r}", hint + "use one of " + " ".join(SPECIAL))


def _check_can_fire(f: CronFields) -> None:
    if f.days_are_or:
        return  # every month has every weekday
    if any(d <= _MAX_DAYS[m] for m in f.months for d in f.doms):
        return
    months = ", ".join(calendar.month_name[m] for m in f.months)
    longest = max(_MAX_DAYS[m] for m in f.months)
    raise ScheduleError(
        f"never fires: {months} {'has' if len(f.months) == 1 else 'have'} at most {longest} days, "
        f"but day-of-month asks for {', '.join(map(str, f.doms))}",
        "pick a day that exists in "
        + ("that month" if len(f.months) == 1 else "those months")
        + (" (February has 29 days only in leap years)" if 2 in f.months else ""),
    )


@lru_cache(maxsize=131072)  # as many as compile_schedule keeps: one CronFields per expression
def parse_fields(expr: str) -> CronFields:
    """Parse a 5- or 6-field expression or a calendar macro; raise ScheduleError."""
    text = expr.strip()
    if text.startswith("@"):
        text = _expand_macro(text)
    parts = text.split()
    if len(parts) not in (5, 6):
        raise ScheduleError(
            f"expected 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading "
            f"second, got {len(parts)} in {expr!r}",
            "example: '30 2 * * *' runs at 02:30 every day; '*/10 * * * * *' every 10 seconds",
        )
    names = SIX if len(parts) == 6 else FIVE
    values = {name: parse_field(name, part) for name, part in zip(names, parts)}
    starts = {name: part.startswith("*") for name, part in zip(names, parts)}
    fields = CronFields(
        seconds=values.get("second", (0,)),
        minutes=values["minute"],
        hours=values["hour"],
        doms=values["day-of-month"],
        months=values["month"],
        dows=values["day-of-week"],
        dom_star=starts["day-of-month"],
        dow_star=starts["day-of-week"],
        minute_star=starts["minute"],
        hour_star=starts["hour"],
        has_seconds=len(parts) == 6,
        _dom_mask=_mask(values["day-of-month"]),
        _dow_mask=_mask(values["day-of-week"]),
    )
    _check_can_fire(fields)
    return fields
