"""A resource's slot never stays free while a run that could take it waits behind runs a
maintenance window holds (seed 1 of a day of 1,000 jobs found it: `reason_truth`,
"skipped_resource, but resource net had a free slot"). A slot given to a held run is not
taken, and went to nobody else until the next wake-up, one held run at a time."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import Facts, check
from chronod.sim.scenario import Config

START = datetime.fromisoformat("2025-06-01T23:59:00+00:00")
BASE = {
    "owner": "ops",
    "command": "true",
    "idempotency_class": "idempotent",
    "resource": "db",  # one slot
    "catchup": "all",
    "catchup_window_s": 3600,
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
HOG = {**BASE, "id": "hog", "schedule": "0 0 * * *"}  # holds the slot 00:00-00:10
HELD = {**BASE, "id": "held", "schedule": "* * * * *", "blackout": "defer"}  # joins the line every minute
FREE = {**BASE, "id": "free", "schedule": "5 0 * * *"}  # behind five of held's, ahead of two
WINDOW = {"name": "swap", "reason": "CHG-3: disk swap", "cron": "8 0 * * *", "duration": "30m", "jobs": ["held"]}


def test_a_slot_goes_past_the_held_runs_in_line_to_one_that_can_start(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (600.0 if plan.id == "hog" else 1.0, 0))
    cfg = Config(
        days=0.03, jobs=3, seed=1, faults=frozenset(), job_docs=(HOG, HELD, FREE), blackouts=(WINDOW,), start=START
    )
    out = Simulation(cfg).run()
    try:
        procs = {p.job_id: p for p in sorted(out.world.procs.values(), key=lambda p: -p.started_mono)}
        hog, free = procs["hog"], procs["free"]
        freed = out.world.wall_hull(hog.started_mono, hog.end_mono())[1]
        # the held runs from 00:01 to 00:07 were in line when the window opened at 00:08;
        # the slot the hog leaves at 00:10 goes to `free` at once, not minutes later
        waited = (free.started_wall - freed).total_seconds()
        assert 0 <= waited < 1, f"free started {waited:.1f}s after the slot was freed"
        assert not {name: bad[:1] for name, bad in check(out, ["reason_truth", "resource_limit_held"]).items() if bad}
    finally:
        out.close()


def test_a_run_a_window_held_while_a_slot_was_free_and_then_found_none_was_skipped_for_its_resource(
    monkeypatch: pytest.MonkeyPatch,
):
    # seed 1 of a day of 1,000 jobs: job00881's 20:30 occurrence fell due inside a window
    # while resource net had a free slot, joined the line when the window ended, and got no
    # slot before its catch-up window ran out. It waited for no slot while the window held
    # it: skipped_resource is true, and the check that called it false was wrong.
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1800.0 if plan.id == "hog" else 1.0, 0))
    late = {**HOG, "schedule": "10 0 * * *"}  # holds the slot 00:10-00:40
    held = {**HELD, "schedule": "0 0 * * *", "catchup_window_s": 1200}  # due 00:00, gives up at 00:20
    window = {**WINDOW, "cron": "59 23 * * *", "duration": "12m"}  # holds it 23:59-00:11
    start = datetime.fromisoformat("2025-06-01T23:58:00+00:00")
    cfg = Config(days=0.07, jobs=2, seed=1, faults=frozenset(), job_docs=(late, held), blackouts=(window,), start=start)
    out = Simulation(cfg).run()
    try:
        states = {r.fire_at.strftime("%H:%M"): r.state for r in Facts(out).rows.values() if r.job_id == "held"}
        assert states["00:00"] == "skipped_resource", states
        assert not {name: bad[:1] for name, bad in check(out, ["reason_truth"]).items() if bad}
    finally:
        out.close()


def test_a_daemon_that_skips_runs_for_a_resource_with_free_slots_is_caught(monkeypatch: pytest.MonkeyPatch):
    from chronod.daemon.registry import Registry

    monkeypatch.setattr(Registry, "limit", lambda self, resource: 0)  # every slot taken, always
    job = {**BASE, "id": "lonely", "schedule": "*/10 * * * *", "catchup_window_s": 300}
    start = datetime.fromisoformat("2025-06-01T23:58:00+00:00")
    out = Simulation(Config(days=0.07, jobs=1, seed=1, faults=frozenset(), job_docs=(job,), start=start)).run()
    try:
        bad = check(out, ["reason_truth"])["reason_truth"]
        assert bad and "had a free slot" in bad[0].what, bad
    finally:
        out.close()
