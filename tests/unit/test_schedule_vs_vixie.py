"""The evaluator against the Debian cron simulation (`chronod.core.vixie`), an independent oracle.

The two share no code. Around every clock change of a year, and over a whole year for a
few zones, they must agree minute for minute on five-field expressions.
"""

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from chronod.core.schedule import compile_schedule, wall_matches
from chronod.core.vixie import minutes_of, simulate

UTC = timezone.utc

EXPRESSIONS = [
    "30 2 * * *",
    "0 2 * * *",
    "30 1 * * 0",
    "0,30 2-3 * * *",
    "45 2 * * 1-5",
    "0 0 * * *",
    "*/15 * * * *",
    "0 * * * *",
    "*/20 1-2 * * *",
    "15 */2 * * *",
    "* 2 * * *",
    "59 23 * * *",
    "0 0 */10 * mon",
    "0 3 1-31 * 1",
]
# zone -> year whose transitions are checked
ZONES = {
    "America/New_York": 2026,
    "Europe/Berlin": 2026,
    "Europe/Dublin": 2026,
    "Australia/Sydney": 2026,
    "America/Santiago": 2026,
    "Australia/Lord_Howe": 2026,
    "Pacific/Chatham": 2026,
    "Europe/Moscow": 2011,
    "America/Sao_Paulo": 2018,
    "Pacific/Apia": 2011,
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
        ours = minutes_of(compile_schedule(expr, zone).fires(start, end))
        theirs = simulate(expr, zone, start, end)
        assert ours == theirs, (
            f"{expr!r} in {zone}: only ours {sorted(set(ours) - set(theirs))[:4]}, "
            f"only cron {sorted(set(theirs) - set(ours))[:4]}"
        )


@pytest.mark.parametrize("zone", ["America/New_York", "Australia/Lord_Howe", "Pacific/Chatham"])
def test_over_a_whole_year_we_fire_when_debian_cron_would(zone):
    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)
    for expr in ["30 2 * * *", "0 * * * *", "*/20 1-2 * * *", "45 2 * * 1-5", "0 0 */10 * mon"]:
        assert minutes_of(compile_schedule(expr, zone).fires(start, end)) == simulate(expr, zone, start, end), expr


# --- every zone that changes its clock in 2026 ----------------------------------------

SWEEP_EXPRESSIONS = [
    "0 2 * * *",
    "30 2 * * *",
    "0 0 * * *",
    "30 0 * * *",
    "*/15 * * * *",
    "0 * * * *",
    "59 1 * * *",
    "0 1-3 * * *",
    "15,45 2 * * 0",
    "0 3 * * *",
    "0 23 * * *",
    "30 23 * * 6",
    "@daily",
    "@hourly",
    "0 2 1,15 * 1",
]


