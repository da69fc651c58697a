"""One parser for the times operators type, in both directions (chronod.core.timeparse)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronod.core.timeparse import FUTURE, PAST, WhenError, parse_when

NOW = datetime(2026, 12, 3, 15, 30, tzinfo=timezone.utc)  # a Thursday
NY = "America/New_York"


def z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize(
    "text, direction, zone, expected",
    [
        ("now", PAST, "UTC", "2026-12-03T15:30:00Z"),
        ("24h", PAST, "UTC", "2026-12-02T15:30:00Z"),
        ("12h", FUTURE, "UTC", "2026-12-04T03:30:00Z"),
        ("+12h", FUTURE, "UTC", "2026-12-04T03:30:00Z"),
        ("in 2h", FUTURE, "UTC", "2026-12-03T17:30:00Z"),
        ("-2h", PAST, "UTC", "2026-12-03T13:30:00Z"),
        ("2h ago", PAST, "UTC", "2026-12-03T13:30:00Z"),
        ("02:00", FUTURE, "UTC", "2026-12-04T02:00:00Z"),  # the next 02:00
        ("02:00", PAST, "UTC", "2026-12-03T02:00:00Z"),  # the latest 02:00
        ("16:00", FUTURE, "UTC", "2026-12-03T16:00:00Z"),
        ("16:00", PAST, "UTC", "2026-12-02T16:00:00Z"),
        ("tomorrow", FUTURE, "UTC", "2026-12-04T00:00:00Z"),
        ("tomorrow 08:00", FUTURE, "UTC", "2026-12-04T08:00:00Z"),
        ("tomorrow 08:00", FUTURE, NY, "2026-12-04T13:00:00Z"),
        ("yesterday", PAST, "UTC", "2026-12-02T00:00:00Z"),
        ("yesterday 02:00", PAST, "UTC", "2026-12-02T02:00:00Z"),
        ("today 09:00", PAST, "UTC", "2026-12-03T09:00:00Z"),
        ("monday", FUTURE, "UTC", "2026-12-07T00:00:00Z"),
        ("monday", PAST, "UTC", "2026-11-30T00:00:00Z"),
        ("thu 08:00", PAST, "UTC", "2026-12-03T08:00:00Z"),
        ("thu 08:00", FUTURE, "UTC", "2026-12-10T08:00:00Z"),
        ("2026-12-01", PAST, "UTC", "2026-12-01T00:00:00Z"),
        ("2026-12-04T08:00", FUTURE, NY, "2026-12-04T13:00:00Z"),
        ("2026-12-04T08:00:00-05:00", FUTURE, "UTC", "2026-12-04T13:00:00Z"),
        ("2026-12-04 08:00Z", FUTURE, "UTC", "2026-12-04T08:00:00Z"),
    ],
)
def test_each_form_reads_as_the_flags_direction_says(text, direction, zone, expected):
    assert parse_when(text, now=NOW, zone=zone, direction=direction) == z(expected)


@pytest.mark.parametrize(
    "text, direction, message, example",
    [
        ("02:00", FUTURE, None, None),
        ("yesterday", FUTURE, "has passed (2026-12-02T00:00:00Z)", "tomorrow 08:00"),
        ("-2h", FUTURE, "has passed", "in 2h"),
        ("+12h", PAST, "is in the future", "yesterday 02:00"),
        ("tomorrow", PAST, "is in the future", "2h ago"),
        ("next tuesday", PAST, "is not a time chrono can read", "yesterday"),
        ("soon", FUTURE, "is not a time chrono can read", "+12h"),
        ("25:00", FUTURE, "is not a time of day", None),
    ],
)
def test_errors_say_what_is_wrong_with_examples_of_that_direction(text, direction, message, example):
    if message is None:
        parse_when(text, now=NOW, zone="UTC", direction=direction, flag="--until")
        return
    with pytest.raises(WhenError) as err:
        parse_when(text, now=NOW, zone="UTC", direction=direction, flag="--until")
    assert str(err.value).startswith(f"--until {text!r} ") and message in str(err.value)
    if example:
        assert example in err.value.hint


instants = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(timezone.utc))
zones = st.sampled_from(["UTC", NY, "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata"])


@settings(max_examples=300, deadline=None)
@given(now=instants, zone=zones, hh=st.integers(0, 23), mm=st.integers(0, 59))
def test_a_time_of_day_is_the_next_one_ahead_and_the_latest_one_back(now, zone, hh, mm):
    ahead = parse_when(f"{hh:02d}:{mm:02d}", now=now, zone=zone, direction=FUTURE)
    back = parse_when(f"{hh:02d}:{mm:02d}", now=now, zone=zone, direction=PAST)
    assert back <= now < ahead
    assert ahead - now <= timedelta(hours=27) and now - back <= timedelta(hours=27)
    tz = ZoneInfo(zone)
    for t in (ahead, back):
        local = t.astimezone(tz)
        if (local.hour, local.minute) != (hh, mm):  # only a wall time a spring-forward skips
            wall = datetime(local.year, local.month, local.day, hh, mm, tzinfo=tz)
            skipped = wall.astimezone(timezone.utc).astimezone(tz).replace(tzinfo=None) != wall.replace(tzinfo=None)
            before = wall - timedelta(days=1)  # or the day before, when the skipped time belonged to it
            assert skipped or before.astimezone(timezone.utc).astimezone(tz).replace(tzinfo=None) != before.replace(
                tzinfo=None
            ), (t, local)


@settings(max_examples=300, deadline=None)
@given(now=instants, zone=zones, seconds=st.integers(1, 400 * 86400))
def test_durations_go_back_for_since_and_ahead_for_until_and_iso_round_trips(now, zone, seconds):
    text = f"{seconds}s"
    assert parse_when(text, now=now, zone=zone, direction=PAST) == now - timedelta(seconds=seconds)
    assert parse_when(f"+{text}", now=now, zone=zone, direction=FUTURE) == now + timedelta(seconds=seconds)
    assert parse_when(f"in {text}", now=now, zone=zone, direction=FUTURE) == now + timedelta(seconds=seconds)
    at = now + timedelta(seconds=seconds)
    assert parse_when(at.isoformat(), now=now, zone=zone, direction=FUTURE) == at


@settings(max_examples=200, deadline=None)
@given(now=instants, zone=zones, day=st.sampled_from(["mon", "tuesday", "sun", "friday"]))
def test_a_weekday_is_within_a_week_on_the_right_side_of_now(now, zone, day):
    ahead = parse_when(day, now=now, zone=zone, direction=FUTURE)
    back = parse_when(day, now=now, zone=zone, direction=PAST)
    assert back <= now < ahead and ahead - back <= timedelta(days=7, hours=3)
    names = {"mon": 0, "tuesday": 1, "friday": 4, "sun": 6}
    assert ahead.astimezone(ZoneInfo(zone)).weekday() in (names[day], (names[day] + 1) % 7)
