"""A maintenance window that opens while a job's catch-up line drains meets the whole line
at once.

Under `blackout: defer` it holds the whole line: every occurrence waiting in it says,
from that moment, that the window holds it and until when. Before, the line's head was
held when its turn came, and the next one a wake-up later, so for minutes the rows behind
it still named an earlier window's end, or none. Seed 12 of a quarter day of 1,000 jobs
ended in such a minute and its checks called the rows "still pending long after [they]
fell due".

Under `blackout: skip` the line moves on past each run skipped as it starts: under
`forbid` the next one waits only for a run that is going, and a skipped run never went.
Before, the line moved one run a wake-up, so in a quiet hour the rest of the line waited
for the next fire time of any job each, and a two-day run of 300 jobs (seed 130) recorded
a line's skips 7 s apart only because another job happened to wake chronod."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from chronod.core import blackout
from chronod.sim import driver
from chronod.sim.driver import Outcome, Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event
from tests.sim.job_docs import DEFER_LINE

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
WINDOW = {"name": "swap", "reason": "CHG-7: disk swap", "cron": "25 0 * * *", "duration": "90m", "jobs": ["line"]}
OPENS, ENDS = START + timedelta(minutes=25), START + timedelta(minutes=115)
CHECKS = ["one_terminal_state", "held_order", "reason_truth", "audit_truth"]


def a_line_meets_the_window(monkeypatch: pytest.MonkeyPatch, line: dict[str, Any]) -> Outcome:
    """Each run takes 50 s; chronod is down 00:01-00:21, so twenty occurrences wait in the
    line when it comes back, drained one at a time; the window opens at 00:25, while the
    line still holds most of them, and the simulation ends at 00:28:48."""
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (50.0, 0))
    cfg = Config(days=0.02, jobs=1, seed=1, faults=frozenset(), job_docs=(line,), blackouts=(WINDOW,), start=START)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 60.0, "crash", {"calls": 0, "downtime": 1200.0})]
    return sim.run()


def test_a_window_that_opens_while_a_line_drains_holds_the_whole_line_at_once(monkeypatch: pytest.MonkeyPatch):
    out = a_line_meets_the_window(monkeypatch, DEFER_LINE)
    try:
        assert out.end > OPENS + timedelta(minutes=3), out.end
        started = sorted(p.started_wall for p in out.world.procs.values())
        assert started and started[-1] < OPENS + timedelta(seconds=60), started[-3:]  # nothing once the window held
        waiting = [r for r in out.store.runs("line", newest_first=False) if r.state == "pending"]
        early = [r for r in waiting if r.scheduled_at < START + timedelta(minutes=20)]
        assert len(early) >= 10, [r.scheduled_at for r in waiting]  # the line the window met
        wrong = [
            (r.scheduled_at.strftime("%H:%M"), r.error, r.next_attempt_at)
            for r in waiting
            if r.scheduled_at < OPENS
            and not ((r.error or "").startswith(blackout.DEFERRED_BY + "swap") and r.next_attempt_at == ENDS)
        ]
        assert not wrong, wrong
        assert not {name: bad[0].what for name, bad in check(out, CHECKS).items() if bad}
    finally:
        out.close()


def test_a_line_whose_runs_a_window_skips_is_settled_at_once(monkeypatch: pytest.MonkeyPatch):
    out = a_line_meets_the_window(monkeypatch, {**DEFER_LINE, "blackout": "skip"})
    try:
        rows = out.store.runs("line", newest_first=False)
        skipped = [r for r in rows if r.state == "skipped_blackout" and r.scheduled_at < OPENS]
        assert len(skipped) >= 10, [(r.scheduled_at, r.state) for r in rows]  # the line the window met
        # the first skip comes when the run going as the window opened ends; the rest with it
        first = min(r.finished_at for r in skipped)
        late = [(r.scheduled_at.strftime("%H:%M"), r.finished_at) for r in skipped if r.finished_at > first]
        assert not late, late
        assert not [r for r in rows if r.state == "pending" and r.scheduled_at < OPENS]
        assert not {name: bad[0].what for name, bad in check(out, CHECKS).items() if bad}
    finally:
        out.close()
