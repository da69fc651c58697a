"""`chronoctl report` on a month of a daily job written through the store: every occurrence
exactly once, with the right state and explanation, including the one with no row."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from chronod.core.occurrence import run_id
from chronod.specfile import load_registry
from chronod.store.api import Run
from chronod.store.sql import SqlStore
from tests.integration.daemon_helpers import chronoctl, write_jobs

MARCH = datetime(2026, 3, 1, 3, 0, tzinfo=timezone.utc)
FAILED_DAYS = {5, 17}
PAUSED_DAY = 9
OUTAGE_DAYS = {21, 22}
NO_ROW_DAY = 26
EXPECTED_STATE = {
    **{d: "failed" for d in FAILED_DAYS},
    PAUSED_DAY: "skipped_paused",
    **{d: "skipped_outage" for d in OUTAGE_DAYS},
    NO_ROW_DAY: "missing",
}

SPEC = """jobs:
  - id: gdpr-purge
    owner: privacy-team
    schedule: "0 3 * * *"
    command: /usr/local/bin/purge
    idempotency_class: keyed
    tolerance_s: 0
    tolerance_reason: the report pins exact times
    max_silence_s: 180000
    tags: [compliance]
    notify:
      - on: [failed, silence]
        webhook: https://alerts.example.com/hook
