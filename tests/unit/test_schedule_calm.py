"""The next fire of a zoned cron schedule away from clock changes (`_next_calm`, one
offset, no DST rule to apply) is the one the full search finds: over schedules with and
without seconds, every DST policy, zones with 30-minute, midnight, two-hour and whole-day
changes, and instants from days before to days after each change."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from chronod.core import schedule
from chronod.core.schedule import ScheduleError, compile_schedule

ZONES = (
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Apia",
    "Antarctica/Troll",
    "Africa/Casablanca",
    "America/Sao_Paulo",
    "Asia/Tokyo",
)


def _field(rng: random.Random, lo: int, hi: int) -> str:
    a = rng.randrange(lo, hi + 1)
    return rng.choice(
        ["*", f"*/{rng.choice((2, 3, 5, 15))}", str(a), f"{a}-{min(hi, a + 3)}", f"{a},{rng.randrange(lo, hi + 1)}"]
    )


def _cases(zone: str, seed: int):
    rng = random.Random(seed)
    while True:
        fields = [_field(rng, 0, 59), _field(rng, 0, 23), _field(rng, 1, 31), _field(rng, 1, 12), _field(rng, 0, 6)]
        if rng.random() < 0.2:
            fields.insert(0, _field(rng, 0, 59))
        try:
            sched = compile_schedule(
                " ".join(fields), zone, rng.choice(["shift", "skip"]), rng.choice(["first", "last", "both"])
            )
        except ScheduleError:
            continue
        year = rng.randrange(2005, 2035)
        changes = schedule._year_changes(sched._zone, year) or (datetime(year, 6, 1, tzinfo=timezone.utc),)
        at = rng.choice(changes) + timedelta(
            seconds=rng.randrange(-3 * 86400, 3 * 86400), microseconds=rng.choice((0, 500_000))
        )
        yield sched, at


@pytest.mark.parametrize("zone", ZONES)
def test_the_calm_answer_is_the_searchs(zone, monkeypatch):
    calm = schedule._CronSchedule._next_calm
    cases = _cases(zone, seed=sum(map(ord, zone)))
    answered = 0
    for _ in range(250):
        sched, at = next(cases)
        monkeypatch.setattr(schedule._CronSchedule, "_next_calm", lambda self, a: None)
        want = sched._next_zoned(at)
        monkeypatch.setattr(schedule._CronSchedule, "_next_calm", calm)
        got = calm(sched, at)
        if got is not None:
            answered += 1
            assert got == want and got.tzinfo is want.tzinfo, (sched.expr, zone, sched.dst_gap, sched.dst_repeat, at)
    assert answered > 50  # most asks, even this close to the changes, are calm
