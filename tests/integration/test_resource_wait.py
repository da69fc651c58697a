"""A run that waits for a slot of its resource says so while it waits: its row names the
resource and since when, and `did-it-run` and `status` answer "waiting for a slot of
resource R", not "late" (`missed`, which lists a wait only past its grace, by
tests/unit/test_history.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from chronod.store import audit
from chronod.store.api import open_store
from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, wait_until, write_jobs


@pytest.fixture
def env(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    return {"reg": reg, "db": str(tmp_path / "chrono.db"), "log": tmp_path / "chronod.log", "w": tmp_path / "witness"}


def test_a_run_waiting_for_a_resource_slot_is_said_to_wait_for_it_by_did_it_run_missed_and_status(env):
    w = env["w"]
    write_jobs(
        env["reg"] / "a.yaml",
        "resources:\n  db:\n    max_concurrency: 1\n"
        + jobs_file(
            # run by hand only; it holds the only slot long enough for a loaded host's chronoctl
            job("hog", "0 0 1 1 *", f"echo hog-start >> {w}; sleep 40; echo hog-end >> {w}", resource="db"),
            job("report", "@every 3s", f"echo report >> {w}", resource="db", catchup_window_s=120),
        ),
    )
    d = Chronod(env["reg"], env["db"], env["log"]).start()
    witness = lambda: w.read_text() if w.exists() else ""  # noqa: E731
    store = open_store(env["db"])
    try:
        chronoctl("trigger", "hog", db=env["db"], check=True)
        wait_until(lambda: "hog-start" in witness(), what="hog to run")

        def waiting() -> list:
            due = datetime.now(timezone.utc) - timedelta(seconds=0.5)
            rows = [r for r in store.runs("report", states=["pending"]) if r.fire_at < due and r.error]
            return rows if "hog-end" not in witness() else []

        (row, *_) = wait_until(waiting, what="a report run that fell due while the hog holds the slot")
        assert row.error.startswith("waiting for a slot of resource db (max_concurrency 1"), row.error
        assert " since " in row.error and row.next_attempt_at == row.fire_at + timedelta(seconds=120)

        # the audit, in process (what every command asks through)
        answer = audit.did_it_run(store, store.get_job("report"), datetime.now(timezone.utc), at=row.scheduled_at)
        assert (answer.yes, answer.state) == (False, "waiting"), answer
        assert "waiting for a slot of resource db" in answer.reason and "since" in answer.reason, answer.reason
        assert "late by" not in answer.reason

        # and as an operator asks, while the hog still holds the slot
        said = chronoctl("did-it-run", "report", "--at", row.scheduled_at.isoformat(), "--json", db=env["db"])
        got = json.loads(said.stdout)
        status = chronoctl("status", "report", db=env["db"])
        still_held = "hog-end" not in witness()
    finally:
        store.close()
        d.stop()
    assert still_held, "the hog ended before the commands answered: nothing was waiting any more"
    assert got["state"] == "waiting" and got["held"]["kind"] == "resource" and got["held"]["name"] == "db", got
    assert got["held"]["since"] and "waiting for a slot of resource db" in got["reason"], got
    assert "waiting" in status.stdout and "resource db" in status.stdout, status.stdout
