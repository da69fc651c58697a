"""After a restart, the occurrences that waited for a slot when chronod stopped go back
into their lines before the ones a window held, which fell due after them, are released:
a `catchup: all` job starts them in scheduled order. Before, the held ones were released
first, the first of them took the free slot, and the older ones started after it (seed 31
of a quarter day of 1,000 jobs: a window ended while chronod was down)."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event
from tests.sim.job_docs import ONE_SLOT_ALL

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
HOG = {**ONE_SLOT_ALL, "id": "hog", "schedule": "1 0 * * *"}  # holds the slot 00:01-00:21
TIDY = {**ONE_SLOT_ALL, "id": "tidy", "schedule": "*/5 * * * *", "overlap": "forbid", "blackout": "defer"}
WINDOW = {"name": "swap", "reason": "CHG-11: disk swap", "cron": "12 0 * * *", "duration": "8m", "jobs": ["tidy"]}


def test_occurrences_that_waited_for_a_slot_start_before_those_a_window_held(monkeypatch: pytest.MonkeyPatch):
    # tidy's 00:05 and 00:10 wait for the hog's slot; the window holds 00:15; chronod dies at
    # 00:16 and starts again at 00:26, after the window (00:20) and the hog (00:21) ended
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1200.0 if plan.id == "hog" else 1.0, 0))
    cfg = Config(days=0.03, jobs=2, seed=1, faults=frozenset(), job_docs=(HOG, TIDY), blackouts=(WINDOW,), start=START)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 16 * 60.0, "crash", {"calls": 0, "downtime": 600.0})]
    out = sim.run()
    try:
        assert [life.how for life in out.world.lives][:1] == ["crash"]
        procs = sorted((p for p in out.world.procs.values() if p.job_id == "tidy"), key=lambda p: p.started_mono)
        starts = [p.scheduled_at.strftime("%H:%M") for p in procs]
        assert starts[:5] == ["00:05", "00:10", "00:15", "00:20", "00:25"], starts
        assert not {name: bad[0].what for name, bad in check(out, ["catchup_all_in_order"]).items() if bad}
    finally:
        out.close()
