"""Under `overlap: forbid` a run waiting for its next attempt is still going (its retry
always starts), for an occurrence that waited for a slot of its resource as for one that
falls due. Seed 100 of two days of 300 jobs found two occurrences of a job in its
resource's line: the first took the slot and failed, and the second took the slot next
while the first waited for its retry; the retries then ran beside the line, and one, itself
waiting for a slot, was recorded skipped_overlap with its failed attempt forgotten."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config

START = datetime.fromisoformat("2025-06-01T23:57:30+00:00")
BASE = {
    "owner": "ops",
    "idempotency_class": "idempotent",
    "resource": "db",  # one slot
    "catchup": "all",
    "catchup_window_s": 3600,
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
HOG = {**BASE, "id": "hog", "schedule": "58 23 * * *", "command": "true"}  # holds the slot 23:58-00:01:30
FAILING = {
    **BASE,
    "id": "failing",
    "schedule": "* 0 * * *",  # 00:00 and 00:01 wait in the line behind the hog
    "command": "false",
    "overlap": "forbid",
    "retry": {"attempts": 3, "backoff_s": 20, "max_backoff_s": 20},
}


def test_a_run_in_its_resources_line_waits_while_the_one_before_it_waits_for_its_retry(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (210.0, 0) if plan.id == "hog" else (1.0, 1))
    cfg = Config(days=0.01, jobs=2, seed=1, faults=frozenset(), job_docs=(HOG, FAILING), start=START)
    sim = Simulation(cfg)
    sim.events = []  # no pause nor manual run: the resource alone holds the line
    out = sim.run()
    try:
        procs = sorted((p for p in out.world.procs.values() if p.job_id == "failing"), key=lambda p: p.started_mono)
        order = [(p.run_id, p.attempt) for p in procs]
        late = [p for p in procs if p.attempt == 1 and (p.started_wall - p.scheduled_at).total_seconds() > 60]
        assert late, order  # an occurrence did wait in the resource's line behind the hog
        for (a, n), (b, m) in zip(order, order[1:]):
            if n < 3:
                assert (b, m) == (a, n + 1), f"{b} attempt {m} started while {a} waited for attempt {n + 1}"
        rows = [r for r in out.store.runs("failing") if r.started_at is not None]
        assert {r.state for r in rows} <= {"failed", "running", "retry_wait"}, sorted((r.state, r.error) for r in rows)
        names = ["one_terminal_state", "reason_truth", "resource_limit_held"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()
