"""An edit that makes a schedule more frequent keeps the stored occurrence of the old
schedule when the new one has it too, and stores the new schedule's earlier next one
beside it (`Occurrences.load`). When both fall due in one wake-up (a crash, a stall, an
outage), the occurrences between them are due as well: neither's firing stored them.
Seed 102 of two days of 300 jobs found the :55 of a job edited at 16:45 from every 30
minutes to every 5 lost without a record: its :50 and :00 fell due together after a
crash, and the catch-up counted only what came after the :00."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-02T00:00:30+00:00")
JOB = {
    "id": "edited",
    "owner": "ops",
    "idempotency_class": "idempotent",
    "schedule": "*/30 * * * *",
    "command": "true",
    "catchup": "all",
    "catchup_window_s": 3600,
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}


def every_five_minutes(sim: Simulation) -> str:
    """The registry edit of these scenarios: the job's schedule becomes every 5 minutes."""
    name = min(sim.registry.files)
    plan = sim.registry.files[name][0]
    plan.doc = {**plan.doc, "schedule": "*/5 * * * *"}
    sim.registry.write(name)
    return "changed edited to '*/5 * * * *'"


def test_the_occurrences_between_two_stored_ones_that_fall_due_together_are_not_lost(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (5.0, 0))
    # 0.07 days: the invariants judge what fell due an hour (SETTLE_S) before the end
    cfg = Config(days=0.07, jobs=1, seed=1, faults=frozenset(), job_docs=(JOB,), start=START)
    sim = Simulation(cfg)

    monkeypatch.setattr(sim.registry, "edit", lambda: every_five_minutes(sim))
    sim.events = [
        # at 00:12 the edit stores 00:15 beside the 00:30 the 00:00 stored; a stall from
        # 00:13 to 00:33 then lets both fall due in one wake-up
        Event(sim.t0 + 690.0, "registry"),
        Event(sim.t0 + 750.0, "stall", {"seconds": 1200.0}),
    ]
    out = sim.run()
    try:
        rows = {r.scheduled_at.strftime("%H:%M"): r.state for r in out.store.runs("edited")}
        assert {"00:20", "00:25"} <= set(rows), sorted(rows.items())
        assert not {name: bad[0].what for name, bad in check(out, ["one_terminal_state"]).items() if bad}
    finally:
        out.close()


WINDOW = {"name": "swap", "reason": "CHG-5: disk swap", "cron": "25 0 * * *", "duration": "15m", "jobs": ["edited"]}


def test_an_edit_while_a_window_holds_an_occurrence_stores_the_new_schedules_next_one(
    monkeypatch: pytest.MonkeyPatch,
):
    """Edited inside a window that holds the job's 00:30, from every 30 minutes to every 5:
    the held 00:30 is no next occurrence, so the new schedule's 00:35 is stored beside the
    old 01:00, and so are those after it. Seed 145 of two days of 300 jobs: an hourly job
    edited to every 15 minutes while a window held its :30 lost its :00 and :15 without
    a record (the held one was taken for the next, and the new schedule's next was after it)."""
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (5.0, 0))
    doc = {**JOB, "blackout": "defer", "catchup": "latest"}
    cfg = Config(days=0.07, jobs=1, seed=1, faults=frozenset(), job_docs=(doc,), blackouts=(WINDOW,), start=START)
    sim = Simulation(cfg)

    monkeypatch.setattr(sim.registry, "edit", lambda: every_five_minutes(sim))
    sim.events = [Event(sim.t0 + 1980.0, "registry")]  # 00:33, inside the window (00:25-00:40)
    out = sim.run()
    try:
        rows = {r.scheduled_at.strftime("%H:%M"): r.state for r in out.store.runs("edited")}
        assert {"00:35", "00:40", "00:45", "00:50", "00:55"} <= set(rows), sorted(rows.items())
        assert not {name: bad[0].what for name, bad in check(out, ["one_terminal_state"]).items() if bad}
    finally:
        out.close()
