"""Messages that say what happened, once: pause, resume, unregister, did-it-run, through
the real binaries on a database written through the store (no daemon)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from chronod.core.identity import run_id
from chronod.specfile import load_registry
from chronod.store.api import Run, open_store
from tests.integration.daemon_helpers import chronoctl, job, jobs_file, write_jobs


def _setup(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "a.yaml", jobs_file(job("nightly", "0 2 * * *", "true")))
    write_jobs(reg / "b.yaml", jobs_file(job("solo", "0 3 * * *", "true")))
    db = str(tmp_path / "c.db")
    now = datetime.now(timezone.utc)
    store = open_store(db)
    store.upgrade()
    store.sync_jobs("vm", load_registry([reg], now=now - timedelta(days=3), secure=False).jobs.values())
    at = now.replace(hour=2, minute=0, second=0, microsecond=0)
    at = at if at <= now else at - timedelta(days=1)
    store.insert_runs(
        [
            Run(
                run_id=run_id("nightly", at),
                job_id="nightly",
                job_key="nightly",
                scheduled_at=at,
                fire_at=at,
                state="failed",
                attempts=2,
                node="vm",
                exit_code=1,
                error="exit code 1",
                started_at=at,
                finished_at=at + timedelta(seconds=3),
            )
        ]
    )
    store.close()
    return reg, db


def test_messages_say_what_happened_once(tmp_path):
    reg, db = _setup(tmp_path)
    res = chronoctl("did-it-run", "nightly", db=db)
    assert res.returncode == 1
    assert (
        "failed with exit code 1 after 2 attempts on vm" in res.stdout and "exit code 1: exit code 1" not in res.stdout
    )
    assert res.stdout.count("exit code 1") == 1, res.stdout

    for when in ("02:00", "-1m", "now"):  # the latest 02:00 in the job's zone (UTC), and now
        res = chronoctl("did-it-run", "nightly", "--at", when, db=db)
        assert res.returncode == 1 and "failed with exit code 1" in res.stdout, (when, res.stdout, res.stderr)
    res = chronoctl("did-it-run", "nightly", "--at", "25:00", db=db)
    assert res.returncode == 2 and "not a time of day" in res.stderr

    res = chronoctl("did-it-run", "nightlly", db=db)
    assert res.returncode == 2 and "did you mean 'nightly'?" in res.stderr
    res = chronoctl("show", "nightlyy", "--registry", str(reg), db=db)
    assert res.returncode == 2 and "did you mean 'nightly'?" in res.stderr

    res = chronoctl("resume", "nightly", db=db)
    assert res.returncode == 0 and "is not paused; nothing changed" in res.stdout and "resumed" not in res.stdout
    assert chronoctl("pause", "nightly", "--reason", "disk full", db=db).returncode == 0
    res = chronoctl("pause", "nightly", "--reason", "again", db=db)
    assert res.returncode == 1 and "already paused" in res.stderr and "disk full" in res.stderr
    status = json.loads(chronoctl("status", "nightly", "--json", db=db).stdout)
    held = [status["held"]] + [n["held"] for n in status["next"]]  # the pause, and each next fire it holds
    assert status["paused_reason"] == "disk full" and all(h["reason"] == "disk full" for h in held)
    assert chronoctl("status", "nightly", db=db).stdout.count("disk full") == 1 + len(status["next"])
    res = chronoctl("resume", "nightly", db=db)
    assert res.returncode == 0 and "resumed nightly" in res.stdout

    res = chronoctl("unregister", "solo", "--registry", str(reg), "--wait", "0", db=db)
    assert res.returncode == 0, res.stderr
    assert "jobs moved" not in res.stdout and "it held no other job" in res.stdout
