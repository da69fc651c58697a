"""A node stopped past its lease in the middle of the write that claims its runs (a
zombie) has the claims refused when it resumes. A `run_on: any` occurrence it claimed is
rescued by another node; a `run_on: each` one is this node's alone, and it dropped it as
if another node had won it: the occurrence stayed `pending` until the node restarted.
Fleet seed 209 of a day of 300 jobs on four nodes left two such occurrences pending for
two hours, until node4 crashed and its restart settled them. The refused claims made
while the lease lapsed are now decided again at the next wake-up, by the catch-up policy
with those that fell due during the stop."""

from __future__ import annotations

from chronod.core.model import RunState
from chronod.sim.fleet import FleetSimulation
from chronod.sim.fleet_checks import check_fleet
from chronod.sim.scenario import Config
from chronod.sim.world import Event
from tests.sim.fleet_jobs import EACH_TICK


def test_an_each_occurrence_whose_claim_was_refused_after_a_stop_past_the_lease_is_decided():
    cfg = Config(
        days=0.006, jobs=1, nodes=2, seed=1, faults=frozenset(), job_docs=(EACH_TICK,), mean_s=0.05, drain_s=0.0
    )
    sim = FleetSimulation(cfg)
    t0 = sim.t0
    sim.events = [Event(t0 + 101, "zombie", {"node": 0, "seconds": 60.0})]  # node1 stops at its claim at t0+110
    out = sim.run()
    try:
        assert [(g.node, round(g.start - t0)) for g in out.gaps] == [("node1", 110)]
        assert any(s.node == "node1" and s.call == "commit_wakeup" and not s.accepted for s in out.stale)
        mine = [r for r in out.store.runs("tick") if r.job_key == "tick@node1"]
        rows = {round((r.scheduled_at - out.start).total_seconds()): r for r in mine}
        assert not [s for s, r in rows.items() if r.state == RunState.PENDING and s < 400]
        stopped = [r for s, r in rows.items() if 110 <= s < 170]
        assert len(stopped) == 6 and {r.state for r in stopped} == {RunState.SKIPPED_OUTAGE}
        results = check_fleet(out, ["none_left_waiting", "each_runs_everywhere", "reasons_true"])
        assert not {name: bad[0] for name, bad in results.items() if bad}
    finally:
        out.close()
