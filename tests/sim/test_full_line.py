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
