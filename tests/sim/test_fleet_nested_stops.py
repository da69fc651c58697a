"""A node stopped in the middle of a write (a zombie) is stopped until the simulation
resumes it, and the fleet checks must know how long that was. The simulation runs the
rest of the fleet inside the stopped node's call; when a second node is stopped that way
meanwhile, the first resumes only after the second does, past the end its own stop drew.
Fleet seed 209 of a day of 300 jobs on four nodes found it: node3's stop was recorded as
ending at 04:30:05, node4's (begun inside it) ended at 04:31:00, and the `each`
occurrences that fell due on node3 in between (rightly recorded `skipped_outage` when
node3 resumed) were reported as "did not start on node3" while node3 was up."""

from __future__ import annotations

from chronod.sim.fleet import FleetSimulation
from chronod.sim.fleet_checks import check_fleet
from chronod.sim.scenario import Config
from chronod.sim.world import Event
from tests.sim.fleet_jobs import EACH_TICK


def test_a_node_stopped_mid_call_while_another_is_stays_stopped_until_the_other_resumes():
    cfg = Config(
        days=0.006, jobs=1, nodes=2, seed=1, faults=frozenset(), job_docs=(EACH_TICK,), mean_s=0.05, drain_s=0.0
    )
    sim = FleetSimulation(cfg)
    t0 = sim.t0
    sim.events = [
        Event(t0 + 101, "zombie", {"node": 0, "seconds": 60.0}),  # node1 stops at its claim at t0+110, until t0+170
        Event(t0 + 115, "zombie", {"node": 1, "seconds": 90.0}),  # node2 stops at t0+120, until t0+210
    ]
    out = sim.run()
    try:
        stops = {g.node: (g.start - t0, g.end - t0) for g in out.gaps if g.kind == "zombie"}
        late = [p for p in out.launches if p.node == "node1" and 170 < p.started_mono - t0 < 210]
        assert not late, "node1 started runs while node2's stop held it"  # the simulation's nesting, as before
        assert stops["node1"][1] >= stops["node2"][1] > 200, stops
        results = check_fleet(out, ["each_runs_everywhere", "reasons_true"])
        assert not {name: bad[0] for name, bad in results.items() if bad}
    finally:
        out.close()
