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
    assert entries[14].stdin == "Hello,\ntoday is fine.\nBye % done\n"


def test_a_reversed_range_inside_a_list_is_dropped_with_a_note():
    entry = next(e for e in read("kitchen-sink").entries if e.line == 29)
    assert (entry.cron_schedule, entry.schedule) == ("0 1,22-2 * * *", "0 1 * * *")
    assert "runs backwards" in entry.notes[0]


def test_tabs_separate_fields():
    entry = read("kitchen-sink").entries[0]
    assert (entry.user, entry.command) == ("root", "/usr/local/bin/backup-db.sh --full")


def test_crlf_line_endings_are_stripped_and_noted():
    parsed = read("crlf")
    assert [(e.line, e.command) for e in parsed.entries] == [
        (3, "/usr/local/bin/nightly"),
        (4, "/usr/local/bin/poll --quiet"),
    ]
    assert dict(parsed.entries[0].env) == {"PATH": "/usr/bin:/bin"}
    assert "CRLF" in parsed.notes[0]


def test_a_last_line_without_newline_makes_cron_ignore_the_whole_file():
    # cron logs "Missing newline before EOF, this crontab file will be ignored" and runs none of it
    parsed = read("no-newline")
    assert [e.line for e in parsed.entries] == [1, 2]
    assert [(p.line, p.cron_refuses) for p in parsed.errors] == [(2, True)]
    assert "no newline" in parsed.errors[0].message
    assert "line 2" in parsed.ignored_by_cron
    assert all(e.file_ignored == parsed.ignored_by_cron for e in parsed.entries)


@pytest.mark.parametrize("text", ["0 1 * * * root x\n# last comment", "0 1 * * * root x\n  ", ""])
def test_a_comment_or_blanks_without_newline_at_the_end_are_harmless(text):
    parsed = parse_crontab(text, "f", "system")
    assert parsed.errors == () and parsed.ignored_by_cron is None


def test_a_line_cron_refuses_makes_it_ignore_the_whole_file():
    # cron logs "Syntax error, this crontab file will be ignored": none of the good lines ran either
    parsed = read("kitchen-sink")
    assert [(p.line, p.cron_refuses) for p in parsed.errors] == [
        (25, True),
        (26, True),
        (27, False),
        (28, False),
        (31, True),
    ]
    assert parsed.ignored_by_cron.startswith("Debian cron ignores this whole file because of line 25")
    assert {e.file_ignored for e in parsed.entries} == {parsed.ignored_by_cron}


def test_lines_cron_accepts_but_never_runs_leave_the_rest_of_the_file_alone():
    parsed = parse_crontab("0 0 31 2 * root never\n0 22-2 * * * root reversed\n0 1 * * * root good\n", "f", "system")
    assert [p.line for p in parsed.errors] == [1, 2]
    assert parsed.ignored_by_cron is None and parsed.entries[0].file_ignored is None


def test_an_empty_line_in_a_crlf_file_is_a_line_cron_refuses():
    parsed = parse_crontab("0 1 * * * root a\r\n\r\n0 2 * * * root b\r\n", "f", "system")
    assert [(p.line, p.cron_refuses) for p in parsed.errors] == [(2, True)]
    assert [e.command for e in parsed.entries] == ["a", "b"] and parsed.ignored_by_cron


def test_an_empty_mailto_is_not_a_setting_and_the_message_says_how_to_write_it():
    parsed = parse_crontab("MAILTO=\n0 1 * * * root a\n", "f", "system")
    assert parsed.errors[0].line == 1 and "not a setting" in parsed.errors[0].message
    assert 'MAILTO=""' in parsed.errors[0].hint
    assert parsed.entries[0].file_ignored and "MAILTO" not in dict(parsed.entries[0].env)


def test_macros_are_lower_case_only():
    parsed = parse_crontab("@Daily root x\n", "f", "system")
    assert parsed.entries == () and parsed.errors[0].cron_refuses
    assert "lower case" in parsed.errors[0].message and parsed.errors[0].hint == "write @daily"


