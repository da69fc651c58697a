"""Cron syntax as Vixie cron accepts it: fields, names, ranges, steps, macros, errors, words."""

from datetime import datetime, timedelta, timezone

import pytest

from chronod.core.schedule import ScheduleError, compile_schedule, parse_fields

UTC = timezone.utc


def utc(*args):
    return datetime(*args, tzinfo=UTC)


def fires(expr, start, count, tz="UTC"):
    s = compile_schedule(expr, tz)
    out, t = [], start
    for _ in range(count):
        t = s.next_after(t)
        out.append(t.isoformat())
    return out


# -- fields -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field_text, name, values",
    [
        ("*", "hour", tuple(range(24))),
        ("5", "minute", (5,)),
        ("1-5", "day-of-week", (1, 2, 3, 4, 5)),
        ("*/15", "minute", (0, 15, 30, 45)),
        ("10-30/10", "minute", (10, 20, 30)),
        ("50/3", "second", (50, 53, 56, 59)),  # N/S means N-max/S
        ("1,5,9-10", "hour", (1, 5, 9, 10)),
        ("jan,JUL,Dec", "month", (1, 7, 12)),
        ("mar-may", "month", (3, 4, 5)),
        ("MON-fri", "day-of-week", (1, 2, 3, 4, 5)),
        ("sun", "day-of-week", (0,)),
        ("7", "day-of-week", (0,)),
        ("5-7", "day-of-week", (0, 5, 6)),
        ("*/2", "day-of-week", (0, 2, 4, 6)),
        ("*/40", "day-of-month", (1,)),
    ],
)
def test_fields_expand_to_the_values_vixie_cron_would_use(field_text, name, values):
    exprs = {
        "second": f"{field_text} * * * * *",
        "minute": f"{field_text} * * * *",
        "hour": f"0 {field_text} * * *",
        "day-of-month": f"0 0 {field_text} * *",
        "month": f"0 0 1 {field_text} *",
        "day-of-week": f"0 0 * * {field_text}",
    }
    f = parse_fields(exprs[name])
    attr = {
        "second": "seconds",
        "minute": "minutes",
        "hour": "hours",
        "day-of-month": "doms",
        "month": "months",
        "day-of-week": "dows",
    }[name]
    assert getattr(f, attr) == values


def test_five_fields_fire_on_whole_minutes_and_six_fields_have_a_leading_seconds_field():
    assert parse_fields("1 2 3 4 5").seconds == (0,)
    f = parse_fields("7 1 2 3 4 5")
    assert (f.seconds, f.minutes, f.hours, f.doms, f.months, f.dows) == ((7,), (1,), (2,), (3,), (4,), (5,))
    assert fires("*/20 * * * * *", utc(2026, 1, 1, 0, 0, 0), 3) == [
        "2026-01-01T00:00:20+00:00",
        "2026-01-01T00:00:40+00:00",
        "2026-01-01T00:01:00+00:00",
    ]


@pytest.mark.parametrize(
    "expr, field, fragment",
    [
        ("61 * * * *", "minute", "out of range 0-59"),
        ("* 24 * * *", "hour", "out of range 0-23"),
        ("0 0 0 * *", "day-of-month", "out of range 1-31"),
        ("0 0 32 * *", "day-of-month", "out of range"),
        ("0 0 * 13 *", "month", "out of range 1-12"),
        ("0 0 * * 8", "day-of-week", "out of range 0-7"),
        ("0 22-2 * * *", "hour", "runs backwards"),
        ("*/0 * * * *", "minute", "step of 0"),
        ("*/x * * * *", "minute", "step"),
        ("0 0 * jam *", "month", "not a number"),
        ("0 0 * * fri-sun", "day-of-week", "runs backwards"),
        ("1,,2 * * * *", "minute", "empty"),
        ("60 * * * * *", "second", "out of range 0-59"),
        ("0 0 L * *", "day-of-month", "not a number"),
        ("0 0 ? * *", "day-of-month", "not a number"),
    ],
)
def test_a_bad_field_is_rejected_with_a_message_that_names_the_field_and_a_hint(expr, field, fragment):
    with pytest.raises(ScheduleError) as info:
        compile_schedule(expr)
    assert info.value.message.startswith(f"{field} field")
    assert fragment in info.value.message
    assert info.value.hint


