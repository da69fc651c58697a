"""A backfill stored while chronod is down may name occurrences that fall due in that
time and have no record yet. The restart catches the newest of them up as scheduled
(catch-up comes first), and the backfill reruns them later, when their turn comes. The
catch-up's attempt is not the backfill's: it was told its occurrence's own fire time
(CHRONO_FIRE_AT), not the time the backfill opened the run. Seed 110 of two days of 300
jobs: the checks took the catch-up's attempts, started after the backfill was stored,
for the backfill's, and called them out of the backfill's order (backfill_completes)
and ahead of a scheduled occurrence (schedule_first); the daemon was right."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import Facts, _asked_for, check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
JOB = {
    "id": "export",
    "owner": "ops",
    "schedule": "*/5 * * * *",
    "command": "true",
    "idempotency_class": "idempotent",
    "overlap": "forbid",
    "catchup": "all",
    "catchup_window_s": 600,
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}


def test_the_restarts_catch_up_of_an_occurrence_a_backfill_names_is_not_the_backfills(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (60.0, 0))
    cfg = Config(days=0.07, jobs=1, seed=1, faults=frozenset(), job_docs=(JOB,), start=START)
    sim = Simulation(cfg)
    sim.events = [
        Event(sim.t0 + 720, "crash", {"calls": 0, "downtime": 1200.0}),  # down 00:12-00:32
        # at 00:28, while chronod is down: every occurrence from 00:03 to 00:27
        Event(sim.t0 + 1680, "backfill", {"job": "export", "since_s": 1500, "until_s": 60, "only": "all"}),
    ]
    out = sim.run()
    try:
        (bf_id,) = out.backfills
        bf = out.store.get_backfill(bf_id)
        assert bf is not None and bf.state == "done", bf
        names = ["backfill_completes", "schedule_first", "one_terminal_state", "reason_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
        asked = _asked_for(Facts(out))
        caught = sorted(
            (p for p in out.world.procs.values() if p.scheduled_at == START.replace(minute=25)), key=lambda p: p.attempt
        )
        # caught up at the restart as scheduled, then run again by the backfill
        assert [(p.attempt, asked(p)) for p in caught] == [(1, None), (2, "backfill")], caught
    finally:
        out.close()
