"""A resource's slot never stays free while a run that could take it waits behind runs a
maintenance window holds (seed 1 of a day of 1,000 jobs found it: `reason_truth`,
"skipped_resource, but resource net had a free slot"). A slot given to a held run is not
taken, and went to nobody else until the next wake-up, one held run at a time."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config

START = datetime.fromisoformat("2025-06-01T23:59:00+00:00")
BASE = {
    "owner": "ops",
    "command": "true",
    "idempotency_class": "idempotent",
    "resource": "db",  # one slot
    "catchup": "all",
    "catchup_window_s": 3600,
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
HOG = {**BASE, "id": "hog", "schedule": "0 0 * * *"}  # holds the slot 00:00-00:10
HELD = {**BASE, "id": "held", "schedule": "* * * * *", "blackout": "defer"}  # joins the line every minute
FREE = {**BASE, "id": "free", "schedule": "5 0 * * *"}  # behind five of held's, ahead of two
WINDOW = {"name": "swap", "reason": "CHG-3: disk swap", "cron": "8 0 * * *", "duration": "30m", "jobs": ["held"]}


def test_a_slot_goes_past_the_held_runs_in_line_to_one_that_can_start(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (600.0 if plan.id == "hog" else 1.0, 0))
    cfg = Config(
        days=0.03, jobs=3, seed=1, faults=frozenset(), job_docs=(HOG, HELD, FREE), blackouts=(WINDOW,), start=START
    )
    out = Simulation(cfg).run()
    try:
        procs = {p.job_id: p for p in sorted(out.world.procs.values(), key=lambda p: -p.started_mono)}
        hog, free = procs["hog"], procs["free"]
        freed = out.world.wall_hull(hog.started_mono, hog.end_mono())[1]
        # the held runs from 00:01 to 00:07 were in line when the window opened at 00:08;
        # the slot the hog leaves at 00:10 goes to `free` at once, not minutes later
        waited = (free.started_wall - freed).total_seconds()
        assert 0 <= waited < 1, f"free started {waited:.1f}s after the slot was freed"
        assert not {name: bad[:1] for name, bad in check(out, ["reason_truth", "resource_limit_held"]).items() if bad}
    finally:
        out.close()
