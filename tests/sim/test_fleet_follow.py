"""A node of a fleet follows only the occurrences of the jobs it owns: the other nodes'
are not tracked one by one (each cost every node some work per owed occurrence, so past
its ceiling a fleet started less the more it owed); a dead or late owner's occurrences
are found by one query of what is late (chronod.core.rescue)."""

from __future__ import annotations

import dataclasses

from chronod.core.model import RunState, Trigger
from chronod.sim.fleet import FleetSimulation
from chronod.sim.fleet_checks import check_fleet
from chronod.sim.scenario import Config
from tests.sim.fleet_jobs import every_ten_seconds

JOBS = 30


def tracked_not_owned(max_starts: float | None) -> dict[str, list[str]]:
    """After a few simulated minutes: each node's tracked scheduled occurrences of jobs
    another node owns."""
    docs = tuple(every_ten_seconds(i) for i in range(JOBS))
    cfg = Config(days=0.003, jobs=JOBS, nodes=3, seed=3, faults=frozenset(), job_docs=docs, mean_s=0.05)
    sim = FleetSimulation(dataclasses.replace(cfg, drain_s=0.0, max_starts=max_starts))
    out = sim.run()
    try:
        bad = check_fleet(out, ["attempt_started_once", "any_runs_once"])
        assert not {name: b[0] for name, b in bad.items() if b}
        found = {}
        for n in sim.nodes:
            d = n.daemon
            assert d is not None
            found[n.name] = sorted(
                r.run_id
                for r in d.timeline.runs()
                if r.trigger == Trigger.SCHEDULE
                and r.state == RunState.PENDING
                and not d.placement.owns(d.jobs[r.job_id])
            )
        assert set(found) == set(out.nodes)
        return found
    finally:
        out.close()


def test_a_node_of_a_calm_fleet_tracks_none_of_the_other_nodes_occurrences():
    assert tracked_not_owned(None) == {"node1": [], "node2": [], "node3": []}


def test_a_node_past_its_start_limit_tracks_none_of_the_other_nodes_occurrences():
    assert tracked_not_owned(1.0) == {"node1": [], "node2": [], "node3": []}
