"""A catch-up line whose next run is skipped as it starts (a window with `blackout: skip`,
a pause) moves on to the one after it at once: under `forbid` the next one waits only for
a run that is going, and a skipped run never went. Before, the line moved one run a
wake-up, so in a quiet hour the rest of the line waited for the next fire time of any job
each, and a two-day run of 300 jobs (seed 130) recorded a line's skips 7 s apart only
because another job happened to wake chronod."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event
from tests.sim.job_docs import DEFER_LINE

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
LINE = {**DEFER_LINE, "blackout": "skip"}
WINDOW = {"name": "swap", "reason": "CHG-7: disk swap", "cron": "25 0 * * *", "duration": "90m", "jobs": ["line"]}


def test_a_line_whose_runs_a_window_skips_is_settled_at_once(monkeypatch: pytest.MonkeyPatch):
    # each run takes 50 s; chronod is down 00:01-00:21, so twenty occurrences wait in the
    # line when it comes back, drained one at a time; the window opens at 00:25, while the
    # line still holds most of them, and the simulation ends at 00:28:48
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (50.0, 0))
    cfg = Config(days=0.02, jobs=1, seed=1, faults=frozenset(), job_docs=(LINE,), blackouts=(WINDOW,), start=START)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 60.0, "crash", {"calls": 0, "downtime": 1200.0})]
    out = sim.run()
    try:
        opens = START + timedelta(minutes=25)
        rows = out.store.runs("line", newest_first=False)
        skipped = [r for r in rows if r.state == "skipped_blackout" and r.scheduled_at < opens]
        assert len(skipped) >= 10, [(r.scheduled_at, r.state) for r in rows]  # the line the window met
        # the first skip comes when the run going as the window opened ends; the rest with it
        first = min(r.finished_at for r in skipped)
        late = [(r.scheduled_at.strftime("%H:%M"), r.finished_at) for r in skipped if r.finished_at > first]
        assert not late, late
        assert not [r for r in rows if r.state == "pending" and r.scheduled_at < opens]
        names = ["one_terminal_state", "held_order", "reason_truth", "audit_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()
