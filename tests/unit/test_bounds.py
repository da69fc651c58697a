"""The engine's bounds (chronod.core.bounds) as the schedule engine and the validator apply them."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from chronod.core import bounds
from chronod.core.durations import DurationError, parse_duration
from chronod.core.schedule import ScheduleError, compile_schedule
from tests.unit.test_validate import at, check, job

UTC = timezone.utc


@pytest.mark.parametrize("expr", ["@every 3000000d", "@every 999999999999999999999999s", "@every 3661d"])
def test_an_every_longer_than_the_engine_holds_is_refused_by_validate(expr):
    problem = at(check(job().replace('"0 4 * * *"', f'"{expr}"')), "jobs[0].schedule")
    assert "@every" in problem.message


def test_the_longest_every_is_accepted_and_planned():
    sched = compile_schedule(f"@every {bounds.MAX_EVERY_S}s")
    now = datetime(2026, 12, 3, tzinfo=UTC)
    assert sched.next_after(now) > now
    assert sched.next_after(now.replace(year=2126)) is not None


def test_zero_every_hints_at_what_is_accepted():
    with pytest.raises(ScheduleError) as err:
        compile_schedule("@every 0s")
    assert "1s" in err.value.hint


@pytest.mark.parametrize(
    "expr, tz",
    [
        ("@every 3650d", "UTC"),
        ("0 0 29 2 *", "America/New_York"),
        ("* * * * *", "UTC"),
        ("@yearly", "Australia/Lord_Howe"),
    ],
)
def test_schedules_answer_never_past_the_latest_instant_instead_of_overflowing(expr, tz):
    sched = compile_schedule(expr, tz)
    end = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    start = datetime(1, 1, 1, tzinfo=UTC)
    assert sched.next_after(end) is None
    assert sched.next_after(bounds.LATEST) is None
    assert sched.prev_at_or_before(start) is None
    last = sched.prev_at_or_before(bounds.LATEST)
    assert last is not None and last <= bounds.LATEST
    assert sched.next_after(last) is None


@pytest.mark.parametrize("text", ["9" * 16 + "s", "9" * 5000, "1" * 30 + "d"])
def test_durations_with_more_digits_than_the_bound_are_refused_before_any_arithmetic(text):
    with pytest.raises(DurationError, match="too large"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["²s", "١٢s", "²"])
def test_durations_take_ascii_digits_only(text):
    with pytest.raises(DurationError):
        parse_duration(text)