def test_what_follows_a_complete_range_is_skipped_and_chrono_gets_the_field_cron_reads():
    parsed = parse_crontab("*/5/2 * * * * root a\n1-5. 3 * * * root b\n*x 3 * * * root c\n", "f", "system")
    assert parsed.errors == ()
    assert [(e.cron_schedule, e.schedule) for e in parsed.entries] == [
        ("*/5/2 * * * *", "*/5 * * * *"),
        ("1-5. 3 * * *", "1,2,3,4,5 3 * * *"),
        ("*x 3 * * *", "* 3 * * *"),
    ]
    assert "skips what follows" in parsed.entries[0].notes[0]


def test_a_star_led_field_keeps_its_star_when_rewritten():
    # the leading '*' makes a job wildcard (DST) and a day field unrestricted (day rule)
    entry = parse_crontab("0 3 *-9;x * mon root a\n", "f", "system").entries[0]
    assert entry.schedule == "0 3 * * mon"
    entry = parse_crontab("*/20,7;x 3 * * * root a\n", "f", "system").entries[0]
    assert entry.schedule == "*/60,7,20,40 3 * * *"


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
        ("EMPTY=", None),
        ("EMPTY= ", None),
        ("A =", None),
        ("=x", ("", "x")),
        ("'A=B'=1", None),
        ('A"B=1', ('A"B', "1")),
        ('A="b"c', None),
        ("H=1\r", ("H", "1")),
        ('"B C"=2', ("B C", "2")),
        ("E= x y  ", ("E", "x y")),
        ("A==1", ("A", "=1")),
        ("PATH=$PATH:/opt/bin", ("PATH", "$PATH:/opt/bin")),
        ('BAD="unterminated', None),
        ("0 5 * * * root FOO=bar cmd", None),
        ("@daily FOO=1 cmd", None),
    ],
)
def test_environment_lines_are_recognised_like_env_c(line, expected):
    # each checked with Debian's `crontab -n` (cron 3.0pl1-162): None means cron refuses the line
    assert parse_env_line(line) == expected


@pytest.mark.parametrize(
    "command, expected",
    [
        ("echo hi", ("echo hi", None)),
        ("date +\\%Y", ("date +%Y", None)),
        ("cat%a%b", ("cat", "a\nb\n")),
        ("cat%a%", ("cat", "a\n")),
        ("cat%a%%b", ("cat", "a\n\nb\n")),
        ("cat%50\\% off", ("cat", "50% off\n")),
        ("cat%", ("cat", "")),
        ("printf 'a\\tb'", ("printf 'a\\tb'", None)),
        ("echo 'x\\\\y'", ("echo 'x\\y'", None)),
        ("f 'a\\\\\\%b'", ("f 'a\\%b'", None)),
        ("f 'c\\\\%d\\\\e", ("f 'c\\", "d\\\\e\n")),
        ("f%a\\\\b%c\\%d\\\\%e", ("f", "a\\\\b\nc%d\\%e\n")),
    ],
)
def test_the_percent_rule_matches_do_command_c(command, expected):
    # every case with a trailing newline or a doubled backslash was run by Debian's cron daemon
    # (a python job writing what it received): in the command cron drops a backslash before
    # `%` or `\`; in standard input only before `%`; and it ends non-empty input with a newline
    assert split_percent(command) == expected


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("0 5 * *", "too few fields"),
        ("* * * * monday root x", "day-of-week field 'monday'"),
        ("5/10 * * * * root x", "minute field '5/10'"),
        ("0 0 * * * root", "too few fields"),
        ("0 0 * * * bad:user cmd", "can never be a user name"),
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


# Each line was checked with Debian's own `crontab -n` (cron 3.0pl1-162), as a user crontab:
# True means cron accepts the line, False that it refuses it (and with it the whole file).
CRONTAB_N = [
    ("0 5 * * * true", True),
    ("60 * * * * true", False),
    ("* * * * 7 true", True),
    ("* * * * 8 true", False),
    ("5/10 * * * * true", False),
    ("*/0 * * * * true", False),
    ("*/100 * * * * true", True),
    ("50-70/100 * * * * true", False),
    ("*/5/2 * * * * true", True),
    ("5; * * * * true", True),
    ("*x * * * * true", True),
    ("1-5x * * * * true", False),
    ("1-5. * * * * true", True),
    ("5-1 * * * * true", True),
    ("* * * * fri-mon true", True),
    ("* * * January * true", False),
    ("* * * JAN * true", True),
    ("* * * * monday true", False),
    ("1,,2 * * * * true", False),
    (",1 * * * * true", False),
    ("@daily true", True),
    ("@Daily true", False),
    ("@DAILY true", False),
    ("@every true", False),
    ("@daily", True),
    ("0 5 * * *", True),
    ("0 5 * * * %only-stdin", True),
    ("*/15 * * * *true", True),
    ("* * * * * * true", False),
    ("0 5 * * * *true", False),
    ("@daily * true", False),
    ("0 5 * * * 5 true", True),
    ("\t0\t5\t*\t*\t*\ttrue", True),
    ("A=", False),
    ("MAILTO=", False),
    ("A= 1", True),
    ("A =", False),
    ("A B=1", False),
    ('A="b', False),
    ('A="b"c', False),
    ('"A B"=1', True),
    ("=x", True),
]


