"""The checks ask `missed` and `report` about every occurrence the daemon ran, the first
ones included: an occurrence is taken by its scheduled time, and the first one after the
start may be scheduled up to its job's tolerance before it (the jitter offset). Asked
from a minute before the start, the checks missed those and called the answers wrong
(seed 7 of a quarter day of 1,000 jobs: a job with a jitter offset of 86 s). Here a job
due at 23:58 with an offset of 298 s first runs at 00:02:58."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from chronod.core import identity
from chronod.sim import driver
from chronod.sim.audit import missed_now, report_now
from chronod.sim.driver import NODE, Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from tests.sim.job_docs import EXACT

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
LATE = {
    **EXACT,
    "id": "late",
    "command": "false",
    "schedule": "58 23 * * *",
    "tolerance_s": 300,
    "tolerance_reason": "spread the load",
}


def test_the_first_occurrence_scheduled_before_the_start_is_asked_about(monkeypatch: pytest.MonkeyPatch):
    offset = identity.jitter_offset(identity.job_key("late", False, NODE), 300)
    assert offset > 70  # so the first occurrence run is scheduled more than a minute before the start
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1.0, 1))  # every run fails
    cfg = Config(days=0.05, jobs=1, seed=1, faults=frozenset(), job_docs=(LATE,), start=START)
    sim = Simulation(cfg)
    sim.events = []
    out = sim.run()
    try:
        first = min(out.world.procs.values(), key=lambda p: p.started_mono)
        assert first.scheduled_at < START - timedelta(seconds=60), first.scheduled_at
        assert first.run_id in missed_now(out)
        assert first.run_id in report_now(out)["late"]["lines"]
        assert not {name: bad[0].what for name, bad in check(out, ["audit_agrees"]).items() if bad}
    finally:
        out.close()
