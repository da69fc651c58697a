"""Crontab files are read line by line exactly as Debian cron reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from chronoctl.crontab import parse_crontab, parse_env_line, split_percent

FIXTURES = Path(__file__).parent.parent / "fixtures" / "crontabs"


def read(name: str, fmt: str = "system", user: str | None = None):
    text = (FIXTURES / name).read_bytes().decode()
    return parse_crontab(text, name, fmt, user)


def test_the_kitchen_sink_imports_every_valid_line_with_its_exact_line_number():
    parsed = read("kitchen-sink")
    assert [(e.line, e.user, e.schedule) for e in parsed.entries] == [
        (8, "root", "0 5 * * *"),
        (9, "app", "*/15 * * * *"),
        (10, "www-data", "30 2 * * mon-fri"),
        (11, "root", "0 0 1 jan *"),
        (12, "root", "0 4 13 * 5"),
        (13, "root", "5 0 * * *"),
        (14, "root", "0 6 * * *"),
        (17, "root", "@reboot"),
        (18, "root", "@daily"),
        (19, "app", "@hourly"),
        (21, "root", "30 2 * * *"),
        (24, "app", "0 9 * * 1-5"),
        (29, "root", "0 1 * * *"),
        (30, "root", "17 * * * *"),
    ]


def test_errors_name_the_line_and_say_what_is_wrong():
    errors = {e.line: e.message for e in read("kitchen-sink").errors}
    assert sorted(errors) == [25, 26, 27, 28, 31]
    assert "minute field '60'" in errors[25]
    assert "no user field" in errors[26] and "no user field" in errors[31]
    assert errors[27] == "'0 0 31 2 *' can never run: no month in feb has day 31"
    assert errors[28] == "'0 22-2 * * *' can never run: the hour field matches nothing"
    assert all(e.hint for e in read("kitchen-sink").errors)


def test_commented_out_entries_are_reported_as_disabled_but_prose_comments_are_not():
    assert [(d.line, d.text) for d in read("kitchen-sink").disabled] == [
        (15, "#0 7 * * * root /usr/local/bin/old-job"),
        (16, "# 15 7 * * * root /usr/local/bin/another-old-job"),
    ]
    assert read("debian/crontab").disabled == ()  # the "user-name command" example


def test_environment_lines_apply_to_the_lines_below_them():
    entries = {e.line: e for e in read("kitchen-sink").entries}
    assert entries[8].env == (
        ("SHELL", "/bin/bash"),
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("MAILTO", "ops@example.com"),
        ("GREETING", "hello world"),
    )
    assert dict(entries[24].env)["MAILTO"] == ""
    assert dict(entries[24].env)["TZ"] == "Europe/Berlin"


def test_cron_tz_switches_the_zone_part_way_and_takes_precedence_over_tz():
    entries = {e.line: e for e in read("kitchen-sink").entries}
    assert entries[19].timezone is None
    assert entries[21].timezone == "America/New_York"
    assert entries[24].timezone == "America/New_York"  # TZ below CRON_TZ does not override it


def test_the_percent_rule_splits_command_and_stdin():
    entries = {e.line: e for e in read("kitchen-sink").entries}
    assert entries[13].command == "tar czf /backup/etc-$(date +%Y-%m-%d).tgz /etc"
    assert entries[13].stdin is None
    assert entries[14].command == 'mail -s "daily report" ops'
    assert entries[14].stdin == "Hello,\ntoday is fine.\nBye % done"


def test_a_reversed_range_inside_a_list_is_dropped_with_a_note():
    entry = next(e for e in read("kitchen-sink").entries if e.line == 29)
    assert (entry.cron_schedule, entry.schedule) == ("0 1,22-2 * * *", "0 1 * * *")
    assert "runs backwards" in entry.notes[0]


def test_tabs_separate_fields():
    entry = read("kitchen-sink").entries[0]
    assert (entry.user, entry.command) == ("root", "/usr/local/bin/backup-db.sh --full")


def test_crlf_line_endings_are_stripped_and_noted():
    parsed = read("crlf")
    assert [(e.line, e.command) for e in parsed.entries] == [(3, "/usr/local/bin/nightly"), (4, "/usr/local/bin/poll --quiet")]
    assert dict(parsed.entries[0].env) == {"PATH": "/usr/bin:/bin"}
    assert "CRLF" in parsed.notes[0]


def test_a_last_line_without_newline_is_imported_and_noted():
    parsed = read("no-newline")
    assert [e.line for e in parsed.entries] == [1, 2]
    assert "no newline at the end" in parsed.notes[0]


def test_a_user_crontab_has_no_user_field_and_takes_the_user_given():
    parsed = read("user-alice", "user", "alice")
    assert [(e.line, e.user, e.schedule, e.command) for e in parsed.entries] == [
        (8, "alice", "*/5 * * * *", "/home/alice/bin/check-mail.sh >/dev/null 2>&1"),
        (9, "alice", "0 9 * * 1", "cd /home/alice/reports && ./weekly.py --send"),
        (10, "alice", "@weekly", "/home/alice/bin/cleanup"),
        (11, "alice", "0 0 * * *", "/home/alice/bin/cleanup"),
    ]
    assert parsed.errors == () and parsed.disabled == ()


def test_real_debian_files_parse_cleanly():
    for name in ("crontab", "anacron", "e2scrub_all", "sysstat"):
        parsed = read(f"debian/{name}")
        assert parsed.errors == (), name
        assert parsed.entries, name
    sysstat = read("debian/sysstat")
    assert [(e.line, e.schedule) for e in sysstat.entries] == [(6, "5-55/10 * * * *"), (9, "59 23 * * *")]


@pytest.mark.parametrize(
    "line, expected",
    [
        ("FOO=bar", ("FOO", "bar")),
        ("FOO = bar  ", ("FOO", "bar")),
        ('FOO="a b"', ("FOO", "a b")),
        ("FOO='a # b'", ("FOO", "a # b")),
        ('MAILTO=""', ("MAILTO", "")),
        ("EMPTY=", ("EMPTY", "")),
        ("PATH=$PATH:/opt/bin", ("PATH", "$PATH:/opt/bin")),
        ('BAD="unterminated', None),
        ("0 5 * * * root FOO=bar cmd", None),
        ("@daily FOO=1 cmd", None),
    ],
)
def test_environment_lines_are_recognised_like_env_c(line, expected):
    assert parse_env_line(line) == expected


@pytest.mark.parametrize(
    "command, expected",
    [
        ("echo hi", ("echo hi", None)),
        ("date +\\%Y", ("date +%Y", None)),
        ("cat%a%b", ("cat", "a\nb")),
        ("cat%50\\% off", ("cat", "50% off")),
        ("cat%", ("cat", "")),
        ("printf 'a\\tb'", ("printf 'a\\tb'", None)),
    ],
)
def test_the_percent_rule_matches_do_command_c(command, expected):
    assert split_percent(command) == expected


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("0 5 * *", "too few fields"),
        ("* * * * monday root x", "day-of-week field 'monday'"),
        ("5/10 * * * * root x", "minute field '5/10'"),
        ("0 0 * * * root", "too few fields"),
        ("0 0 * * * bad:user cmd", "is not a user name"),
        ("@fortnightly root x", "unknown macro"),
        ("0 0 * * fri-mon root x", "can never run"),
    ],
)
def test_what_cron_refuses_or_can_never_run_is_an_error(line, fragment):
    parsed = parse_crontab(line + "\n", "f", "system")
    assert parsed.entries == ()
    assert fragment in parsed.errors[0].message and parsed.errors[0].line == 1


def test_one_bad_line_does_not_stop_the_next():
    parsed = parse_crontab("61 * * * * root a\n0 1 * * * root b\n", "f", "system")
    assert [e.line for e in parsed.entries] == [2] and [e.line for e in parsed.errors] == [1]


def test_both_day_fields_restricted_can_still_run_on_the_weekday():
    parsed = parse_crontab("0 0 31 2 mon root x\n", "f", "system")
    assert parsed.errors == () and parsed.entries[0].schedule == "0 0 31 2 mon"
