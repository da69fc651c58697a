"""Durations as operators write them: 90s, 15m, 1h30m, 7d."""

from __future__ import annotations

import re

from chronod.core.bounds import MAX_DURATION_DIGITS

_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"([0-9]+)([wdhms])")
_WHOLE = re.compile(r"(?:[0-9]+[wdhms])+")


class DurationError(ValueError):
    """Not a duration: use digits with units w, d, h, m, s, such as 90s, 15m, 1h30m or 7d."""


def parse_duration(text: str) -> int:
    """Return the number of seconds in `text` ("1h30m" -> 5400); raise DurationError."""
    s = str(text).strip().lower()
    if s.isascii() and s.isdigit():
        _check_digits(text, s)
        return int(s)
    if not s or not _WHOLE.fullmatch(s):
        raise DurationError(f"{text!r} is not a duration: use digits with units w, d, h, m, s (90s, 15m, 1h30m, 7d)")
    parts = _PART.findall(s)
    for n, _ in parts:
        _check_digits(text, n)
    return sum(int(n) * _UNITS[u] for n, u in parts)


def _check_digits(text: str, number: str) -> None:
    if len(number.lstrip("0")) > MAX_DURATION_DIGITS:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise DurationError(f"{shown!r} is too large a duration: at most {MAX_DURATION_DIGITS} digits per number")


def format_duration(seconds: float) -> str:
    """Render seconds compactly: 5400 -> '1h30m', 0.25 -> '0.25s'."""
    if seconds < 1 and seconds != 0:
        return f"{seconds:.2f}s"
    rest = int(round(seconds))
    if rest == 0:
        return "0s"
    out = []
    for unit in ("d", "h", "m", "s"):
        n, rest = divmod(rest, _UNITS[unit])
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)
