"""The evaluator against the Debian cron simulation (`chronod.core.vixie`), an independent oracle.

The two share no code. Around every clock change of a year, and over a whole year for a
few zones, they must agree minute for minute on five-field expressions.
"""

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from chronod.core.schedule import compile_schedule
from chronod.core.vixie import simulate

UTC = timezone.utc

EXPRESSIONS = [
    "30 2 * * *", "0 2 * * *", "30 1 * * 0", "0,30 2-3 * * *", "45 2 * * 1-5", "0 0 * * *",
    "*/15 * * * *", "0 * * * *", "*/20 1-2 * * *", "15 */2 * * *", "* 2 * * *", "59 23 * * *",
    "0 0 */10 * mon", "0 3 1-31 * 1",
]
# zone -> year whose transitions are checked
ZONES = {
    "America/New_York": 2026, "Europe/Berlin": 2026, "Europe/Dublin": 2026, "Australia/Sydney": 2026,
    "America/Santiago": 2026, "Australia/Lord_Howe": 2026, "Pacific/Chatham": 2026,
    "Europe/Moscow": 2011, "America/Sao_Paulo": 2018, "Pacific/Apia": 2011,
}


def _transitions(zone_name, year):
    zone, out = ZoneInfo(zone_name), []
    t = datetime(year, 1, 1, tzinfo=UTC)
    off = t.astimezone(zone).utcoffset()
    while t.year == year:
        t += timedelta(minutes=15)
        if t.astimezone(zone).utcoffset() != off:
            out.append(t)
            off = t.astimezone(zone).utcoffset()
    return out


WINDOWS = [(zone, t) for zone, year in ZONES.items() for t in _transitions(zone, year)]


@pytest.mark.parametrize("zone, transition", WINDOWS, ids=lambda v: v if isinstance(v, str) else v.isoformat())
def test_around_each_clock_change_we_fire_when_debian_cron_would(zone, transition):
    start, end = transition - timedelta(days=2), transition + timedelta(days=2)
    for expr in EXPRESSIONS:
        ours = compile_schedule(expr, zone).fires(start, end)
        theirs = simulate(expr, zone, start, end)
        assert ours == theirs, f"{expr!r} in {zone}: only ours {sorted(set(ours) - set(theirs))[:4]}, " \
                               f"only cron {sorted(set(theirs) - set(ours))[:4]}"


@pytest.mark.parametrize("zone", ["America/New_York", "Australia/Lord_Howe", "Pacific/Chatham"])
def test_over_a_whole_year_we_fire_when_debian_cron_would(zone):
    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)
    for expr in ["30 2 * * *", "0 * * * *", "*/20 1-2 * * *", "45 2 * * 1-5", "0 0 */10 * mon"]:
        assert compile_schedule(expr, zone).fires(start, end) == simulate(expr, zone, start, end), expr
