"""The hour and day filters in front of the search for fires near a clock change (DST
warnings of fixed-time jobs) give the same answer as the search alone."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from chronod.core import validate
from chronod.core.schedule import compile_schedule

ZONES = ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago")


def near_without_filter(sched, now):
    for at, shift_s in validate._zone_transitions(sched.tz, now.date()):
        if now <= at < now + validate.DST_LOOKAHEAD:
            if shift_s >= 3 * 3600 or sched.fires(at - timedelta(seconds=shift_s + 1), at, limit=1):
                return True
    return False


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("gap,repeat", [("shift", "first"), ("skip", "both"), ("shift", "last")])
def test_the_filter_keeps_every_job_the_search_finds(zone, gap, repeat):
    now = datetime(2026, 1, 5, 12, tzinfo=timezone.utc)
    near = 0
    for hour in range(24):
        for minute in (0, 1, 29, 30, 59):
            sched = compile_schedule(f"{minute} {hour} * * *", zone, gap, repeat)
            want = near_without_filter(sched, now)
            assert validate._near_a_transition(sched, now) == want, (zone, hour, minute)
            near += want
    assert 0 < near < 24 * 5  # the zone changes its clocks in the year ahead, near some hours only


@pytest.mark.parametrize("zone", ZONES)
def test_the_day_filter_keeps_every_job_the_search_finds(zone):
    """Jobs on a day of the month or of the week near each clock change (Santiago's happen at
    midnight: the day a fire falls on is the one before or after the change's date)."""
    now = datetime(2026, 1, 5, 12, tzinfo=timezone.utc)
    near = 0
    for at, _ in validate._zone_transitions(zone, now.date()):
        day = at.date()
        for hour in (0, 1, 2, 3, 23):
            for minute in (0, 30, 59):
                exprs = [f"{minute} {hour} {(day + timedelta(days=k)).day} * *" for k in (-1, 0, 1)]
                exprs += [f"{minute} {hour} * * {(day.isoweekday() + k) % 7}" for k in (-1, 0, 1)]
                exprs += [f"{minute} {hour} {day.day} {day.month % 12 + 1} *"]  # the day, a month later
                for expr in exprs:
                    sched = compile_schedule(expr, zone)
                    want = near_without_filter(sched, now)
                    assert validate._near_a_transition(sched, now) == want, (zone, expr)
                    near += want
    assert near > 0  # some of these jobs do fire next to a change
