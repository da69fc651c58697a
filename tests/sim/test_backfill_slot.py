"""The schedule comes first in a resource's line too: under `overlap: forbid` a backfill
yields to the scheduled occurrences of its job that wait for a slot of the job's resource.
Seed 101 of two days of 300 jobs found a job whose resource was always full: the
backfill opened its next run (its wait for a slot counts from then) while a scheduled
occurrence waited for the slot, and the occurrences that fell due after it waited behind
the backfilled run in the resource's line; the backfilled run took the slot first."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-01T23:30:00+00:00")
BASE = {
    "owner": "ops",
    "command": "true",
    "idempotency_class": "idempotent",
    "resource": "db",  # one slot
    "overlap": "forbid",
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
HOG = {**BASE, "id": "hog", "schedule": "2 0 * * *"}  # holds the slot 00:02-00:12
EXPORT = {**BASE, "id": "export", "schedule": "*/5 * * * *", "catchup": "latest", "catchup_window_s": 600}


def backfilled(monkeypatch: pytest.MonkeyPatch, at: str):
    """The export backfills the half hour before 00:00 at `at`, while the hog holds the slot."""
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (600.0, 0) if plan.id == "hog" else (1.0, 0))
    cfg = Config(days=0.1, jobs=2, seed=1, faults=frozenset(), job_docs=(HOG, EXPORT), start=START)
    sim = Simulation(cfg)
    when = (datetime.fromisoformat(f"2025-06-02T{at}+00:00") - START).total_seconds()
    # the occurrences of 23:35 to 00:00 (all of them: they ran, nothing was missed)
    data = {"job": "export", "since_s": when - 60.0, "until_s": when - 1830.0, "only": "all"}
    sim.events = [Event(sim.t0 + when, "backfill", data)]
    return sim.run()


def scheduled_start(out, hhmm: str) -> datetime:
    (row,) = [r for r in out.store.runs("export") if r.trigger == "schedule" and f"{r.scheduled_at:%H:%M}" == hhmm]
    assert row.started_at is not None, (row.state, row.error)
    return row.started_at


@pytest.mark.parametrize("at", ["00:03:00", "00:06:00"])
def test_a_backfilled_run_waiting_for_a_slot_lets_the_schedule_go_first(monkeypatch: pytest.MonkeyPatch, at: str):
    """00:03: the backfill's first run waits for the slot before 00:05 and 00:10 fall due;
    00:06: it would be opened while 00:05 waits for the slot. Either way both scheduled
    occurrences take the slot first when the hog lets it go at 00:12."""
    out = backfilled(monkeypatch, at)
    try:
        (bf_id,) = out.backfills
        bf = out.store.get_backfill(bf_id)
        procs = [p for p in out.world.procs.values() if p.run_id in bf.run_ids and p.started_wall >= bf.created_at]
        assert procs  # the backfill did run
        first = min(p.started_wall for p in procs)
        assert first > scheduled_start(out, "00:10") >= scheduled_start(out, "00:05") >= START + timedelta(minutes=42)
        if at == "00:06:00":  # its next run waits for the scheduled one, as for one going
            opened = min(r.fire_at for r in out.store.runs("export") if r.run_id in bf.run_ids)
            assert opened >= scheduled_start(out, "00:10")
        results = check(out, ["schedule_first", "one_terminal_state", "resource_limit_held", "backfill_completes"])
        assert {name: bad[0].what for name, bad in results.items() if bad} == {}
    finally:
        out.close()
