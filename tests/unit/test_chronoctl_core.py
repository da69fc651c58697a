"""chronoctl's pure parts: the error boundary, flag conversion, time parsing, GitHub annotations."""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from pathlib import Path

import pytest

from chronoctl import _params, common, errors
from chronoctl import main as cli
from chronoctl.cmd_spec import github_annotation

UTC = timezone.utc


# --- the error boundary ------------------------------------------------------------------


def _failing(exc: BaseException):
    def program(args):
        raise exc

    return program


@pytest.mark.parametrize(
    "exc, code",
    [
        (errors.InvalidInput("bad"), 1),
        (errors.UsageError("bad"), 2),
        (errors.UnknownJob("x", "registry /r"), 2),
        (errors.Unreachable("db down"), 3),
        (errors.CliError("custom", code=4), 4),
        (KeyboardInterrupt(), 130),
        (RuntimeError("boom"), 70),
    ],
)
def test_each_way_a_command_ends_has_its_exit_code(monkeypatch, capsys, exc, code):
    monkeypatch.setattr(cli, "program", _failing(exc))
    assert cli.main([]) == code
    assert "Traceback" not in capsys.readouterr().err


def test_an_operator_error_prints_message_and_hint_in_our_format(monkeypatch, capsys):
    monkeypatch.setattr(cli, "program", _failing(errors.UnknownJob("nightly", "registry /etc/chrono/jobs.d")))
    cli.main([])
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "chronoctl: error: no job 'nightly' in registry /etc/chrono/jobs.d"
    assert err[1].startswith("hint: ")


def test_a_bug_is_one_line_with_the_way_to_see_more(monkeypatch, capsys):
    monkeypatch.delenv("CHRONO_TRACEBACK", raising=False)
    monkeypatch.setattr(cli, "program", _failing(ValueError("bad\nsecond line")))
    cli.main(["next"])
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "chronoctl: error: unexpected ValueError: bad"
    assert "--traceback" in err and "Traceback" not in err


def test_traceback_is_shown_when_asked_for_with_the_password_masked(monkeypatch, capsys):
    monkeypatch.setattr(cli, "program", _failing(RuntimeError("connect postgresql://u:hunter2@db/x")))
    assert cli.main(["--traceback", "status"]) == 70
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "hunter2" not in err and "postgresql://u:***@db/x" in err


def test_chrono_traceback_in_the_environment_also_shows_it(monkeypatch, capsys):
    monkeypatch.setenv("CHRONO_TRACEBACK", "1")
    monkeypatch.setattr(cli, "program", _failing(RuntimeError("boom")))
    cli.main(["next"])
    assert "Traceback" in capsys.readouterr().err


def test_an_error_message_cannot_drive_the_terminal(monkeypatch, capsys):
    monkeypatch.setattr(cli, "program", _failing(errors.InvalidInput("job \x1b[2J\x07 is bad")))
    cli.main([])
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J\\x07" in err


def test_usage_errors_exit_2_in_process(capsys):
    assert cli.main(["next", "--count", "zero", "--cron", "* * * * *"]) == 2
    assert cli.main(["no-such-command"]) == 2
    assert capsys.readouterr().err.startswith("chronoctl: error: ")


def test_help_exits_0(capsys):
    assert cli.main(["--help"]) == 0
    assert "validate" in capsys.readouterr().out


# --- flag conversion without pydantic -------------------------------------------------------


class Colour(str, Enum):
    red = "red"
    blue = "blue"


class Info:
    def __init__(self, **kw):
        self.min = kw.get("min")
        self.max = kw.get("max")
        self.clamp = kw.get("clamp", False)
        self.case_sensitive = kw.get("case_sensitive", True)
        self.parser = None
        self.click_type = None
        for name, default in _params._PATH_DEFAULTS.items():
            setattr(self, name, kw.get(name, default))


