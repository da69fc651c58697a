"""A job removed from the registry while a run of it waits for its retry, or while its
attempt runs and then fails: no retry will ever start, and the run is recorded with its
last attempt's outcome and which retry did not start (`policy.retry_given_up`), never
`cancelled` as if it had not run, nor left in `retry_wait` for good. Seeds 103 and 104 of
two days of 300 jobs found both."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from chronod.core.model import JobSpec
from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event
from chronod.store.api import Run

START = datetime.fromisoformat("2025-06-01T23:59:30+00:00")
BASE = {"owner": "ops", "idempotency_class": "idempotent", "tolerance_s": 0, "tolerance_reason": "exact times"}
FAILING = {
    **BASE,
    "id": "failing",
    "schedule": "0 * * * *",
    "command": "false",
    "retry": {"attempts": 3, "backoff_s": 600, "max_backoff_s": 600},
}
KEPT = {**BASE, "id": "kept", "schedule": "30 * * * *", "command": "true"}


def removed_at(monkeypatch: pytest.MonkeyPatch, seconds: float, attempt_s: float):
    """The record of `failing`'s 00:00 once the job is removed `seconds` after the start."""
    monkeypatch.setattr(
        driver, "duration", lambda plan: lambda rng: (attempt_s, 1) if plan.id == "failing" else (1.0, 0)
    )
    cfg = Config(days=0.07, jobs=2, seed=1, faults=frozenset(), job_docs=(FAILING, KEPT), start=START)
    sim = Simulation(cfg)

    def remove_failing() -> str:
        name = min(sim.registry.files)
        sim.registry.files[name] = [p for p in sim.registry.files[name] if p.id != "failing"]
        sim.registry.write(name)
        return "removed failing"

    monkeypatch.setattr(sim.registry, "edit", remove_failing)
    sim.events = [Event(sim.t0 + seconds, "registry")]
    out = sim.run()
    try:
        rows = out.store.runs("failing", newest_first=False)
        attempts = [p for p in out.world.procs.values() if p.job_id == "failing"]
        names = ["one_terminal_state", "reason_truth", "audit_truth"]
        return rows, attempts, {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()


def test_a_run_waiting_for_its_retry_when_its_job_is_removed_keeps_its_failed_attempt(
    monkeypatch: pytest.MonkeyPatch,
):
    # 00:00 fails at once; its retry is due about 00:10; the job goes at 00:02
    rows, attempts, broken = removed_at(monkeypatch, 150.0, 1.0)
    assert len(attempts) == 1, attempts
    assert [(r.state, r.error) for r in rows] == [
        ("failed", "retry 2 not started: job removed from the registry"),
        ("cancelled", "job removed from the registry"),  # 01:00, stored when 00:00 fell due
    ]
    assert rows[0].finished_at is not None and rows[0].next_attempt_at is None
    assert not broken


def test_an_attempt_running_when_its_job_is_removed_fails_without_a_retry_left_waiting(
    monkeypatch: pytest.MonkeyPatch,
):
    # 00:00's attempt runs until 00:05; the job goes at 00:02, while it runs
    rows, attempts, broken = removed_at(monkeypatch, 150.0, 300.0)
    assert len(attempts) == 1, attempts
    assert [(r.state, r.error) for r in rows] == [
        ("failed", "retry 2 not started: job removed from the registry"),
        ("cancelled", "job removed from the registry"),
    ]
    assert not broken


def test_a_run_left_running_by_a_lost_machine_whose_job_was_removed_meanwhile_is_settled():
    """chronod starts and finds a run of a job removed from the registry left `running`, with
    no supervisor and no result (the machine rebooted): its outcome is unknown, and an idempotent
    job's new attempt may not start for a job that is gone, so it is `lost`, never left
    running (an unsafe job's run is `lost` in any case)."""
    cfg = Config(days=0.01, jobs=1, seed=1, faults=frozenset(), job_docs=(KEPT,), start=START)
    sim = Simulation(cfg)
    sim.events = []
    gone = JobSpec(id="gone", owner="ops", schedule="0 * * * *", command="true", idempotency_class="idempotent")
    at = START - timedelta(minutes=30)
    sim.store.sync_jobs(driver.NODE, [gone])
    token = sim.store.acquire_node(driver.NODE, pid=1, hostname="old", boot_id="before-the-reboot", ttl_s=60)
    sim.store.insert_runs(
        [Run(run_id="r1", job_id="gone", job_key="gone", scheduled_at=at, fire_at=at, state="pending")]
    )
    assert sim.store.dispatch("r1", driver.NODE, token, None) is not None
    sim.store.release_node(driver.NODE, token)
    out = sim.run()
    try:
        row = out.store.get_run("r1")
        assert (row.state, row.finished_at is not None) == ("lost", True), (row.state, row.error)
        assert "job removed from the registry" in row.error, row.error
    finally:
        out.close()
