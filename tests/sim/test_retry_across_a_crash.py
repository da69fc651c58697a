"""A run waiting for its retry is still going under `overlap: forbid`, however long a
crash keeps the retry from starting (seed 1 of a day of 1,000 jobs: `reason_truth` called
the occurrence skipped behind it untrue, because the check counted the wait only up to
the retry's backoff)."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
EVERY_30S = {
    "id": "flaky",
    "owner": "ops",
    "schedule": "*/30 * * * * *",
    "command": "false",
    "idempotency_class": "idempotent",
    "overlap": "forbid",
    "retry": {"attempts": 2, "backoff_s": 30, "max_backoff_s": 30},
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}


def test_a_retry_a_crash_delays_keeps_its_run_going(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (2.0, 1))
    cfg = Config(days=0.06, jobs=1, seed=1, faults=frozenset(), job_docs=(EVERY_30S,), mean_s=2.0, start=START)
    sim = Simulation(cfg)
    # 00:00:30 fails at 00:00:32 and waits until 00:01:02 for its retry; 00:01:00 falls due
    # meanwhile and is skipped behind it; chronod dies just after, for ten minutes
    sim.events = [Event(sim.t0 + 60.2, "crash", {"calls": 0, "downtime": 600.0})]
    out = sim.run()
    try:
        skipped = [r for r in out.store.runs("flaky") if r.state == "skipped_overlap"]
        assert any("waiting to start attempt 2" in (r.error or "") for r in skipped), [r.error for r in skipped]
        assert check(out, ["reason_truth"])["reason_truth"] == []
    finally:
        out.close()