@pytest.mark.parametrize(
    "annotation, info, raw, value",
    [
        (str, Info(), "x", "x"),
        (int, Info(min=1, max=10), "5", 5),
        (int, Info(min=1, max=10, clamp=True), "50", 10),
        (float, Info(), "2.5", 2.5),
        (bool, Info(), "yes", True),
        (bool, Info(), "0", False),
        (Path, Info(), "/etc/chrono", Path("/etc/chrono")),
        (Colour, Info(), "blue", Colour.blue),
        (Colour, Info(case_sensitive=False), "RED", Colour.red),
        (list[Path], Info(), ("a", "b"), [Path("a"), Path("b")]),
    ],
)
def test_simple_flags_convert_like_typer_would(annotation, info, raw, value):
    assert _params.converter(annotation, info)(raw) == value


@pytest.mark.parametrize(
    "annotation, info, raw, message",
    [
        (int, Info(), "x", "'x' is not a valid integer"),
        (int, Info(min=1, max=10), "0", "0 is not in the range 1<=x<=10"),
        (int, Info(min=1), "0", "0 is not in the range x>=1"),
        (Colour, Info(), "green", "'green' is not one of 'red', 'blue'"),
        (bool, Info(), "maybe", "is not a valid boolean"),
    ],
)
def test_bad_flag_values_are_refused_with_a_reason(annotation, info, raw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _params.converter(annotation, info)(raw)


def test_paths_with_checks_and_unknown_types_are_left_to_typer():
    assert _params.converter(Path, Info(exists=True)) is None
    assert _params.converter(complex, Info()) is None


# --- times from the command line -----------------------------------------------------------


@pytest.mark.parametrize(
    "text, tz, utc",
    [
        ("2026-11-01T00:00:00Z", "America/New_York", "2026-11-01T00:00:00+00:00"),
        ("2026-11-01T02:30:00-04:00", "UTC", "2026-11-01T06:30:00+00:00"),
        ("2026-07-01T02:30:00", "America/New_York", "2026-07-01T06:30:00+00:00"),
        ("2026-11-01T01:30:00", "America/New_York", "2026-11-01T05:30:00+00:00"),  # first of two 01:30s
        ("2026-07-01", "Europe/Berlin", "2026-06-30T22:00:00+00:00"),
    ],
)
def test_command_line_times_honour_offsets_and_read_naive_ones_in_the_zone(text, tz, utc):
    assert common.parse_instant(text, tz).isoformat() == utc


def test_a_time_chrono_cannot_read_is_a_usage_error_with_examples():
    with pytest.raises(errors.UsageError, match="not a time chrono can read") as err:
        common.parse_instant("the day after tomorrow", "UTC")
    assert "yesterday 02:00" in (err.value.hint or "")


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("15m", 900), ("24h", 86400), ("7d", 604800), ("1h30m", 5400)])
def test_duration_flags(text, seconds):
    assert common.parse_seconds(text, "--window") == seconds


@pytest.mark.parametrize("text", ["0s", "soon", "-5m"])
def test_bad_duration_flags_are_usage_errors(text):
    with pytest.raises(errors.UsageError):
        common.parse_seconds(text, "--window")


NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "text, tz, start",
    [
        ("24h", "UTC", "2026-12-02T12:00:00+00:00"),
        ("2026-12-01", "UTC", "2026-12-01T00:00:00+00:00"),
        ("2026-12-01", "America/New_York", "2026-12-01T05:00:00+00:00"),
        ("yesterday 02:00", "UTC", "2026-12-02T02:00:00+00:00"),
        ("2026-12-03T06:00:00-05:00", "UTC", "2026-12-03T11:00:00+00:00"),
    ],
)
def test_since_takes_a_duration_or_a_time(text, tz, start):
    assert common.parse_since(text, NOW, tz).isoformat() == start