"""


def _run(day: int, state: str) -> Run:
    at = MARCH + timedelta(days=day - 1)
    r = Run(
        run_id=run_id("gdpr-purge", at),
        job_id="gdpr-purge",
        job_key="gdpr-purge",
        scheduled_at=at,
        fire_at=at,
        state=state,
        attempts=0,
        finished_at=at,
        node="db1",
    )
    if state in ("succeeded", "failed"):
        r.attempts = 3 if state == "failed" else 1
        r.started_at = at + timedelta(seconds=1)
        r.finished_at = at + timedelta(seconds=43)
        r.exit_code = 0 if state == "succeeded" else 2
        r.error = None if state == "succeeded" else "exit code 2"
    if state == "skipped_paused":
        r.error = "paused: legal hold"
    return r


@pytest.fixture
def month(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "purge.yaml", SPEC)
    db = str(tmp_path / "chrono.db")
    store = SqlStore(db, now=lambda: MARCH - timedelta(days=1))  # registered the day before the period
    store.upgrade()
    loaded = load_registry([reg], now=MARCH, secure=False)
    assert not [p for p in loaded.problems if p.severity == "error"], loaded.problems
    store.sync_jobs("db1", loaded.jobs.values())
    runs = [_run(day, EXPECTED_STATE.get(day, "succeeded")) for day in range(1, 32) if day != NO_ROW_DAY]
    manual = Run(
        run_id="m" * 16,
        job_id="gdpr-purge",
        job_key="gdpr-purge",
        scheduled_at=MARCH + timedelta(days=25, hours=9),
        fire_at=MARCH + timedelta(days=25, hours=9),
        state="succeeded",
        attempts=1,
        trigger="manual",
    )
    store.insert_runs(runs + [manual])
    store.close()
    return {"db": db, "reg": reg}


def test_the_json_report_lists_every_occurrence_of_the_month_once_with_its_state(month):
    res = chronoctl(
        "report",
        "gdpr-purge",
        "--from",
        "2026-03-01",
        "--to",
        "2026-03-31",
        "--format",
        "json",
        db=month["db"],
        check=True,
    )
    job = json.loads(res.stdout)["jobs"][0]
    occ = job["occurrences"]
    assert len(occ) == job["expected"] == 31
    assert [o["scheduled_at"] for o in occ] == [(MARCH + timedelta(days=i)).isoformat() for i in range(31)]
    assert len({o["run_id"] for o in occ}) == 31
    for day, o in enumerate(occ, 1):
        assert o["state"] == EXPECTED_STATE.get(day, "succeeded"), (day, o)
    assert job["totals"] == {"succeeded": 25, "failed": 2, "skipped_outage": 2, "skipped_paused": 1, "missing": 1}
    by_day = dict(enumerate(occ, 1))
    assert by_day[5]["category"] == "failure" and "exit code 2" in by_day[5]["explanation"]
    assert (by_day[5]["attempts"], by_day[5]["exit_code"], by_day[5]["duration_s"]) == (3, 2, 42.0)
    assert by_day[PAUSED_DAY]["category"] == "paused" and "legal hold" in by_day[PAUSED_DAY]["explanation"]
    assert by_day[21]["category"] == "outage" and "catch-up" in by_day[21]["explanation"]
    assert by_day[NO_ROW_DAY]["category"] == "missing" and "no record" in by_day[NO_ROW_DAY]["explanation"]
    assert by_day[NO_ROW_DAY]["run_id"] == run_id("gdpr-purge", MARCH + timedelta(days=NO_ROW_DAY - 1))
    assert by_day[1]["explanation"] == "" and by_day[1]["started_at"] == "2026-03-01T03:00:01+00:00"
    assert [m["run_id"] for m in job["manual_runs"]] == ["m" * 16]
    assert job["compliance_gaps"] == [] and job["notify_events"] == ["failed", "silence"]


def test_the_markdown_report_has_the_header_the_totals_and_every_occurrence(month):
    res = chronoctl(
        "report", "--tag", "compliance", "--from", "2026-03-01", "--to", "2026-03-31", db=month["db"], check=True
    )
    md = res.stdout
    assert md.startswith("# Audit report: gdpr-purge\n")
    for needle in (
        "| Owner | privacy-team |",
        "at 03:00 every day",
        "| Expected occurrences | 31 |",
        "| succeeded | 25 |",
        "| failed | 2 |",
        "| skipped_outage | 2 |",
        "| skipped_paused | 1 |",
        "| missing | 1 |",
        "| **total** | **31** |",
        "MISSING: no record",
    ):
        assert needle in md, needle
    rows = [line for line in md.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert len(rows) == 31


def test_a_period_can_come_from_the_registry_and_an_unknown_job_is_a_usage_error(month):
    res = chronoctl(
        "report",
        "gdpr-purge",
        "--from",
        "2026-03-10",
        "--to",
        "2026-03-12T00:00:00Z",
        "--format",
        "json",
        "--registry",
        str(month["reg"]),
        db=month["db"],
        check=True,
    )
    assert [o["scheduled_at"][:10] for o in json.loads(res.stdout)["jobs"][0]["occurrences"]] == [
        "2026-03-10",
        "2026-03-11",
    ]
    bad = chronoctl("report", "nope", "--from", "2026-03-01", "--to", "2026-03-02", db=month["db"])
    assert bad.returncode == 2 and "nope" in bad.stderr
    both = chronoctl("report", "gdpr-purge", "--tag", "x", "--from", "2026-03-01", "--to", "2026-03-02", db=month["db"])
    assert both.returncode == 2


def test_the_markdown_report_counts_what_is_not_due_yet_in_one_line_as_the_terminal_does(month):
    """chronoctl(1): the table and the Markdown count the occurrences not due yet in one
    line. The Markdown left them out without a word, so its total disagreed with the JSON."""
    today = datetime.now(timezone.utc).date()
    period = ("--from", today.isoformat(), "--to", (today + timedelta(days=3)).isoformat())
    args = ("report", "gdpr-purge", *period, "--registry", str(month["reg"]))
    data = json.loads(chronoctl(*args, "--format", "json", db=month["db"], check=True).stdout)["jobs"][0]
    later = sum(1 for o in data["occurrences"] if o["state"] == "not_due")
    assert later >= 3, data["totals"]
    md = chronoctl(*args, db=month["db"], check=True).stdout
    assert f"\n{later} occurrences not due yet, not listed (--not-due lists them).\n" in md, md
    listed = chronoctl(*args, "--not-due", db=month["db"], check=True).stdout
    assert "not listed" not in listed and listed.count("not due") >= later, listed
