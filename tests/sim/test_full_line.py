"""A run may rightly still wait for a slot of its resource when the simulation ends: its
resource's runs took longer than its slots, every slot was taken all along, and its
catch-up window is not over (docs/reference.md, Resources: it stays `pending`, in line).
Seed 108 of two days of 300 jobs found it: resource db's line was over an hour long at
the end, and one_terminal_state called the occurrences waiting in it "still pending
long after it fell due"; the daemon was right."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-01T23:58:00+00:00")
BASE = {
    "owner": "ops",
    "command": "true",
    "idempotency_class": "idempotent",
    "resource": "db",  # one slot
    "catchup": "all",
    "catchup_window_s": 86400,
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
HOG = {**BASE, "id": "hog", "schedule": "0 0 * * *"}  # holds the slot from 00:00 past the end
WAITER = {**BASE, "id": "waiter", "schedule": "10 0 * * *"}  # due 00:10, waits for the slot to the end


def test_a_run_still_waiting_for_a_slot_that_was_never_free_is_going(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (7200.0 if plan.id == "hog" else 1.0, 0))
    # 0.07 days: the invariants judge what fell due an hour (SETTLE_S) before the end, 00:10 included
    out = Simulation(Config(days=0.07, jobs=2, seed=1, faults=frozenset(), job_docs=(HOG, WAITER), start=START)).run()
    try:
        first = min(out.store.runs("waiter"), key=lambda r: r.scheduled_at)
        assert first.state == "pending" and (first.error or "").startswith("waiting for a slot"), first.error
        assert not {name: bad[0].what for name, bad in check(out, ["one_terminal_state"]).items() if bad}
    finally:
        out.close()


def test_a_run_left_waiting_while_a_slot_was_free_is_still_caught(monkeypatch: pytest.MonkeyPatch):
    from chronod.daemon.registry import Registry

    monkeypatch.setattr(Registry, "limit", lambda self, resource: 0)  # every slot taken, always: a wrong daemon
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1.0, 0))
    out = Simulation(Config(days=0.07, jobs=1, seed=1, faults=frozenset(), job_docs=(WAITER,), start=START)).run()
    try:
        bad = check(out, ["one_terminal_state"])["one_terminal_state"]
        assert bad and "still pending" in bad[0].what, bad
    finally:
        out.close()


LINE = {**BASE, "id": "line", "schedule": "* * * * *", "overlap": "forbid"}  # every minute, one at a time


def test_a_catchup_line_behind_a_head_waiting_for_a_slot_that_was_never_free_is_going(
    monkeypatch: pytest.MonkeyPatch,
):
    # chronod is down 00:01-00:11: line's occurrences of those minutes are a catch-up
    # backlog; its head waits for the slot the hog holds past the end, and every one after
    # it waits its turn behind it in line's catch-up line (seed 61 of a quarter day of
    # 1,000 jobs: one_terminal_state called them "still pending long after it fell due")
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (7200.0 if plan.id == "hog" else 1.0, 0))
    sim = Simulation(Config(days=0.07, jobs=2, seed=1, faults=frozenset(), job_docs=(HOG, LINE), start=START))
    sim.events = [Event(sim.t0 + 180.0, "crash", {"calls": 0, "downtime": 600.0})]
    out = sim.run()
    try:
        rows = sorted(out.store.runs("line"), key=lambda r: r.scheduled_at)
        waiting = [r for r in rows if r.state == "pending" and (r.error or "").startswith("waiting for a slot")]
        queued = [r for r in rows if r.state == "pending" and r.error == "queued behind the catch-up backlog"]
        assert waiting and len(queued) > 30, [(r.scheduled_at, r.state, r.error) for r in rows[:5]]
        assert waiting[-1].scheduled_at < queued[0].scheduled_at
        assert not {name: bad[0].what for name, bad in check(out, ["one_terminal_state"]).items() if bad}
    finally:
        out.close()


def test_a_catchup_line_left_waiting_behind_a_head_while_a_slot_was_free_is_still_caught(
    monkeypatch: pytest.MonkeyPatch,
):
    from chronod.daemon.registry import Registry

    monkeypatch.setattr(Registry, "limit", lambda self, resource: 0)  # every slot taken, always: a wrong daemon
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1.0, 0))
    sim = Simulation(Config(days=0.07, jobs=1, seed=1, faults=frozenset(), job_docs=(LINE,), start=START))
    sim.events = [Event(sim.t0 + 180.0, "crash", {"calls": 0, "downtime": 600.0})]
    out = sim.run()
    try:
        bad = check(out, ["one_terminal_state"])["one_terminal_state"]
        queued = [b for b in bad if out.store.get_run(b.run_id).error == "queued behind the catch-up backlog"]
        assert queued and all("still pending" in b.what for b in queued), bad[:3]
    finally:
        out.close()