@pytest.mark.parametrize("line, accepted", CRONTAB_N, ids=[repr(c[0]) for c in CRONTAB_N])
def test_a_line_is_refused_exactly_when_debian_crontab_refuses_it(line, accepted):
    parsed = parse_crontab(line + "\n", "f", "user", "alice")
    assert (parsed.ignored_by_cron is None) == accepted, parsed.errors


def test_in_a_system_crontab_a_command_may_start_with_a_star_but_a_user_needs_a_command():
    # checked with Debian's cron daemon: `* * * * * root * true` runs "* true"; `0 5 * * * root` voids the file
    assert parse_crontab("* * * * * root * true\n", "f", "system").entries[0].command == "* true"
    assert parse_crontab("0 5 * * * root\n", "f", "system").ignored_by_cron


def test_cron_refuses_a_command_over_998_characters_and_with_it_the_file():
    # Debian's crontab -n: 998 characters pass, 999 are "command too long"; its daemon then ignores the file
    ok = parse_crontab("* * * * * " + "x" * 998 + "\n", "f", "user", "alice")
    too_long = parse_crontab("* * * * * " + "x" * 999 + "\n0 1 * * * true\n", "f", "user", "alice")
    assert ok.ignored_by_cron is None and len(ok.entries[0].command) == 998
    assert "999 characters" in too_long.errors[0].message and too_long.ignored_by_cron
    assert too_long.entries[0].file_ignored


@pytest.mark.parametrize(
    "line, expected",
    [  # the lengths Debian's cron daemon gave each variable
        ("A=" + "y" * 1200, 996),
        ("E=" + "y" * 997, 996),
        ("FF=" + "y" * 996, 995),
        ("  G=" + "y" * 996, 996),
        ('B="' + "y" * 994 + '"', 994),
    ],
)
def test_cron_keeps_998_characters_of_a_setting(line, expected):
    assert len(parse_env_line(line)[1]) == expected


def test_a_quoted_value_whose_closing_quote_is_past_the_limit_is_not_a_setting():
    assert parse_env_line('B="' + "y" * 995 + '"') is None  # crontab -n: refused


def test_bytes_that_are_not_utf8_are_reported_on_entries_and_kept_out_of_comments():
    # cron passes latin-1 bytes to the shell as they are; a UTF-8 registry cannot hold them
    text = b"# t\xe2che de sauvegarde\n0 1 * * * root echo \xe9t\xe9\n#0 3 * * * root t\xe9\n0 2 * * * root ok\n"
    parsed = parse_crontab(text.decode("utf-8", errors="surrogateescape"), "f", "system")
    assert [(p.line, p.cron_refuses) for p in parsed.errors] == [(2, False)] and "not UTF-8" in parsed.errors[0].message
    assert [e.line for e in parsed.entries] == [4] and parsed.ignored_by_cron is None
    assert parsed.disabled[0].text == "#0 3 * * * root t\ufffd"


def test_a_byte_order_mark_is_part_of_the_first_line_to_cron():
    parsed = parse_crontab("\ufeff0 1 * * * root a\n0 2 * * * root b\n", "f", "system")
    assert "byte-order mark" in parsed.errors[0].message and parsed.ignored_by_cron
    assert [e.line for e in parsed.entries] == [2]


def test_a_nul_byte_is_reported():
    parsed = parse_crontab("0 1 * * * root echo a\0b\n", "f", "system")
    assert parsed.entries == () and "NUL" in parsed.errors[0].message
