"""The hour filter in front of the search for fires near a clock change (DST warnings of
fixed-time jobs) gives the same answer as the search alone."""

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
