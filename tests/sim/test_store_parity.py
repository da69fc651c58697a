"""The simulation runs on the memory store; it proves what it proves only if the daemon on
it does exactly what it does on the real SQLite store. The same seed on both stores gives
the same processes, started at the same instants, and the same record of every run."""

from __future__ import annotations

from chronod.sim.driver import Simulation
from chronod.sim.fleet import FLEET_FAULTS, FleetSimulation
from chronod.sim.scenario import FAULTS, Config


def one_node(store: str):
    out = Simulation(Config(days=0.05, jobs=10, seed=6, faults=frozenset(FAULTS), store=store)).run()
    try:
        procs = sorted((p.run_id, p.attempt, p.started_wall) for p in out.world.procs.values())
        return procs, sorted((r.run_id, r.state, r.error, r.attempts, r.trigger) for r in out.store.runs())
    finally:
        out.close()


def a_fleet(store: str):
    cfg = Config(days=0.01, jobs=12, nodes=3, seed=5, faults=frozenset(FLEET_FAULTS), drain_s=600, store=store)
    out = FleetSimulation(cfg).run()
    try:
        launches = [(p.run_id, p.attempt, p.node, p.started_mono) for p in out.launches]
        return launches, sorted((r.run_id, r.state, r.error, r.node, r.attempts) for r in out.store.runs())
    finally:
        out.close()


def test_one_node_does_the_same_on_the_memory_store_as_on_sqlite():
    memory, sqlite = one_node("memory"), one_node("sqlite")
    assert len(memory[0]) > 20 and len(memory[1]) > 100  # the seed did something
    assert memory[0] == sqlite[0]
    assert memory[1] == sqlite[1]


def test_a_fleet_does_the_same_on_the_memory_store_as_on_sqlite():
    memory, sqlite = a_fleet("memory"), a_fleet("sqlite")
    assert len(memory[0]) > 100
    assert memory[0] == sqlite[0]
    assert memory[1] == sqlite[1]
