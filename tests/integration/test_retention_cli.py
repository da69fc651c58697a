"""Retention through the installed `chronoctl`, on a real store: `db prune` deletes old runs
in batches and remembers it per job, so `did-it-run`, `missed` and `report` say "pruned
(history kept N days)" for those occurrences, never "missing"; `status --json` shows the
database's size and rows per state.

The history: a daily job at 03:00 UTC with 60 days of successes, the run of 45 days ago
failed, and two occurrences without a row at all, 50 and 5 days ago.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from chronod.core.model import JobSpec
from chronod.store.api import open_store
from tests.integration.daemon_helpers import registered_since
from tests.integration.test_ops_cli import _run, ctl, ctl_json

DAILY = JobSpec(
    id="ledger",
    owner="finance",
    schedule="0 3 * * *",
    command="true",
    idempotency_class="idempotent",
    max_silence_s=3 * 86400,
    history_days=30,
)
NO_ROW = (50, 5)


def _latest_run_day() -> datetime:
    """The newest 03:00 UTC at least 5 minutes old, taken once per test process: a module
    that builds its arguments at import and a fixture that builds the history later must
    agree on the day even when the suite runs across 03:05 UTC."""
    now = datetime.now(timezone.utc)
    today = now.replace(hour=3, minute=0, second=0, microsecond=0)
    return today - timedelta(days=1) if today > now - timedelta(minutes=5) else today


TODAY = _latest_run_day()


def _day(back: int) -> datetime:
    return TODAY - timedelta(days=back)


@pytest.fixture
def db(tmp_path):
    url = str(tmp_path / "chrono.db")
    store = open_store(url)
    try:
        store.upgrade()
        store.sync_jobs("web1", [DAILY])
        registered_since(store, _day(90))
        runs = [
            _run(DAILY, _day(back), "failed" if back == 45 else "succeeded") for back in range(60) if back not in NO_ROW
        ]
        store.insert_runs([replace(r, node="web1") for r in runs])
    finally:
        store.close()
    return url


def test_db_prune_dry_run_counts_and_deletes_nothing(db):
    code, doc = ctl_json("db", "prune", "--older-than", "30d", "--dry-run", "--db", db)
    assert code == 0, doc
    assert doc["dry_run"] is True and doc["jobs"] == {"ledger": 29} and doc["runs"] == 29  # days 30..59, less day 50
    _, runs = ctl_json("runs", "ledger", "--since", "90d", "--limit", "1000", "--db", db)
    assert len(runs) == 58


def test_db_prune_deletes_the_old_runs_and_the_audit_says_pruned_not_missing(db):
    code, doc = ctl_json("db", "prune", "--older-than", "30d", "--db", db)
    assert code == 0 and doc["runs"] == 29 and doc["dry_run"] is False
    _, runs = ctl_json("runs", "ledger", "--since", "90d", "--limit", "1000", "--db", db)
    assert len(runs) == 29  # days 0..29, less day 5
    _, status = ctl_json("status", "ledger", "--db", db)
    assert status["history_days"] == 30 and status["pruned_through"][:10] == _day(30).date().isoformat()
    assert "kept 30 days; pruned up to" in ctl("status", "ledger", "--db", db).stdout
    again = ctl("db", "prune", "--older-than", "30d", "--db", db)
    assert again.returncode == 0 and "deleted 0 run(s)" in again.stdout

    old = ctl("did-it-run", "ledger", "--at", _day(40).isoformat(), "--db", db)
    assert old.returncode == 1 and "pruned (history kept 30 days)" in old.stdout + old.stderr
    gone_failure = ctl("did-it-run", "ledger", "--at", _day(45).isoformat(), "--db", db)
    assert "pruned (history kept 30 days)" in gone_failure.stdout + gone_failure.stderr
    recent_gap = ctl("did-it-run", "ledger", "--at", _day(5).isoformat(), "--db", db)
    assert recent_gap.returncode == 1 and "no record" in recent_gap.stdout + recent_gap.stderr

    _, missed = ctl_json("missed", "--since", "60d", "--db", db)
    misses = [m for owner in missed["owners"] for m in owner["missed"]]
    assert [m["scheduled_at"][:10] for m in misses if m["job_id"] == "ledger"] == [_day(5).date().isoformat()]
    assert [(p["job_id"], p["kept_s"], p["reason"]) for p in missed["pruned"]] == [
        ("ledger", 30 * 86400, "pruned (history kept 30 days)")
    ]
    assert "pruned (history kept 30 days)" in ctl("missed", "--since", "60d", "--db", db).stdout

    frm, to = _day(59).date().isoformat(), _day(0).date().isoformat()
    report = ctl("report", "ledger", "--from", frm, "--to", to, "--format", "json", "--db", db)
    assert report.returncode in (0, 1), report.stderr
    import json

    lines = json.loads(report.stdout)["jobs"][0]["occurrences"]
    by_day = {line["scheduled_at"][:10]: line for line in lines}
    assert by_day[_day(40).date().isoformat()]["state"] == "pruned"
    assert by_day[_day(50).date().isoformat()]["state"] == "pruned"
    assert by_day[_day(5).date().isoformat()]["state"] == "missing"
    assert "pruned (history kept 30 days)" in by_day[_day(40).date().isoformat()]["explanation"]
    totals = json.loads(report.stdout)["jobs"][0]["totals"]
    assert totals["pruned"] == 30 and totals["missing"] == 1


def test_status_json_shows_the_database_size_and_rows_per_state(db):
    _, doc = ctl_json("status", "--db", db)  # exit 3: no daemon is up, the rest still answers
    assert doc["database"]["bytes"] > 0
    assert doc["database"]["runs_by_state"] == {"failed": 1, "succeeded": 57}


def test_db_prune_refuses_a_bad_duration():
    bad = ctl("db", "prune", "--older-than", "soon")
    assert bad.returncode == 2 and bad.stderr.startswith("chronoctl: error: --older-than")


def test_chronod_prunes_by_itself_while_it_keeps_firing(db, tmp_path):
    """The pruner inside the real daemon: the history older than history_days goes, the
    watermark says so, and an every-second job fires on time meanwhile."""
    from tests.integration.daemon_helpers import Chronod, job, jobs_file, runs_json, wait_until, write_jobs

    registry = tmp_path / "jobs"
    registry.mkdir()
    write_jobs(
        registry / "jobs.yaml",
        jobs_file(
            job("ledger", "0 3 * * *", "true", max_silence_s=3 * 86400, history_days=30),
            job("tick", "@every 1s", "true"),
        ),
    )
    daemon = Chronod(registry, db, tmp_path / "chronod.log").start()
    try:
        wait_until(
            lambda: ctl_json("status", "ledger", "--db", db)[1].get("pruned_through"),
            timeout=30,
            interval=0.5,
            what="chronod's pruner to raise the watermark",
        )
        assert "event=retention.pruned" in daemon.log_since_start()
    finally:
        daemon.stop()
    _, runs = ctl_json("runs", "ledger", "--since", "90d", "--limit", "1000", "--db", db)
    past = [r for r in runs if r["state"] != "pending"]  # chronod has also planned tomorrow's
    assert len(past) == 29  # days 0..29, less day 5
    _, status = ctl_json("status", "ledger", "--db", db)
    assert status["pruned_through"][:10] == _day(30).date().isoformat()
    ticks = [r for r in runs_json("tick", db) if r["state"] == "succeeded"]
    assert len(ticks) >= 4
