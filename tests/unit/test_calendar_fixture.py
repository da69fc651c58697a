"""Replay systemd's own answers (tests/fixtures/systemd_calendar, written by
tests/realsystemd/run_calendar_cases.py with systemd-analyze 252) against chrono's calendar
engine, without systemd: every OnCalendar= expression of the fixture, in three zones, from
several base times, elapse by elapse; and the expressions systemd refuses, refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chronod.core.calendar import CalendarError, parse_calendar
from chronod.core.schedule import ScheduleError, compile_schedule
from tests.realsystemd.calendar_cases import CHRONO_REFUSES, DEBIAN_TIMERS
from tests.realsystemd.run_calendar_cases import compare

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "systemd_calendar" / "cases.json"
DOC = json.loads(FIXTURE.read_text())


def test_the_fixture_holds_at_least_300_expressions_and_every_debian_timer():
    expressions = {c["e"] for c in DOC["cases"]}
    assert len(expressions) >= 300
    assert {e for _, e in DEBIAN_TIMERS} <= expressions
    assert {c["z"] for c in DOC["cases"]} == {"UTC", "America/New_York", "Australia/Lord_Howe"}


def test_every_elapse_matches_systemd():
    assert compare(DOC) == []


@pytest.mark.parametrize("expr", sorted(e for e, refused in DOC["refused"].items() if refused))
def test_what_systemd_refuses_chrono_refuses(expr):
    with pytest.raises(CalendarError):
        parse_calendar(expr, "America/New_York")


@pytest.mark.parametrize("expr", CHRONO_REFUSES)
def test_fractional_seconds_are_refused_with_the_reason(expr):
    assert not DOC["refused"][expr]  # systemd takes them
    with pytest.raises(ScheduleError, match="whole seconds"):
        compile_schedule(f"@calendar {expr}", "UTC")
