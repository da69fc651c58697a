"""A catch-up backlog drains one occurrence after another under `overlap: forbid`, each
with its retries: the next occurrence waits while the one before it waits for its next
attempt (a retry always starts, so one started during the backoff ran beside it; seed 36
found it after a stall)."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")

EVERY_MINUTE = {
    "id": "drain",
    "owner": "ops",
    "schedule": "* * * * *",
    "command": "false",
    "idempotency_class": "idempotent",
    "overlap": "forbid",
    "catchup": "all",
    "catchup_window_s": 600,
    "retry": {"attempts": 2, "backoff_s": 5, "max_backoff_s": 5},
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}


def drained(monkeypatch: pytest.MonkeyPatch):
    """An every-minute forbid job whose attempts all fail after 8 s (so each occurrence
    waits about 5 s for its retry), and a 200 s stall that leaves a backlog of three."""
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (8.0, 1))
    cfg = Config(days=0.01, jobs=1, seed=1, faults=frozenset(), job_docs=(EVERY_MINUTE,), mean_s=8.0, start=START)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 130.5, "stall", {"seconds": 200.0})]
    out = sim.run()
    try:
        procs = sorted((p for p in out.world.procs.values() if p.job_id == "drain"), key=lambda p: p.started_mono)
        return check(out, ("catchup_all_in_order",))["catchup_all_in_order"], procs
    finally:
        out.close()


def test_a_backlog_waits_for_each_occurrences_retry_before_the_next(monkeypatch):
    broken, procs = drained(monkeypatch)
    assert broken == []
    # the stall left a backlog, and its occurrences did retry (the case is met)
    late = [p for p in procs if p.attempt == 2 and (p.started_wall - p.scheduled_at).total_seconds() > 60]
    assert len({p.run_id for p in late}) >= 2
    # each occurrence's two attempts run back to back, before the next occurrence starts
    order = [(p.run_id, p.attempt) for p in procs]
    for (a, n), (b, m) in zip(order, order[1:]):
        if n == 1:
            assert (b, m) == (a, 2), order


EVERY_MINUTE_SLOW = {
    **EVERY_MINUTE,
    "id": "slow",
    "retry": {"attempts": 2, "backoff_s": 30, "max_backoff_s": 30},
}


def test_an_occurrence_due_while_the_previous_run_waits_for_its_retry_is_skipped_under_forbid(monkeypatch):
    """Every attempt takes 40 s and fails: the retry of the 00:00 occurrence starts 24 to
    36 s after its first attempt ended, past 00:01, when the next occurrence falls due.
    The run is still going (a retry always starts): under forbid that occurrence is
    skipped, not started beside the retry (seed 13, a day of 100 jobs, found them running
    together)."""
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (40.0, 1))
    cfg = Config(days=0.06, jobs=1, seed=1, faults=frozenset(), job_docs=(EVERY_MINUTE_SLOW,), mean_s=40.0, start=START)
    out = Simulation(cfg).run()
    try:
        rows = sorted(out.store.runs("slow"), key=lambda r: r.scheduled_at)
        waited = [r for r in rows if r.state == "skipped_overlap" and "(waiting to start attempt 2)" in (r.error or "")]
        assert len(waited) >= 3, [(r.scheduled_at, r.state, r.error) for r in rows]
        names = ["catchup_all_in_order", "one_terminal_state", "reason_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()


WITH_A_RESOURCE = {
    **EVERY_MINUTE,
    "id": "slotted",
    "schedule": "*/5 * * * *",
    "catchup": "latest",
    "catchup_window_s": 60,
    "resource": "net",
}


def test_a_retry_due_after_its_occurrences_catch_up_window_still_gets_a_slot(monkeypatch):
    """Every attempt takes 70 s and fails; the retry falls due 5 s later, past the
    occurrence's 60 s catch-up window. A free slot of its resource is its to take: the
    wait for a slot counts from when the retry fell due, not from the occurrence's fire
    time (it was recorded skipped_resource at once, its failed attempt forgotten)."""
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (70.0, 1))
    cfg = Config(days=0.06, jobs=1, seed=1, faults=frozenset(), job_docs=(WITH_A_RESOURCE,), mean_s=70.0, start=START)
    out = Simulation(cfg).run()
    try:
        procs = [p for p in out.world.procs.values() if p.job_id == "slotted"]
        assert len([p for p in procs if p.attempt == 2]) >= 2
        rows = [r for r in out.store.runs("slotted") if r.started_at is not None]
        assert rows and {r.state for r in rows} <= {"failed", "running", "retry_wait"}
        names = ["one_terminal_state", "reason_truth", "resource_limit_held"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()
