"""Replay what Debian's real cron did across clock changes (tests/fixtures/cron_dst, recorded on
a fake clock by tests/realcron/run_dst_cases.py) against the cron simulation and chrono's engine.

A fixed-time line whose matches fall in a spring-forward gap starts once for each of them
right after the jump; chrono's default (`dst_gap: shift`) fires each, one second apart, so
each occurrence keeps its own scheduled time and run id.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from chronod.core.occurrence import run_id
from chronod.core.schedule import compile_schedule
from chronod.core.vixie import minutes_of, simulate

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cron_dst" / "cases.json"
DOC = json.loads(FIXTURE.read_text())
LINES = [(case, line) for case in DOC["cases"] for line in case["runs"]]


def _span(case: dict) -> tuple[datetime, datetime]:
    zone = ZoneInfo(case["tz"])
    start = datetime.strptime(case["start"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=zone).astimezone(UTC)
    return start, start + timedelta(minutes=case["minutes"] - 1)


def _local(instants: list[datetime], tz: str) -> list[str]:
    return [t.astimezone(ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z") for t in instants]


@pytest.mark.parametrize(("case", "line"), LINES, ids=[f"{c['id']}:{line}" for c, line in LINES])
def test_the_simulation_and_the_engine_start_each_line_when_debian_cron_did(case, line):
    start, end = _span(case)
    assert _local(simulate(line, case["tz"], start, end), case["tz"]) == case["runs"][line]
    fires = compile_schedule(line, case["tz"]).fires(start, end)
    assert _local(minutes_of(fires), case["tz"]) == case["runs"][line]


def test_the_fixture_shows_a_gap_with_several_fixed_minutes_running_each():
    spring = next(c for c in DOC["cases"] if c["id"] == "new-york-spring")
    assert spring["runs"]["0,30 2 * * *"] == ["2027-03-14 03:00 EDT"] * 2
    assert spring["runs"]["0-59/20 2 * * *"] == ["2027-03-14 03:00 EDT"] * 3


def test_each_skipped_match_keeps_its_own_occurrence_and_run_id():
    fires = compile_schedule("0,30 2 * * *", "America/New_York").fires(
        datetime(2027, 3, 14, 5, tzinfo=UTC), datetime(2027, 3, 14, 8, tzinfo=UTC)
    )
    assert fires == [datetime(2027, 3, 14, 7, 0, 0, tzinfo=UTC), datetime(2027, 3, 14, 7, 0, 1, tzinfo=UTC)]
    assert len({run_id("j", t) for t in fires}) == 2
