"""A backfill under faults in the simulation: the daemon dies in its middle (a few store
runs into it) and the next life finishes it, in order, under `overlap: forbid`."""

from __future__ import annotations

from chronod.daemon.backfills import Backfills
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

EXPORT = {
    "id": "export",
    "owner": "ops",
    "schedule": "*/2 * * * *",
    "command": "true",
    "idempotency_class": "keyed",
    "overlap": "forbid",
    "catchup": "none",
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}


def crashed_backfill(seed: int):
    """An outage of 15 minutes leaves occurrences skipped; an hour later they are backfilled
    and the daemon crashes a few runs into the backfill."""
    cfg = Config(days=0.1, jobs=1, seed=seed, faults=frozenset({"crash", "backfill"}), job_docs=(EXPORT,), mean_s=20.0)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 1800, "crash", {"calls": 0, "downtime": 900.0}), Event(sim.t0 + 3600, "backfill")]
    return sim.run()


def test_a_backfill_with_a_crash_in_its_middle_finishes_in_order_and_keeps_every_promise():
    out = crashed_backfill(1)
    try:
        (bf_id,) = out.backfills
        bf = out.store.get_backfill(bf_id)
        lives = out.world.lives
        assert [life.how for life in lives] == ["crash", "crash", "stop"]
        procs = [p for p in out.world.procs.values() if p.run_id in bf.run_ids and p.started_wall >= bf.created_at]
        crashed_at = lives[1].ended
        assert any(p.started_mono < crashed_at for p in procs) and any(p.started_mono > crashed_at for p in procs)
        assert (bf.state, bf.started) == ("done", len(bf.items))
        results = check(out)
        assert {name: bad[:1] for name, bad in results.items() if bad} == {}
    finally:
        out.close()


def test_a_daemon_that_forgets_a_backfill_at_restart_is_caught(monkeypatch):
    real = Backfills.drive_backfills
    lives: list[Backfills] = []  # the first life's, held: a later life's could reuse its id()

    def only_first_life(self):
        if not lives or lives[0] is self:
            lives[:1] = [self]
            real(self)

    monkeypatch.setattr(Backfills, "drive_backfills", only_first_life)
    out = crashed_backfill(1)
    try:
        bad = check(out, ["backfill_completes"])["backfill_completes"]
        assert bad and "still running" in bad[0].what
    finally:
        out.close()


def test_a_seeded_day_of_faults_with_a_backfill_among_them_keeps_the_promises():
    faults = frozenset({"crash", "stall", "outage", "registry", "dst", "backfill"})
    out = Simulation(Config(days=0.1, jobs=15, seed=3, faults=faults)).run()
    try:
        assert out.backfills  # this seed draws one
        names = ["one_terminal_state", "unsafe_at_most_once", "fire_lag_bounded", "resource_limit_held"]
        results = check(out, [*names, "backfill_completes"])
        assert {name: bad[:1] for name, bad in results.items() if bad} == {}
    finally:
        out.close()
