"""A maintenance window that opens while a `defer` job's catch-up line drains holds the
whole line at once: every occurrence waiting in it says, from that moment, that the window
holds it and until when. Before, the line's head was held when its turn came, and the
next one a wake-up later, so for minutes the rows behind it still named an earlier
window's end, or none. Seed 12 of a quarter day of 1,000 jobs ended in such a minute and
its checks called the rows "still pending long after [they] fell due"."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from chronod.core import blackout
from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event
from tests.sim.job_docs import DEFER_LINE

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
LINE = DEFER_LINE
WINDOW = {"name": "swap", "reason": "CHG-7: disk swap", "cron": "25 0 * * *", "duration": "90m", "jobs": ["line"]}


def test_a_window_that_opens_while_a_line_drains_holds_the_whole_line_at_once(monkeypatch: pytest.MonkeyPatch):
    # each run takes 50 s; chronod is down 00:01-00:21, so twenty occurrences wait in the
    # line when it comes back, drained one at a time; the window opens at 00:25, and the
    # simulation ends at 00:28:48, three minutes into it
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (50.0, 0))
    cfg = Config(days=0.02, jobs=1, seed=1, faults=frozenset(), job_docs=(LINE,), blackouts=(WINDOW,), start=START)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 60.0, "crash", {"calls": 0, "downtime": 1200.0})]
    out = sim.run()
    try:
        opens, ends = START + timedelta(minutes=25), START + timedelta(minutes=115)
        assert out.end > opens + timedelta(minutes=3), out.end
        started = sorted(p.started_wall for p in out.world.procs.values())
        assert started and started[-1] < opens + timedelta(seconds=60), started[-3:]  # nothing once the window held
        waiting = [r for r in out.store.runs("line", newest_first=False) if r.state == "pending"]
        early = [r for r in waiting if r.scheduled_at < START + timedelta(minutes=20)]
        assert len(early) >= 10, [r.scheduled_at for r in waiting]  # the line the window met
        wrong = [
            (r.scheduled_at.strftime("%H:%M"), r.error, r.next_attempt_at)
            for r in waiting
            if r.scheduled_at < opens
            and not ((r.error or "").startswith(blackout.DEFERRED_BY + "swap") and r.next_attempt_at == ends)
        ]
        assert not wrong, wrong
        names = ["one_terminal_state", "held_order", "reason_truth", "audit_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()
