"""A window holds a run that gets a slot of its resource, until the end the window named.
When the wall clock then steps back to before the window opened, the window is not open
on the clock, and a later occurrence of the same job that gets a slot starts: the held
one starts after it, when the hold ends. The checks took that for a `catchup: all` job
starting out of order (seed 17 of a quarter day of 1,000 jobs: a step back of 11 minutes
just after a window opened); they now allow it, and only it."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event
from tests.sim.job_docs import DEFER_LINE, ONE_SLOT_ALL

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
HOG = {**ONE_SLOT_ALL, "id": "hog", "schedule": "1 * * * *"}  # holds the slot 00:01-00:25
TIDY = {**ONE_SLOT_ALL, "id": "tidy", "schedule": "*/5 * * * *", "overlap": "allow", "blackout": "defer"}
OTHER = {**ONE_SLOT_ALL, "id": "other", "schedule": "7 * * * *"}  # in line between tidy's 00:05 and 00:10
WINDOW = {"name": "swap", "reason": "CHG-9: disk swap", "cron": "24 0 * * *", "duration": "30m", "jobs": ["tidy"]}
LENGTH = {"hog": 1440.0, "other": 60.0, "tidy": 1.0}


def stepped_back(monkeypatch: pytest.MonkeyPatch, seconds: float):
    # at 00:25 the hog ends: tidy's 00:05 gets the slot and the window holds it, `other`
    # takes the slot; at 00:25:30 the clock steps back; `other` ends and tidy's 00:10 gets it
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (LENGTH[plan.id], 0))
    cfg = Config(
        days=0.08, jobs=3, seed=1, faults=frozenset(), job_docs=(HOG, TIDY, OTHER), blackouts=(WINDOW,), start=START
    )
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 25.5 * 60, "jump", {"seconds": seconds})]
    return sim.run()


def tidy_starts(out) -> list[str]:
    procs = sorted((p for p in out.world.procs.values() if p.job_id == "tidy"), key=lambda p: p.started_mono)
    return [p.scheduled_at.strftime("%H:%M") for p in procs]


def test_a_run_held_by_a_window_when_the_clock_steps_back_starts_after_a_later_one(monkeypatch: pytest.MonkeyPatch):
    out = stepped_back(monkeypatch, -15 * 60.0)  # to 00:10:30: the window opens again at 00:24
    try:
        starts = tidy_starts(out)
        assert starts[:2] == ["00:10", "00:15"] and "00:05" in starts, starts
        assert not {name: bad[0].what for name, bad in check(out, ["catchup_all_in_order"]).items() if bad}
    finally:
        out.close()


def test_without_the_step_the_held_run_starts_first(monkeypatch: pytest.MonkeyPatch):
    out = stepped_back(monkeypatch, 0.0)
    try:
        starts = tidy_starts(out)
        assert starts[0] == "00:05" and starts == sorted(starts), starts
        assert not {name: bad[0].what for name, bad in check(out, ["catchup_all_in_order"]).items() if bad}
    finally:
        out.close()


LINE = {**DEFER_LINE, "catchup_window_s": 600}
SHORT = {"name": "swap", "reason": "CHG-7: disk swap", "cron": "20 0 * * *", "duration": "5m", "jobs": ["line"]}


def test_a_step_back_into_a_window_holds_the_occurrences_due_after_it_ended(monkeypatch: pytest.MonkeyPatch):
    """A catch-up line drains (runs of 2 minutes, one due every minute) when the clock
    steps back from 00:30 into the window of 00:20-00:25: the window holds the whole line,
    occurrences due after 00:25 too, until 00:25; those that then wait past their catch-up
    window behind the others are recorded skipped_blackout, naming the window, and that is
    true (seed 113 of a quarter day of 1,000 jobs: one_terminal_state said "no maintenance
    window held the job")."""
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (120.0, 0))
    cfg = Config(days=0.08, jobs=1, seed=1, faults=frozenset(), job_docs=(LINE,), blackouts=(SHORT,), start=START)
    sim = Simulation(cfg)
    sim.events = [
        Event(sim.t0 + 60.0, "crash", {"calls": 0, "downtime": 600.0}),  # a backlog: the line
        Event(sim.t0 + 1800.0, "jump", {"seconds": -420.0}),  # 00:30 -> 00:23
    ]
    out = sim.run()
    try:
        ended = START + timedelta(minutes=25)
        after = [r for r in out.store.runs("line") if r.state == "skipped_blackout" and r.scheduled_at > ended]
        assert after and all("window swap" in (r.error or "") for r in after), [
            (r.scheduled_at, r.error) for r in after
        ]
        assert not {name: bad[0].what for name, bad in check(out, ["one_terminal_state"]).items() if bad}
    finally:
        out.close()
