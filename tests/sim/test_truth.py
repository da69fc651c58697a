"""The record never lies about why: the reasons of skipped states against what the
simulation saw run, the schedule before backfills, held occurrences in scheduled order,
and a fleet's failover recorded as what it was (chronod.sim.invariants `reason_truth`,
`schedule_first`, `held_order`; chronod.sim.fleet_checks `reasons_true`). Each promise
holds on seeds with the real daemon and is caught on a daemon broken on purpose."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.daemon.dispatch import Dispatch
from chronod.daemon.starter import Starter
from chronod.sim.driver import Simulation
from chronod.sim.fleet import FleetSimulation
from chronod.sim.fleet_checks import check_fleet
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

# --- a backfill beside the live schedule (issue case 2) -----------------------------------

EVERY4 = {
    "id": "every4",
    "owner": "ops",
    "schedule": "*/4 * * * * *",
    "command": "true",
    "idempotency_class": "idempotent",
    "overlap": "forbid",
    "catchup": "latest",
    "catchup_window_s": 600,
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}


def backfilled(seed: int):
    """`chronoctl backfill --from -90s --to -4s --only all` of an every-4-s job that forbids
    overlap, whose runs take about 3 s: the backfill's runs meet the live schedule."""
    cfg = Config(days=0.004, jobs=1, seed=seed, faults=frozenset({"backfill"}), job_docs=(EVERY4,), mean_s=3.0)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 120, "backfill", {"job": "every4", "only": "all", "since_s": 90, "until_s": 4})]
    return sim.run()


@pytest.mark.parametrize("seed", [1, 2])
def test_a_backfill_never_makes_a_scheduled_occurrence_skip_and_yields_to_it(seed):
    out = backfilled(seed)
    try:
        (bf_id,) = out.backfills
        bf = out.store.get_backfill(bf_id)
        assert bf is not None and bf.state == "done" and len(bf.items) >= 8
        rows = [r for r in out.store.runs("every4") if r.trigger == "schedule"]
        during = [r for r in rows if bf.created_at <= r.fire_at <= bf.updated_at]
        assert during and not [r for r in during if r.state == "skipped_overlap" and "backfill" in (r.error or "")]
        results = check(out, ["schedule_first", "reason_truth", "one_terminal_state", "backfill_completes"])
        assert {name: bad[:1] for name, bad in results.items() if bad} == {}
    finally:
        out.close()


def test_a_daemon_that_skips_the_schedule_behind_a_backfill_is_caught(monkeypatch):
    monkeypatch.setattr(Starter, "going_runs", lambda self, job_id: [])  # the old rule: forbid skips
    out = backfilled(1)
    try:
        bad = check(out, ["schedule_first"])["schedule_first"]
        assert bad and "behind backfill run" in bad[0].what
    finally:
        out.close()
