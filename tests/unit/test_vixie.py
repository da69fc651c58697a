"""The Debian cron oracle, checked by hand against cron.c's wakeup cases.

Transitions used below (UTC instants of the clock change):
  America/New_York   2025-03-09 07:00Z  01:59 EST -> 03:00 EDT (spring forward, 1 h)
                     2025-11-02 06:00Z  01:59 EDT -> 01:00 EST (fall back, 1 h)
  Australia/Lord_Howe 2025-04-05 15:00Z  01:59 +11 -> 01:30 +1030 (fall back, 30 min)
                     2025-10-04 15:30Z  01:59 +1030 -> 02:30 +11 (spring forward, 30 min)
  Pacific/Apia       2011-12-30 10:00Z  23:59 Dec 29 -1000 -> 00:00 Dec 31 +1400 (a day skipped)
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from chronod.core.vixie import VixieParseError, parse_entry, simulate

UTC = timezone.utc


def z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def iso(instants: list[datetime]) -> list[str]:
    return [t.strftime("%Y-%m-%dT%H:%MZ") for t in instants]


NY = "America/New_York"
LH = "Australia/Lord_Howe"

CASES = [
    # (expr, zone, start, end, expected starts)
    ("30 2 * * *", NY, "2025-03-08T12:00Z", "2025-03-10T12:00Z", ["2025-03-09T07:00Z", "2025-03-10T06:30Z"]),
    # one start per skipped match, all in the minute after the jump (Debian's cron on a fake clock:
    # tests/fixtures/cron_dst)
    ("0,15,30,45 2 * * *", NY, "2025-03-09T06:00Z", "2025-03-09T08:00Z", ["2025-03-09T07:00Z"] * 4),
    ("0 3 * * *", NY, "2025-03-09T06:00Z", "2025-03-09T08:00Z", ["2025-03-09T07:00Z"]),
    ("* 2 * * *", NY, "2025-03-09T06:00Z", "2025-03-09T08:00Z", []),
    ("*/30 2 * * *", NY, "2025-03-09T06:00Z", "2025-03-09T08:00Z", []),
    ("30 1 * * *", NY, "2025-11-01T12:00Z", "2025-11-03T12:00Z", ["2025-11-02T05:30Z", "2025-11-03T06:30Z"]),
    (
        "*/30 1 * * *",
        NY,
        "2025-11-02T04:00Z",
        "2025-11-02T08:00Z",
        ["2025-11-02T05:00Z", "2025-11-02T05:30Z", "2025-11-02T06:00Z", "2025-11-02T06:30Z"],
    ),
    (
        "0 * * * *",
        NY,
        "2025-11-02T04:30Z",
        "2025-11-02T07:30Z",
        ["2025-11-02T05:00Z", "2025-11-02T06:00Z", "2025-11-02T07:00Z"],
    ),
    (
        "@hourly",
        NY,
        "2025-11-02T04:30Z",
        "2025-11-02T07:30Z",
        ["2025-11-02T05:00Z", "2025-11-02T06:00Z", "2025-11-02T07:00Z"],
    ),
    (
        "15 2 * * *",
        LH,
        "2025-10-03T12:00Z",
        "2025-10-05T18:00Z",
        ["2025-10-03T15:45Z", "2025-10-04T15:30Z", "2025-10-05T15:15Z"],
    ),
    ("45 1 * * *", LH, "2025-04-04T12:00Z", "2025-04-06T12:00Z", ["2025-04-04T14:45Z", "2025-04-05T14:45Z"]),
    (
        "0 0 * * *",
        "Pacific/Apia",
        "2011-12-28T00:00Z",
        "2012-01-01T00:00Z",
        ["2011-12-28T10:00Z", "2011-12-29T10:00Z", "2011-12-30T10:00Z", "2011-12-31T10:00Z"],
    ),
    ("0 12 30 12 *", "Pacific/Apia", "2011-12-01T00:00Z", "2012-01-31T00:00Z", []),
]


@pytest.mark.parametrize("expr, tz, start, end, expected", CASES, ids=[f"{c[0]} {c[1]} {c[2][:10]}" for c in CASES])
def test_cron_starts_jobs_at_the_hand_checked_instants(expr, tz, start, end, expected):
    assert iso(simulate(expr, tz, z(start), z(end))) == expected


def test_a_wildcard_minute_job_runs_in_both_passes_of_a_half_hour_fall_back():
    starts = simulate("* 1 * * *", LH, z("2025-04-05T14:40Z"), z("2025-04-05T15:05Z"))
    assert len(starts) == 19 + 6
    assert iso(starts)[18:20] == ["2025-04-05T14:59Z", "2025-04-05T15:00Z"]


def test_a_fixed_time_job_does_not_repeat_when_cron_was_already_running_in_the_first_pass():
    # start sits inside the second 01:xx; the warm-up means cron saw the first pass
    starts = simulate("30 1 * * *", NY, z("2025-11-02T06:10Z"), z("2025-11-03T12:00Z"))
    assert iso(starts) == ["2025-11-03T06:30Z"]


def test_the_interval_excludes_start_and_includes_end():
    starts = simulate("0 * * * *", "UTC", z("2025-01-01T00:00Z"), z("2025-01-01T02:00Z"))
    assert iso(starts) == ["2025-01-01T01:00Z", "2025-01-01T02:00Z"]


def test_day_fields_are_ored_when_both_are_restricted():
    days = [t.day for t in simulate("0 0 13 * 5", "UTC", z("2025-06-01T00:00Z"), z("2025-06-30T23:59Z"))]
    assert days == [6, 13, 20, 27]  # Fridays, and the 13th (itself a Friday)


def test_day_fields_are_anded_when_one_starts_with_a_star():
    assert simulate("0 0 */10 * 1", "UTC", z("2025-06-01T00:00Z"), z("2025-06-30T23:59Z")) == []
    assert len(simulate("0 0 1-31 * 1", "UTC", z("2025-06-01T00:00Z"), z("2025-06-30T23:59Z"))) == 29


def test_seven_and_zero_and_names_all_mean_sunday():
    a = simulate("0 9 * * 7", "UTC", z("2025-06-01T00:00Z"), z("2025-07-01T00:00Z"))
    b = simulate("0 9 * * 0", "UTC", z("2025-06-01T00:00Z"), z("2025-07-01T00:00Z"))
    c = simulate("0 9 * JUN Sun", "UTC", z("2025-06-01T00:00Z"), z("2025-07-01T00:00Z"))
    assert a == b == c and [t.day for t in a] == [1, 8, 15, 22, 29]


def test_every_minute_for_four_hundred_days_counts_every_real_minute_across_dst():
    starts = simulate("* * * * *", NY, z("2025-01-01T00:00Z"), z("2025-01-01T00:00Z") + timedelta(days=400))
    assert len(starts) == 400 * 1440


def test_february_31_never_runs_and_reboot_is_not_a_timed_start():
    assert simulate("0 0 31 2 *", "UTC", z("2025-01-01T00:00Z"), z("2026-01-01T00:00Z")) == []
    assert simulate("@reboot", "UTC", z("2025-01-01T00:00Z"), z("2026-01-01T00:00Z")) == []


@pytest.mark.parametrize(
    "expr, minutes, hours, dows, wildcard",
    [
        ("*/90 3 * * *", {0}, {3}, set(range(7)), True),
        ("0-59/7 3 * * *", set(range(0, 60, 7)), {3}, set(range(7)), False),
        ("0 22-2 * * *", {0}, set(), set(range(7)), False),
        ("0 1,22-2 * * 5-7", {0}, {1}, {5, 6, 0}, False),
        ("0 * * * *", {0}, set(range(24)), set(range(7)), True),
    ],
)
def test_fields_are_read_the_way_entry_c_reads_them(expr, minutes, hours, dows, wildcard):
    entry = parse_entry(expr)
    assert (set(entry.minutes), set(entry.hours), set(entry.dows), entry.wildcard) == (minutes, hours, dows, wildcard)


@pytest.mark.parametrize(
    "expr",
    [
        "60 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * * 13 *",
        "* * * * 8",
        "*/0 * * * *",
        "* * * * monday",
        "* * * *",
        "@fortnightly",
        "50-70 * * * *",
        "5/10 * * * *",
        "0-60/7 * * * *",
        "0 0 * * 0/1",
        "0 25-2 * * *",
        ",5 * * * *",
    ],
)
def test_what_debian_crontab_refuses_raises(expr):
    # each of these was checked with Debian's own `crontab` (cron 3.0pl1-162): "bad minute" etc.
    with pytest.raises(VixieParseError):
        parse_entry(expr)


@pytest.mark.parametrize(
    "expr, minutes, wildcard",
    [
        ("*/5/2 3 * * *", set(range(0, 60, 5)), True),
        ("5; 3 * * *", {5}, False),
        ("*x 3 * * *", set(range(60)), True),
        ("*-5 3 * * *", set(range(60)), True),
        ("1-5. 3 * * *", {1, 2, 3, 4, 5}, False),
        ("*/20,7;x 3 * * *", {0, 7, 20, 40}, True),
    ],
)
def test_what_follows_a_complete_range_is_skipped_like_get_list_does(expr, minutes, wildcard):
    # each accepted by Debian's `crontab -n`; a `* * * * *` job in `*x` form ran under its cron daemon
    entry = parse_entry(expr)
    assert (set(entry.minutes), entry.wildcard) == (minutes, wildcard)


@pytest.mark.parametrize("expr", ["@Daily", "@DAILY", "@Reboot", "1-5x * * * *", "50-70/100 * * * *"])
def test_macros_are_case_sensitive_and_a_number_must_end_at_a_non_alphanumeric(expr):
    with pytest.raises(VixieParseError):
        parse_entry(expr)


def test_the_first_bad_field_in_line_order_is_the_one_reported():
    # /etc/anacrontab read as a crontab: entry.c stops at the day-of-month, not at '--report'
    with pytest.raises(VixieParseError, match="'cron' is not a number"):
        parse_entry("1 5 cron.daily run-parts --report")
