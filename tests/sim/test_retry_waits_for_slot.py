"""A retry that falls due while every slot of its job's resource is taken waits for one
(docs/reference.md, Resources), in `retry_wait`, and may still wait when the simulation
ends. The checks called such a run "still retry_wait long after it fell due" (seed 23 of
a quarter day of 1,000 jobs: a retry due 24 s before the end, resource net full); they
now allow it while every slot was taken since the retry fell due, and only then."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import Facts, check
from chronod.sim.scenario import Config
from tests.sim.job_docs import EXACT

START = datetime.fromisoformat("2025-06-01T23:57:00+00:00")
BASE = {**EXACT, "resource": "db"}  # one slot
FLAKY = {**BASE, "id": "flaky", "schedule": "58 23 * * *", "retry": {"attempts": 2, "backoff_s": 120}}
FIRST = START.replace(minute=58)
HOG = {**BASE, "id": "hog", "schedule": "59 23 * * *"}  # takes the slot at 23:59


def run(monkeypatch: pytest.MonkeyPatch, hog_s: float):
    # flaky fails at 23:58:10; its retry falls due at 00:00:10, the slot the hog's
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (10.0, 1) if plan.id == "flaky" else (hog_s, 0))
    cfg = Config(days=0.06, jobs=2, seed=1, faults=frozenset(), job_docs=(FLAKY, HOG), start=START)
    return Simulation(cfg).run()


def test_a_retry_waiting_for_a_slot_taken_to_the_end_is_not_late(monkeypatch: pytest.MonkeyPatch):
    out = run(monkeypatch, 7200.0)  # the hog holds the slot past the end (01:23)
    try:
        (row,) = [r for r in out.store.runs("flaky") if r.scheduled_at == FIRST]
        assert row.state == "retry_wait" and row.next_attempt_at < out.end, row
        assert Facts(out).retry_pending(row.run_id)
        assert not {
            name: bad[0].what for name, bad in check(out, ["one_terminal_state", "audit_agrees"]).items() if bad
        }
    finally:
        out.close()


def test_a_retry_with_a_free_slot_is_not_excused(monkeypatch: pytest.MonkeyPatch):
    out = run(monkeypatch, 600.0)  # the slot is free from 00:09
    try:
        (row,) = [r for r in out.store.runs("flaky") if r.scheduled_at == FIRST]
        assert row.state == "failed", row  # its retry ran, and failed
        facts = Facts(out)
        assert not facts.slots_full("flaky", out.versions["flaky"][-1].spec, row.scheduled_at)
    finally:
        out.close()