def _changes_in(zone_name, year):
    """(UTC instant, offset before, offset after) of each change in `year`: day steps, then bisection."""
    zone, out = ZoneInfo(zone_name), []
    t, end = datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    off = t.astimezone(zone).utcoffset()
    while t < end:
        nxt = t + timedelta(days=1)
        new = nxt.astimezone(zone).utcoffset()
        if new != off:
            lo, hi = t, nxt
            while hi - lo > timedelta(seconds=1):
                mid = lo + timedelta(seconds=(hi - lo) // timedelta(seconds=1) // 2)
                lo, hi = (mid, hi) if mid.astimezone(zone).utcoffset() == off else (lo, mid)
            out.append((hi, off, new))
            off = new
        t = nxt
    return tuple(out)


def _zones_by_rules(year):
    """One zone per distinct list of clock changes (zones with the same changes behave alike)."""
    from zoneinfo import available_timezones

    seen = {}
    regions = ("Africa/", "America/", "Antarctica/", "Asia/", "Atlantic/", "Australia/", "Europe/", "Pacific/")
    for name in sorted(available_timezones(), key=lambda n: (not n.startswith(regions), n)):
        try:
            changes = _changes_in(name, year)
        except (ValueError, OSError):
            continue
        if changes:
            seen.setdefault(changes, name)
    return sorted(seen.values())


SWEEP_ZONES = _zones_by_rules(2026)


def test_the_sweep_covers_the_awkward_zones():
    covered = {name: _changes_in(name, 2026) for name in SWEEP_ZONES}
    for name in [
        "Australia/Lord_Howe",
        "Pacific/Chatham",
        "Europe/Dublin",
        "America/Santiago",
        "Asia/Gaza",
        "Africa/Casablanca",
        "America/Havana",
        "America/Nuuk",
        "Antarctica/Troll",
    ]:
        assert _changes_in(name, 2026) in covered.values(), name
    assert len(SWEEP_ZONES) >= 25


@pytest.mark.parametrize("zone", SWEEP_ZONES)
def test_in_every_zone_that_changes_its_clock_we_fire_when_debian_cron_would(zone):
    for transition, before, after in _changes_in(zone, 2026):
        start, end = transition - timedelta(days=2), transition + timedelta(days=2)
        for expr in SWEEP_EXPRESSIONS:
            schedule = compile_schedule(expr, zone)
            ours = schedule.fires(start, end)
            assert minutes_of(ours) == simulate(expr, zone, start, end), f"{expr!r} around {transition.isoformat()}"
            assert all(a < b for a, b in zip(ours, ours[1:]))
            caught_up = after > before and schedule.is_fixed_time
            for t in ours:  # each fire is a matching wall time, or a skipped match fired right after the change
                wall = t.astimezone(ZoneInfo(zone)).replace(tzinfo=None)
                assert wall_matches(schedule.fields, wall) or (
                    caught_up and transition <= t < transition + (after - before)
                ), (expr, t)


def test_a_fall_back_of_exactly_three_hours_is_where_design_and_cron_c_part():
    # Antarctica/Casey, 2023-03-08T16:00Z: 03:00 +11 -> 00:00 +08, a standard-time change of exactly
    # 3 hours. cron.c's arithmetic (timeDiff = -179 > -180) treats it as "DST ends" and runs wildcard
    # jobs in the repeated hours; DESIGN §4 calls any change of 3 hours or more a correction, and the
    # evaluator follows DESIGN. (Debian's cron would not notice this change at all: tm_isdst stays 0.)
    zone, t = "Antarctica/Casey", datetime(2023, 3, 8, 16, 0, tzinfo=UTC)
    start, end = t - timedelta(hours=1), t + timedelta(hours=4)
    ours, cron = compile_schedule("0 * * * *", zone).fires(start, end), simulate("0 * * * *", zone, start, end)
    assert sorted(set(cron) - set(ours)) == [t + timedelta(hours=h) for h in range(3)]
    assert set(ours) <= set(cron)
    for expr in ("30 1 * * *", "0 0 * * *"):  # fixed-time jobs agree: first pass only either way
        assert compile_schedule(expr, zone).fires(start, end) == simulate(expr, zone, start, end)


def test_a_fall_back_of_more_than_three_hours_repeats_everything_in_cron_c_and_nothing_in_design():
    # Antarctica/Vostok, 1994-01-31T17:00Z: 24:00 +07 -> 17:00 +00; cron.c jumps its virtual clock back
    zone, t = "Antarctica/Vostok", datetime(1994, 1, 31, 17, 0, tzinfo=UTC)
    start, end = t - timedelta(hours=1), t + timedelta(hours=8)
    for expr in ("30 23 * * *", "0 * * * *"):
        ours, cron = compile_schedule(expr, zone).fires(start, end), simulate(expr, zone, start, end)
        assert set(ours) < set(cron)
        repeated = [c for c in cron if c not in ours]
        assert all(t <= c < t + timedelta(hours=7) for c in repeated), expr
