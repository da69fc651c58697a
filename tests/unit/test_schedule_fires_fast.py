"""`fires` over long spans lists wall times field by field away from clock changes, and falls
back to one fire at a time within 3 hours of one: the same fires as chaining next_after."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chronod.core.schedule import Schedule, compile_schedule

EXPRESSIONS = [
    "*/7 * * * *",
    "30 2 * * *",
    "0,30 2 * * *",
    "0 1-3 * * *",
    "*/15 1-2 * * *",
    "0 0 31 * *",
    "0 30 2 * * *",
]
SPANS = [
    ("America/New_York", "2027-02-20T00:00:00Z", 40),  # spring forward with several skipped matches
    ("America/New_York", "2027-10-25T00:00:00Z", 20),  # fall back
    ("Australia/Lord_Howe", "2027-09-20T00:00:00Z", 20),  # half an hour forward
    ("Pacific/Apia", "2011-12-20T00:00:00Z", 20),  # a day skipped: a clock correction
    ("Antarctica/Troll", "2026-03-20T00:00:00Z", 15),  # two hours forward
    ("UTC", "2027-01-01T00:00:00Z", 60),
]


@pytest.mark.parametrize(("zone", "start", "days"), SPANS)
def test_fires_over_a_long_span_are_next_after_chained(zone, start, days):
    a = datetime.fromisoformat(start.replace("Z", "+00:00"))
    b = a + timedelta(days=days)
    for expr in EXPRESSIONS:
        schedule = compile_schedule(expr, zone)
        assert schedule.fires(a, b) == Schedule.fires(schedule, a, b), expr


def test_a_short_span_or_a_limit_takes_the_one_by_one_path():
    s = compile_schedule("*/7 * * * *", "America/New_York")
    a = datetime(2027, 3, 14, tzinfo=UTC)
    assert s.fires(a, a + timedelta(days=3), limit=5) == Schedule.fires(s, a, a + timedelta(days=3), limit=5)
