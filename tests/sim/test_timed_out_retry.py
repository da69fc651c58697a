"""An attempt that timed out and is to be retried keeps `timed_out` in its attempt's row,
so a retry that never starts (no slot of its resource inside its window, or a pause)
leaves the run its last attempt's outcome, `timed_out` (docs/reference.md, Resources).
Seed 111 of two days of 300 jobs: the attempt was stored `failed` whatever its outcome,
and the run given up on its retry was recorded `failed`."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config

START = datetime.fromisoformat("2025-06-01T23:57:00+00:00")
BASE = {
    "owner": "ops",
    "command": "true",
    "idempotency_class": "idempotent",
    "resource": "db",  # one slot
    "catchup": "latest",
    "catchup_window_s": 600,
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
HOG = {**BASE, "id": "hog", "schedule": "0 0 * * *"}  # holds the slot 00:00-00:30
SLOW = {
    **BASE,
    "id": "slow",
    "schedule": "58 23 * * *",  # times out at 23:58:30; its retry falls due after 00:02, behind the hog
    "timeout_s": 30,
    "retry": {"attempts": 2, "backoff_s": 300, "max_backoff_s": 300},
}


def test_a_timed_out_attempt_whose_retry_got_no_slot_leaves_its_run_timed_out(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1800.0 if plan.id == "hog" else 60.0, 0))
    out = Simulation(Config(days=0.07, jobs=2, seed=1, faults=frozenset(), job_docs=(HOG, SLOW), start=START)).run()
    try:
        run = min(out.store.runs("slow"), key=lambda r: r.scheduled_at)
        assert [a.state for a in out.store.attempts(run.run_id)] == ["timed_out"]
        assert run.state == "timed_out" and "retry 2 of 2 not started" in (run.error or ""), (run.state, run.error)
        assert not {name: bad[0].what for name, bad in check(out, ["one_terminal_state"]).items() if bad}
    finally:
        out.close()
