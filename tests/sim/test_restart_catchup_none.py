"""`catchup: none` after a restart: an occurrence that fell due while chronod was down is
recorded `skipped_outage` however shortly before the start it fell due (DESIGN: "none
records all as skipped_outage"). chronod stopped at 00:02:50 and started again at
00:03:18 ran the 00:03 of a job that must start on the second 18 s late, and recorded it
`succeeded`: the 30 s that forgive a slow burst of a running chronod forgave the
restart too."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
BASE = {
    "owner": "ops",
    "command": "true",
    "idempotency_class": "unsafe",
    "schedule": "* * * * *",
    "tolerance_s": 0,
    "tolerance_reason": "must start on the second",
}


@pytest.mark.parametrize(("catchup", "state"), [("none", "skipped_outage"), ("latest", "succeeded")])
def test_an_occurrence_due_just_before_a_restart_meets_its_catchup_policy(
    monkeypatch: pytest.MonkeyPatch, catchup: str, state: str
):
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1.0, 0))
    doc = {**BASE, "id": "snap", "catchup": catchup}
    cfg = Config(days=0.03, jobs=1, seed=1, faults=frozenset(), job_docs=(doc,), start=START)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 170.0, "crash", {"calls": 0, "downtime": 28.0})]
    out = sim.run()
    try:
        assert [life.how for life in out.world.lives][:1] == ["crash"]
        rows = {r.scheduled_at.strftime("%H:%M"): r for r in out.store.runs("snap")}
        assert (rows["00:02"].state, rows["00:04"].state) == ("succeeded", "succeeded")
        assert rows["00:03"].state == state, (rows["00:03"].state, rows["00:03"].error)
        if state == "skipped_outage":
            assert rows["00:03"].error == "fell due while chronod could not run it; catchup: none"
        names = ["one_terminal_state", "reason_truth", "audit_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()