@pytest.mark.parametrize(
    "text, message",
    [("soon", "not a time chrono can read"), ("2026-12-04", "is in the future"), ("0s", "longer than 0s")],
)
def test_a_since_that_is_not_a_past_window_is_a_usage_error(text, message):
    with pytest.raises(errors.UsageError, match=message):
        common.parse_since(text, NOW)


# --- github annotations ----------------------------------------------------------------------


def test_github_annotations_escape_what_the_workflow_syntax_reserves():
    line = github_annotation(
        {
            "severity": "error",
            "file": "jobs,a:b.yaml",
            "line": 3,
            "job_id": "x",
            "path": "schedule",
            "message": "100% wrong\nreally",
            "hint": None,
        }
    )
    assert line == "::error file=jobs%2Ca%3Ab.yaml,line=3,title=chrono::job 'x': schedule: 100%25 wrong%0Areally"


def test_times_take_the_common_short_forms():
    from datetime import datetime, timezone

    from chronoctl import common

    now = datetime(2026, 12, 3, 9, 0, tzinfo=timezone.utc)

    def at(text: str, tz: str = "America/New_York") -> str:
        return common.parse_instant(text, tz, "--at", now).isoformat()

    assert at("02:00") == "2026-12-03T07:00:00+00:00"
    assert at("10:00") == "2026-12-02T15:00:00+00:00"  # not come yet today: yesterday's
    assert at("yesterday 02:00") == "2026-12-02T07:00:00+00:00"
    assert at("today 10:00") == "2026-12-03T15:00:00+00:00"
    assert at("-2h") == "2026-12-03T07:00:00+00:00"
    assert at("2026-12-03") == "2026-12-03T05:00:00+00:00"
    assert at("now") == now.isoformat()
    assert at("2026-12-03T01:00:00Z", "UTC") == "2026-12-03T01:00:00+00:00"


@pytest.mark.parametrize(
    "state, error",
    [
        ("skipped_blackout", "inside maintenance window nightly (db upgrade) until 2026-03-10T04:00:00Z"),
        ("skipped_paused", "job paused: INC-7 (by alice)"),
        ("skipped_overlap", None),
        ("skipped_blackout", "inside maintenance window w (evil \x1b[2J\x07) until 2026-03-10T04:00:00Z"),
    ],
)
def test_logs_of_a_run_that_was_skipped_says_it_never_started_and_why_not_that_it_has_not_yet(state, error):
    from chronoctl import output
    from tests.unit.test_history import DAILY, run

    skipped = run(DAILY, "2026-03-10 02:00", state, attempts=0, error=error)
    text, note = output.show(None, skipped, None, "sqlite:///x")
    assert text == ""
    assert "not started yet" not in note
    assert f"never started: it was {state}" in note
    assert (error or "").split(" (")[0] in note
    assert not any(ord(c) < 32 for c in note), "control characters reach the terminal"


def test_logs_of_a_pending_run_says_it_has_not_started_yet():
    from chronoctl import output
    from tests.unit.test_history import DAILY, run

    _, note = output.show(None, run(DAILY, "2026-03-10 02:00", "pending"), None, "sqlite:///x")
    assert "has not started yet" in note


def test_who_paused_or_backfilled_is_the_account_of_the_process_not_what_the_environment_claims(monkeypatch):
    import os
    import pwd

    from chronoctl import cmd_backfill, cmd_control

    monkeypatch.setenv("USER", "mallory")
    monkeypatch.setenv("LOGNAME", "mallory")
    monkeypatch.setenv("SUDO_USER", "mallory")
    monkeypatch.setattr(os, "geteuid", lambda: 65534)
    monkeypatch.setattr(os, "getuid", lambda: 65534)
    nobody = pwd.getpwuid(65534).pw_name
    assert cmd_control._user() == nobody
    assert cmd_backfill._user() == nobody
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "getuid", lambda: 0)
    monkeypatch.setenv("SUDO_USER", "alice")  # root may say who it acts for, as sudo records it
    assert cmd_control._user() == cmd_backfill._user() == "alice"
