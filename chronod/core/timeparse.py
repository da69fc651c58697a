"""Times as an operator types them on the command line, in both directions.

One parser for every time flag: `--since` and `--at` look back (PAST), `--until` and
`--after` look ahead (FUTURE). The flag decides the direction, and the direction decides
what a form means when it could mean either:

| form | PAST (`--since`) | FUTURE (`--until`) |
| --- | --- | --- |
| `now` | now | now |
| `24h`, `1h30m`, `7d` (a duration) | that long ago | that long from now |
| `-2h`, `2h ago` | 2 hours ago | (an error: that is in the past) |
| `+12h`, `in 2h` | (an error: that is in the future) | 12 / 2 hours from now |
| `02:00`, `02:00:30` | the latest 02:00 at or before now | the next 02:00 after now |
| `today [HH:MM]` | today at 00:00 (or HH:MM) | the same |
| `yesterday [HH:MM]` | yesterday at 00:00 (or HH:MM) | the same |
| `tomorrow [HH:MM]` | tomorrow at 00:00 (or HH:MM) | the same |
| `monday [HH:MM]`, `mon` | the latest Monday 00:00 (HH:MM) at or before now | the next one after now |
| `2026-12-04`, `2026-12-04 08:00`, ISO-8601 with `Z` or an offset | that instant | that instant |

A time without an offset is wall time in `zone` (the first pass of a repeated hour; a time
a spring-forward skips is read with the offset before the change). With `strict`, a PAST
answer after now and a FUTURE answer not after now are errors. Errors give examples of the
flag's own direction.

Pure: `now` and `zone` are arguments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

from chronod.core.durations import DurationError, parse_duration

PAST = "past"
FUTURE = "future"

EXAMPLES = {
    PAST: "24h, 2h ago, -30m, yesterday, yesterday 02:00, 02:00 (the latest one), monday, 2026-12-01, "
    "2026-12-01T02:00:00Z",
    FUTURE: "+12h, in 2h, 12h, tomorrow, tomorrow 08:00, 02:00 (the next one), monday 08:00, 2026-12-04, "
    "2026-12-04T08:00:00-05:00",
}

DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_CLOCK = r"(\d{1,2}):(\d{2})(?::(\d{2}))?"
_WORD_AT = re.compile(rf"([a-z]+)(?:\s+(?:at\s+)?{_CLOCK})?")
_BARE_CLOCK = re.compile(_CLOCK)


@dataclass(frozen=True)
class WhenError(ValueError):
    """A time the parser cannot read, or one on the wrong side of now: what is wrong, and
    examples of the forms the flag's direction takes."""

    message: str
    hint: str

    def __str__(self) -> str:
        return self.message


def examples(direction: str) -> str:
    """The forms a flag of this direction takes, for help texts and errors."""
    return EXAMPLES[direction]


def parse_when(
    text: str, *, now: datetime, zone: str, direction: str, flag: str = "--since", strict: bool = True
) -> datetime:
    """`text` as an aware UTC instant, read in `direction` (PAST or FUTURE) from `now`."""
    if direction not in (PAST, FUTURE):
        raise ValueError(f"direction must be {PAST!r} or {FUTURE!r}")
    raw = text.strip()
    value = _read(raw, raw.lower(), now, ZoneInfo(zone), direction, flag)
    if value is None:
        raise WhenError(f"{flag} {text!r} is not a time chrono can read", f"write one of: {examples(direction)}")
    if strict and direction == FUTURE and value <= now:
        raise WhenError(f"{flag} {text!r} has passed ({_z(value)})", f"give a time ahead: {examples(FUTURE)}")
    if strict and direction == PAST and value > now:
        raise WhenError(f"{flag} {text!r} is in the future ({_z(value)})", f"give a time back: {examples(PAST)}")
    return value


def _read(raw: str, text: str, now: datetime, zone: ZoneInfo, direction: str, flag: str) -> datetime | None:
    if text == "now":
        return now
    for read in (_relative, _clock, _day_word):
        value = read(text, now, zone, direction, flag)
        if value is not None:
            return value
    return _iso(raw, zone)


def _seconds(text: str, flag: str) -> int | None:
    try:
        return parse_duration(text.replace(" ", ""))
    except DurationError:
        return None


def _relative(text: str, now: datetime, zone: ZoneInfo, direction: str, flag: str) -> datetime | None:
    """`+12h`, `in 2h`, `-2h`, `2h ago`, and a bare duration in the flag's direction."""
    sign, body = 0, text
    if text.startswith("+"):
        sign, body = 1, text[1:]
    elif text.startswith("-"):
        sign, body = -1, text[1:]
    elif text.startswith("in "):
        sign, body = 1, text[3:]
    elif text.endswith(" ago"):
        sign, body = -1, text[:-4]
    if not body.strip() or body[:1].isspace() or ":" in body or "-" in body:
        return None
    seconds = _seconds(body, flag)
    if seconds is None:
        return None
    if sign == 0:
        sign = 1 if direction == FUTURE else -1
    try:
        return now + timedelta(seconds=sign * seconds)
    except OverflowError:
        return None


def _clock(text: str, now: datetime, zone: ZoneInfo, direction: str, flag: str) -> datetime | None:
    """`HH:MM[:SS]`: the next one after now (FUTURE) or the latest one at or before now (PAST)."""
    m = _BARE_CLOCK.fullmatch(text)
    if m is None:
        return None
    at = _time(m.group(1), m.group(2), m.group(3), text, flag)
    today = now.astimezone(zone).date()
    candidate = _wall(today, at, zone)
    if direction == FUTURE and candidate <= now:
        candidate = _wall(today + timedelta(days=1), at, zone)
    elif direction == PAST and candidate > now:
        candidate = _wall(today - timedelta(days=1), at, zone)
    return candidate


def _day_word(text: str, now: datetime, zone: ZoneInfo, direction: str, flag: str) -> datetime | None:
    """`today`, `yesterday`, `tomorrow` or a weekday, with an optional time of day."""
    m = _WORD_AT.fullmatch(text)
    if m is None:
        return None
    word = m.group(1)
    at = _time(m.group(2), m.group(3), m.group(4), text, flag) if m.group(2) else time(0, 0)
    today = now.astimezone(zone).date()
    shifts = {"today": 0, "yesterday": -1, "tomorrow": 1}
    if word in shifts:
        return _wall(today + timedelta(days=shifts[word]), at, zone)
    day = next((i for i, name in enumerate(DAYS) if len(word) >= 3 and name.startswith(word)), None)
    if day is None:
        return None
    step = 1 if direction == FUTURE else -1
    for n in range(0, 8 * step, step):
        d = today + timedelta(days=n)
        candidate = _wall(d, at, zone)
        if d.weekday() == day and (candidate > now if direction == FUTURE else candidate <= now):
            return candidate
    return None


def _iso(raw: str, zone: ZoneInfo) -> datetime | None:
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone, fold=0)
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        return None


def _time(hh: str, mm: str, ss: str | None, text: str, flag: str) -> time:
    h, m, s = int(hh), int(mm), int(ss or 0)
    if h > 23 or m > 59 or s > 59:
        raise WhenError(f"{flag} {text!r} is not a time of day", "hours 00-23, minutes and seconds 00-59")
    return time(h, m, s)


def _wall(day: date, at: time, zone: ZoneInfo) -> datetime:
    """A wall time of `zone` as UTC (first pass when repeated; a skipped one with the offset before)."""
    return datetime.combine(day, at, tzinfo=zone).astimezone(timezone.utc)


def _z(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