def test_a_misspelt_month_name_gets_a_did_you_mean():
    with pytest.raises(ScheduleError) as info:
        compile_schedule("0 0 * jam *")
    assert "'jan'" in info.value.hint


@pytest.mark.parametrize("expr", ["", "   ", "* * * *", "* * * * * * *", "0 0 * * * extra words"])
def test_the_wrong_number_of_fields_is_rejected_with_an_example(expr):
    with pytest.raises(ScheduleError) as info:
        compile_schedule(expr)
    assert "example" in info.value.hint or "five fields" in info.value.hint


@pytest.mark.parametrize("expr", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6 *", "0 0 30-31 feb *"])
def test_a_schedule_that_can_never_fire_is_rejected(expr):
    with pytest.raises(ScheduleError, match="never fires"):
        compile_schedule(expr)


@pytest.mark.parametrize(
    ("expr", "hint"),
    [
        ("0 0 31 4 *", "pick a day that exists in that month"),
        ("0 0 31 4,6 *", "pick a day that exists in those months"),
        ("0 0 30 2 *", "pick a day that exists in that month (February has 29 days only in leap years)"),
    ],
)
def test_the_hint_of_a_schedule_that_never_fires_speaks_of_its_own_months(expr, hint):
    with pytest.raises(ScheduleError) as info:
        compile_schedule(expr)
    assert info.value.hint == hint


def test_february_the_twenty_ninth_fires_in_leap_years_only():
    assert fires("0 0 29 2 *", utc(2025, 1, 1), 3) == [
        "2028-02-29T00:00:00+00:00",
        "2032-02-29T00:00:00+00:00",
        "2036-02-29T00:00:00+00:00",
    ]
    assert fires("0 0 29 2 *", utc(2096, 3, 1), 1) == ["2104-02-29T00:00:00+00:00"]  # 2100 is not leap


def test_the_thirty_first_with_a_restricted_weekday_still_fires_on_that_weekday():
    # both day fields restricted -> OR: every Monday, even though February has no 31st
    assert fires("0 0 31 2 mon", utc(2026, 2, 1), 2) == ["2026-02-02T00:00:00+00:00", "2026-02-09T00:00:00+00:00"]


# -- macros -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "macro, same_as",
    [
        ("@yearly", "0 0 1 1 *"),
        ("@ANNUALLY", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@Midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_macros_mean_their_five_field_expansion(macro, same_as):
    start = utc(2026, 3, 17, 13, 14)
    assert fires(macro, start, 3) == fires(same_as, start, 3)


def test_hourly_is_a_wildcard_job_and_daily_a_fixed_time_job():
    assert compile_schedule("@hourly").is_fixed_time is False
    assert compile_schedule("@daily").is_fixed_time is True
    assert compile_schedule("0-59/30 1 * * *").is_fixed_time is True
    assert compile_schedule("0 */2 * * *").is_fixed_time is False
    assert compile_schedule("*/10 0 1 * * *").is_fixed_time is True  # seconds do not change the class


def test_an_unknown_macro_is_rejected_with_a_suggestion():
    with pytest.raises(ScheduleError) as info:
        compile_schedule("@dayly")
    assert "@daily" in info.value.hint


def test_every_fires_at_utc_epoch_multiples_whatever_the_zone():
    s = compile_schedule("@every 90s", "Asia/Kolkata")
    assert s.kind == "every" and s.every_s == 90 and s.is_fixed_time is False
    assert s.next_after(utc(2026, 1, 1, 0, 0, 0)) == utc(2026, 1, 1, 0, 1, 30)
    assert s.next_after(utc(2026, 1, 1, 0, 1, 30)) == utc(2026, 1, 1, 0, 3, 0)
    assert s.next_after(utc(2026, 1, 1, 0, 1, 29, 999999)) == utc(2026, 1, 1, 0, 1, 30)
    assert s.prev_at_or_before(utc(2026, 1, 1, 0, 1, 30)) == utc(2026, 1, 1, 0, 1, 30)
    assert s.min_gap_s() == s.max_gap_s() == 90
    assert compile_schedule("@every 1h30m").every_s == 5400
    assert compile_schedule("@every 1d").next_after(utc(2026, 5, 5, 12)) == utc(2026, 5, 6)
    assert s.dst_events(utc(2026, 1, 1), utc(2027, 1, 1)) == []


@pytest.mark.parametrize("expr", ["@every", "@every 0s", "@every soon", "@every -5m"])
def test_every_needs_a_positive_duration(expr):
    with pytest.raises(ScheduleError):
        compile_schedule(expr)


def test_reboot_never_fires_from_the_calendar():
    s = compile_schedule("@reboot", "Europe/Paris")
    assert s.kind == "reboot"
    assert s.next_after(utc(2026, 1, 1)) is None
    assert s.fires(utc(2026, 1, 1), utc(2027, 1, 1)) == []
    assert s.prev_at_or_before(utc(2026, 1, 1)) is None
    assert (s.min_gap_s(), s.max_gap_s()) == (None, None)
    assert s.describe() == "once at every boot"


# -- zones and inputs ---------------------------------------------------------------------


def test_an_unknown_zone_is_named_with_a_did_you_mean():
    with pytest.raises(ScheduleError) as info:
        compile_schedule("0 0 * * *", "America/New_Yrok")
    assert "America/New_Yrok" in info.value.message
    assert "America/New_York" in info.value.hint
    with pytest.raises(ScheduleError) as info:
        compile_schedule("0 0 * * *", "europe/berlin")
    assert "Europe/Berlin" in info.value.hint


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="naive"):
        compile_schedule("* * * * *").next_after(datetime(2026, 1, 1))


def test_results_are_utc_whatever_zone_the_input_was_given_in():
    plus2 = timezone(timedelta(hours=2))
    t = compile_schedule("0 12 * * *").next_after(datetime(2026, 1, 1, 13, 30, tzinfo=plus2))
    assert t == utc(2026, 1, 1, 12, 0) and t.tzinfo is UTC


def test_compile_schedule_is_cached():
    assert compile_schedule("5 4 * * *", "Europe/Rome") is compile_schedule("5 4 * * *", "Europe/Rome")


# -- day matching -------------------------------------------------------------------------


def test_both_day_fields_restricted_match_either():
    # 2026-06-01 is a Monday; day 15 or any Friday
    assert fires("0 0 15 * fri", utc(2026, 6, 1), 4) == [
        "2026-06-05T00:00:00+00:00",
        "2026-06-12T00:00:00+00:00",
        "2026-06-15T00:00:00+00:00",
        "2026-06-19T00:00:00+00:00",
    ]


def test_a_day_field_starting_with_a_star_is_not_restricted_so_both_must_match():
    # days 1, 11, 21, 31 that are Mondays: 2026-08-31, 2026-09-21, 2026-12-21, 2027-01-11
    assert fires("0 0 */10 * mon", utc(2026, 8, 1), 4) == [
        "2026-08-31T00:00:00+00:00",
        "2026-09-21T00:00:00+00:00",
        "2026-12-21T00:00:00+00:00",
        "2027-01-11T00:00:00+00:00",
    ]


def test_a_full_day_of_month_range_is_still_restricted_so_every_day_fires():
    assert fires("0 0 1-31 * 1", utc(2026, 6, 1), 3) == [
        "2026-06-02T00:00:00+00:00",
        "2026-06-03T00:00:00+00:00",
        "2026-06-04T00:00:00+00:00",
    ]


def test_weekday_ranges_and_sunday_as_seven():
    # 2026-06-05 is a Friday
    assert fires("0 0 * * 5-7", utc(2026, 6, 5), 3) == [
        "2026-06-06T00:00:00+00:00",
        "2026-06-07T00:00:00+00:00",
        "2026-06-12T00:00:00+00:00",
    ]


def test_next_after_is_strict_and_prev_at_or_before_is_inclusive():
    s = compile_schedule("30 2 * * *")
    assert s.next_after(utc(2026, 1, 1, 2, 30)) == utc(2026, 1, 2, 2, 30)
    assert s.next_after(utc(2026, 1, 1, 2, 29, 59, 999999)) == utc(2026, 1, 1, 2, 30)
    assert s.prev_at_or_before(utc(2026, 1, 1, 2, 30)) == utc(2026, 1, 1, 2, 30)
    assert s.prev_at_or_before(utc(2026, 1, 1, 2, 29, 59)) == utc(2025, 12, 31, 2, 30)
    assert compile_schedule("0 0 29 2 *").prev_at_or_before(utc(2027, 1, 1)) == utc(2024, 2, 29)


def test_fires_returns_the_half_open_interval_and_honours_limit():
    s = compile_schedule("0 * * * *")
    got = s.fires(utc(2026, 1, 1, 0), utc(2026, 1, 1, 3))
    assert got == [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2), utc(2026, 1, 1, 3)]
    assert s.fires(utc(2026, 1, 1, 0), utc(2026, 1, 2), limit=2) == got[:2]


# -- gaps ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, smallest, largest",
    [
        ("* * * * *", 60, 60),
        ("*/5 * * * * *", 5, 5),
        ("*/7 * * * *", 4 * 60, 7 * 60),  # 56 -> 00 of the next hour
        ("30 2 * * *", 86400, 86400),
        ("0 9-17 * * 1-5", 3600, 3600 * 16 + 2 * 86400),  # Friday 17:00 -> Monday 09:00
        ("0 0,12 * * *", 43200, 43200),
        ("0 0 1 * *", 28 * 86400, 31 * 86400),
        ("0 0 1 1 *", 365 * 86400, 366 * 86400),
        ("0 0 * * 0", 7 * 86400, 7 * 86400),
        ("15 10 1,15 * *", 14 * 86400, 17 * 86400),  # Feb 15 -> Mar 1; Jan 15 -> Feb 1
        ("0 0 29 2 *", 4 * 366 * 86400 - 3 * 86400, 4 * 366 * 86400 - 3 * 86400),
    ],
)
def test_smallest_and_largest_gaps_between_occurrences(expr, smallest, largest):
    s = compile_schedule(expr)
    assert (s.min_gap_s(), s.max_gap_s()) == (smallest, largest)


# -- words --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, tz, words",
    [
        ("0 2 * * *", "America/New_York", "at 02:00 every day (America/New_York)"),
        ("*/5 * * * *", "UTC", "every 5 minutes"),
        ("* * * * * *", "UTC", "every second"),
        ("*/10 * * * * *", "UTC", "every 10 seconds"),
        ("* * * * *", "UTC", "every minute"),
        ("0 0 1 * *", "UTC", "at 00:00 on day 1 of the month"),
        ("30 * * * 1-5", "UTC", "at minute 30 of every hour on Monday through Friday"),
        ("@every 90s", "UTC", "every 90s (UTC epoch multiples)"),
        ("@reboot", "UTC", "once at every boot"),
        ("0 0 1 1 *", "UTC", "at 00:00 on day 1 of the month in January"),
        ("0 0 1 * mon", "UTC", "at 00:00 on day 1 of the month or on Monday"),
    ],
)
def test_describe_says_the_schedule_in_words(expr, tz, words):
    assert compile_schedule(expr, tz).describe() == words
