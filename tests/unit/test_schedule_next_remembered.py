"""A cron schedule remembers the next fire instants it was asked for lately: the jobs that
share it ask for the same instants as their occurrences fall due together. The answer is
the computed one for every instant, however it is written (any zone, either pass of a
repeated hour), and an instant asked again is not searched for again."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from chronod.core import schedule as schedule_module
from chronod.core.schedule import compile_schedule

EXPRESSIONS = ["*/7 * * * *", "30 1 * * *", "0,30 2 * * *", "*/15 1-2 * * *", "0 30 2 * * *", "* * * * *"]
ZONES = ["UTC", "America/New_York", "Australia/Lord_Howe", "Europe/Berlin"]


def test_remembered_answers_are_the_computed_ones() -> None:
    rng = random.Random(3)
    around = [
        datetime(2027, 3, 14, 6, tzinfo=UTC),
        datetime(2027, 11, 7, 5, tzinfo=UTC),
        datetime(2027, 6, 1, tzinfo=UTC),
    ]
    for _ in range(3000):
        sched = compile_schedule(rng.choice(EXPRESSIONS), rng.choice(ZONES))
        at = rng.choice(around) + timedelta(seconds=rng.randrange(-4 * 3600, 4 * 3600), microseconds=rng.choice([0, 5]))
        written = at.astimezone(ZoneInfo(rng.choice(ZONES)))  # the same instant, in another zone
        want = sched._next_after(at)  # type: ignore[attr-defined]
        assert sched.next_after(written) == want, (sched, written)
        assert sched.next_after(at) == want, (sched, at)


def test_both_passes_of_a_repeated_hour_get_their_own_answer() -> None:
    sched = compile_schedule("*/20 * * * *", "America/New_York")
    zone = ZoneInfo("America/New_York")
    first = datetime(2027, 11, 7, 1, 50, tzinfo=zone)  # 05:50 UTC
    second = first.replace(fold=1)  # 06:50 UTC: equal to `first` as a value, another instant
    assert sched.next_after(first) == datetime(2027, 11, 7, 6, 0, tzinfo=UTC)
    assert sched.next_after(second) == datetime(2027, 11, 7, 7, 0, tzinfo=UTC)


def test_an_instant_asked_again_is_not_searched_for_again(monkeypatch: pytest.MonkeyPatch) -> None:
    sched = compile_schedule("17 */3 * * *", "UTC")
    searched = []
    real = schedule_module.next_wall
    monkeypatch.setattr(schedule_module, "next_wall", lambda *a, **k: searched.append(a[1]) or real(*a, **k))
    at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    got = [sched.next_after(at) for _ in range(50)]
    got.append(sched.next_after(at.astimezone(ZoneInfo("Asia/Tokyo"))))
    assert set(got) == {datetime(2031, 5, 6, 9, 17, tzinfo=UTC)}
    assert len(searched) == 1
