"""Under `overlap: forbid` a run waiting for its next attempt is still going (its retry
always starts), for an occurrence that waited for a slot of its resource as for one that
falls due. Seed 100 of two days of 300 jobs found two occurrences of a job in its
resource's line: the first took the slot and failed, and the second took the slot next
while the first waited for its retry; the retries then ran beside the line, and one, itself
waiting for a slot, was recorded skipped_overlap with its failed attempt forgotten."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config

START = datetime.fromisoformat("2025-06-01T23:57:30+00:00")
BASE = {
    "owner": "ops",
    "idempotency_class": "idempotent",
    "resource": "db",  # one slot
    "catchup": "all",
    "catchup_window_s": 3600,
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
HOG = {**BASE, "id": "hog", "schedule": "58 23 * * *", "command": "true"}  # holds the slot 23:58-00:01:30
FAILING = {
    **BASE,
    "id": "failing",
    "schedule": "* 0 * * *",  # 00:00 and 00:01 wait in the line behind the hog
    "command": "false",
    "overlap": "forbid",
    "retry": {"attempts": 3, "backoff_s": 20, "max_backoff_s": 20},
}


def test_a_run_in_its_resources_line_waits_while_the_one_before_it_waits_for_its_retry(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (210.0, 0) if plan.id == "hog" else (1.0, 1))
    cfg = Config(days=0.01, jobs=2, seed=1, faults=frozenset(), job_docs=(HOG, FAILING), start=START)
    sim = Simulation(cfg)
    sim.events = []  # no pause nor manual run: the resource alone holds the line
    out = sim.run()
    try:
        procs = sorted((p for p in out.world.procs.values() if p.job_id == "failing"), key=lambda p: p.started_mono)
        order = [(p.run_id, p.attempt) for p in procs]
        late = [p for p in procs if p.attempt == 1 and (p.started_wall - p.scheduled_at).total_seconds() > 60]
        assert late, order  # an occurrence did wait in the resource's line behind the hog
        for (a, n), (b, m) in zip(order, order[1:]):
            if n < 3:
                assert (b, m) == (a, n + 1), f"{b} attempt {m} started while {a} waited for attempt {n + 1}"
        rows = [r for r in out.store.runs("failing") if r.started_at is not None]
        assert {r.state for r in rows} <= {"failed", "running", "retry_wait"}, sorted((r.state, r.error) for r in rows)
        names = ["one_terminal_state", "reason_truth", "resource_limit_held"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()


WINDOWED = {
    **FAILING,
    "id": "windowed",
    "schedule": "* * * * *",
    "resource": None,
    "catchup_window_s": 300,
    "blackout": "defer",
    "retry": {"attempts": 2, "backoff_s": 120, "max_backoff_s": 120},
}
WINDOW = {"name": "swap", "reason": "CHG-5: disk swap", "cron": "6 0 * * *", "duration": "5m", "jobs": ["windowed"]}


def test_a_retry_a_window_defers_keeps_its_run_going_for_the_line_behind_it(monkeypatch: pytest.MonkeyPatch):
    """A stall leaves a backlog; its first occurrence fails and its retry falls due inside a
    maintenance window, which defers it to the window's end. The occurrences behind it run
    out of catch-up window meanwhile: skipped_overlap is true, their line waited for a run
    that was still going (seed 101 of two days of 300 jobs: reason_truth called it false)."""
    from chronod.sim.world import Event

    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (8.0, 1))
    doc = {k: v for k, v in WINDOWED.items() if v is not None}
    start = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
    # 0.07 days: the invariants judge what fell due an hour (SETTLE_S) before the end
    cfg = Config(days=0.07, jobs=1, seed=1, faults=frozenset(), job_docs=(doc,), blackouts=(WINDOW,), start=start)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 130.5, "stall", {"seconds": 150.0})]  # 00:02:10-00:04:40
    out = sim.run()
    try:
        rows = sorted(out.store.runs("windowed"), key=lambda r: r.scheduled_at)
        expired = [r for r in rows if r.state == "skipped_overlap" and "past catchup_window_s" in (r.error or "")]
        assert expired, [(r.scheduled_at.strftime("%H:%M"), r.state, r.error) for r in rows]
        names = ["one_terminal_state", "reason_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()


def test_a_retry_that_waited_in_its_resources_line_through_an_outage_is_not_waited_for_after_it_ran(
    monkeypatch: pytest.MonkeyPatch,
):
    """A retry waits for a slot behind a hog; the database goes away and comes back
    meanwhile, and the reconnect reads every stored pending run again, the retry's too.
    Once the retry has run, the job's next occurrence starts: it is not skipped behind
    "previous run ... (waiting to start attempt 2)" (seed 103 of two days of 300 jobs: the
    reconnect tracked a second copy of the waiting retry, which the line never took)."""
    from chronod.sim.world import Event

    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (600.0, 0) if plan.id == "hog" else (1.0, 1))
    hog = {**HOG, "schedule": "30 58 23 * * *"}  # holds the slot 23:58:30-00:08:30
    retried = {
        **FAILING,
        "id": "retried",
        "schedule": "0 12,58 0,23 * * *",  # 23:58 (its retry waits for the slot), then 00:12
        "retry": {"attempts": 2, "backoff_s": 60, "max_backoff_s": 60},
    }
    start = datetime.fromisoformat("2025-06-01T23:57:30+00:00")
    cfg = Config(days=0.07, jobs=2, seed=1, faults=frozenset(), job_docs=(hog, retried), start=start)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 200.0, "outage", {"seconds": 30.0})]  # 00:00:50, the retry in line
    out = sim.run()
    try:
        rows = {r.scheduled_at.strftime("%H:%M"): r for r in out.store.runs("retried")}
        first, second = rows["23:58"], rows["00:12"]
        assert first.state == "failed" and first.attempts == 2, (first.state, first.attempts, first.error)
        assert second.state == "failed" and second.attempts == 2, (second.state, second.error)
        names = ["one_terminal_state", "reason_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()


def test_two_slots_freed_at_once_start_one_run_of_a_forbid_job_not_two(monkeypatch: pytest.MonkeyPatch):
    """Both slots of `net` free in one instant while two occurrences of a forbid job wait
    in its line: one starts, the other is skipped_overlap; they never run side by side
    (each run's slot was checked against the runs going before any of the turn started)."""
    hogs = [
        {**BASE, "id": f"hog{i}", "schedule": "30 58 23 * * *", "command": "true", "resource": "net"} for i in (1, 2)
    ]
    forbid = {**FAILING, "id": "forbid", "schedule": "0 0,1 0 * * *", "resource": "net", "retry": {"attempts": 1}}
    monkeypatch.setattr(
        driver, "duration", lambda plan: lambda rng: (300.0, 0) if plan.id.startswith("hog") else (60.0, 0)
    )
    start = datetime.fromisoformat("2025-06-01T23:57:30+00:00")
    cfg = Config(days=0.07, jobs=3, seed=1, faults=frozenset(), job_docs=(*hogs, forbid), start=start)
    sim = Simulation(cfg)
    sim.events = []
    out = sim.run()
    try:
        procs = sorted((p for p in out.world.procs.values() if p.job_id == "forbid"), key=lambda p: p.started_mono)
        waited = [p for p in procs if p.started_wall.strftime("%H:%M") == "00:03"]
        assert len(waited) == 1, [(p.run_id, p.started_wall) for p in procs]  # the hogs held both slots until 00:03:30
        for a, b in zip(procs, procs[1:]):
            assert b.started_mono >= a.end_mono(), f"{b.run_id} started while {a.run_id} still ran"
        names = ["one_terminal_state", "reason_truth", "resource_limit_held"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()


ONCE = {
    **WINDOWED,
    "id": "once",
    "schedule": "0 0 * * *",
    "retry": {"attempts": 2, "backoff_s": 60, "max_backoff_s": 60},
}


def _held_retry(monkeypatch: pytest.MonkeyPatch, duration: str) -> Any:
    # once's 00:00 run fails at 00:00:08; its retry falls due at 00:01:08, inside a window
    # that opens at 00:01
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (8.0, 1))
    doc = {k: v for k, v in ONCE.items() if v is not None}
    window = {**WINDOW, "cron": "1 0 * * *", "duration": duration, "jobs": ["once"]}
    start = datetime.fromisoformat("2025-06-01T23:59:00+00:00")
    cfg = Config(days=0.07, jobs=1, seed=1, faults=frozenset(), job_docs=(doc,), blackouts=(window,), start=start)
    sim = Simulation(cfg)
    sim.events = []
    return sim.run()


def test_a_retry_a_window_holds_past_the_end_may_still_wait(monkeypatch: pytest.MonkeyPatch):
    """Its retry falls due inside a maintenance window that is still open when the
    simulation ends: it waits for the window's end, whatever the policy (seed 70 of a
    quarter day of 1,000 jobs: one_terminal_state called it "still retry_wait long after it
    fell due", and audit_agrees blamed `missed` for not listing it)."""
    out = _held_retry(monkeypatch, "3h")
    try:
        row = min(out.store.runs("once"), key=lambda r: r.scheduled_at)
        assert row.state == "retry_wait" and row.attempts == 1, (row.state, row.attempts, row.error)
        names = ["one_terminal_state", "audit_agrees"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()


def test_a_retry_left_waiting_after_its_window_ended_is_still_caught(monkeypatch: pytest.MonkeyPatch):
    from chronod.daemon.admission import Admission

    real = Admission.holds_back

    def drops_retries(self: Admission, job: Any, run: Any, next_run: Any, pauses: bool = True) -> bool:
        return run.state == "retry_wait" or real(self, job, run, next_run, pauses)  # a wrong daemon

    monkeypatch.setattr(Admission, "holds_back", drops_retries)
    out = _held_retry(monkeypatch, "10m")
    try:
        bad = check(out, ["one_terminal_state"])["one_terminal_state"]
        assert bad and "still retry_wait" in bad[0].what, bad
    finally:
        out.close()


def test_an_occurrence_queued_behind_a_retry_waiting_for_a_slot_is_asked_about_as_behind_its_line(
    monkeypatch: pytest.MonkeyPatch,
):
    """A catch-up line waits behind its head's retry, and the retry waits for the slot a hog
    holds. `did-it-run` about an occurrence queued in that line names no resource: its line
    holds it, as a run going would (seed 28 of a quarter day of 1,000 jobs: audit_truth
    took the retry for no run at all and called the answer wrong)."""
    from chronod.sim.world import Event

    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1800.0, 0) if plan.id == "hog" else (1.0, 1))
    hog = {**HOG, "schedule": "30 0 0 * * *"}  # holds the slot 00:00:30-00:30:30
    # 00:00 fails at once, and its retry falls due at 00:07:01, then waits for the slot
    retry = {"attempts": 2, "backoff_s": 420, "max_backoff_s": 420}
    line = {**FAILING, "id": "line", "catchup_window_s": 300, "retry": retry}
    start = datetime.fromisoformat("2025-06-01T23:59:30+00:00")
    cfg = Config(days=0.05, jobs=2, seed=1, faults=frozenset(), job_docs=(hog, line), start=start)
    sim = Simulation(cfg)
    # chronod is down 00:00:45-00:02:15: 00:01 and 00:02 are a backlog, and it drains behind
    # 00:00, which waits for its retry; those due after it queue behind it and wait five
    # minutes each, so that when `did-it-run` is asked, at 00:09:45, the oldest one pending
    # fell due at 00:05, with chronod up
    sim.events = [Event(sim.t0 + 75.0, "crash", {"calls": 0, "downtime": 90.0})]
    out = sim.run()
    try:
        first = min((p for p in out.probes if p.job == "line"), key=lambda p: (p.at, p.fire_at))
        assert first.fire_at.strftime("%H:%M") == "00:05" and first.going == first.limit, first
        assert first.earlier_pending and first.hold_kind is None, first
        names = ["one_terminal_state", "audit_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()
