"""Replay what Debian's real anacron did on a fake clock (tests/fixtures/anacron, recorded by
tests/realcron/run_anacron_cases.py) against chrono's model of it, and show that the imported
job catches up a missed day once, as anacron does."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from chronoctl.anacrontab import anacron_job, due, parse_anacrontab
from chronod.core.policy import Due, catchup
from chronod.core.schedule import compile_schedule
from chronod.core.validate import validate_document
from chronod.specfile import parse_text

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "anacron" / "cases.json"
DOC = json.loads(FIXTURE.read_text())
PERIODS = {job: (int(p) if p.isdigit() else p.lstrip("@")) for job, p in DOC["anacrontab"]}


def _day(text: str) -> date:
    return datetime.strptime(text[:8], "%Y%m%d").date()


@pytest.mark.parametrize("case", DOC["cases"], ids=[c["id"] for c in DOC["cases"]])
def test_due_says_what_anacron_started(case):
    today = datetime.strptime(case["now"], "%Y-%m-%d %H:%M:%S").date()
    for job, period in PERIODS.items():
        last = _day(case["stamps"][job]) if job in case["stamps"] else None
        assert due(period, last, today) == bool(case["started"][job]), (job, last, today)
        assert case["started"][job] in (0, 1)  # never more than once, however many periods were missed


def test_the_fixture_holds_a_job_that_missed_five_days_and_ran_once():
    case = next(c for c in DOC["cases"] if c["id"] == "off-five-days")
    assert case["started"]["daily"] == 1
    assert case["stamps_after"]["daily"] == "20270310"


def test_the_imported_daily_job_catches_a_missed_week_up_once_when_chronod_starts():
    tab = parse_anacrontab("SHELL=/bin/sh\n1\t5\tcron.daily\trun-parts --report /etc/cron.daily\n", "/etc/anacrontab")
    job, differs, _ = anacron_job(tab.entries[0], "anacron-cron-daily", "Europe/Berlin", date(2027, 3, 4))
    assert (job["schedule"], job["catchup"], differs) == ("35 7 * * *", "latest", [])
    doc = parse_text(yaml.safe_dump({"jobs": [job]}), "anacron.yaml")
    spec = validate_document(doc, now=datetime(2027, 3, 1, tzinfo=UTC)).jobs[0]
    down, up = datetime(2027, 3, 4, 12, tzinfo=UTC), datetime(2027, 3, 10, 9, tzinfo=UTC)
    missed = compile_schedule(job["schedule"], job["timezone"]).fires(down, up)
    decision = catchup(spec, [Due(t, t + timedelta(seconds=0)) for t in missed], up)
    assert len(missed) == 6 and len(decision.run) == 1  # six days off, one run, as anacron
