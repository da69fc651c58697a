"""A catch-up backlog that joins its resource's line in the wake-up that stores it says so
in its rows, so that the next start puts it back in the line in its place (by fire time)
instead of reading it as occurrences that fell due while chronod was down. Seed 112 of
two days of 300 jobs: a stall left a backlog of an every-20-s job waiting for a slot;
its rows were written with the wake-up's other writes, after the note that they wait
(which found no row yet), so after a crash they went through the outage's catch-up
behind the occurrences read back as waiting, and a newer occurrence took the slot that
freed: catchup_all_in_order, "occurrence of 12:58:20 started after the one of 13:01:40"."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-01T23:59:50+00:00")
BASE = {
    "owner": "ops",
    "command": "true",
    "idempotency_class": "idempotent",
    "resource": "net",  # two slots
    "catchup": "all",
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
HOGS = tuple({**BASE, "id": f"hog{i}", "schedule": "0 0 * * *", "catchup_window_s": 3600} for i in (1, 2))
TICK = {**BASE, "id": "tick", "schedule": "*/20 * * * * *", "overlap": "allow", "catchup_window_s": 600}


def test_a_backlog_waiting_for_a_slot_keeps_its_place_in_line_across_a_crash(monkeypatch: pytest.MonkeyPatch):
    # the hogs hold both slots from 00:00 (hog1 to 00:12, during the down); each tick takes 5 s
    lengths = {"hog1": 720.0, "hog2": 3000.0}
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (lengths.get(plan.id, 5.0), 0))
    cfg = Config(days=0.07, jobs=3, seed=1, faults=frozenset(), job_docs=(*HOGS, TICK), start=START)
    sim = Simulation(cfg)
    sim.events = [
        Event(sim.t0 + 200, "stall", {"seconds": 150.0}),  # 00:03:10-00:05:40: the ticks due meanwhile are a backlog
        Event(sim.t0 + 550, "crash", {"calls": 0, "downtime": 270.0}),  # down 00:09-00:13:30
    ]
    out = sim.run()
    try:
        names = ["catchup_all_in_order", "resource_limit_held", "one_terminal_state", "reason_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
        ticks = sorted((p for p in out.world.procs.values() if p.job_id == "tick"), key=lambda p: p.started_mono)
        assert ticks, "no tick ever got a slot"
        # 00:03:20 waited past its window (00:13:20) when chronod came back; 00:03:40 is next in line
        assert ticks[0].scheduled_at.strftime("%H:%M:%S") == "00:03:40", [
            (p.scheduled_at.strftime("%H:%M:%S"), p.started_wall.strftime("%H:%M:%S")) for p in ticks[:5]
        ]
    finally:
        out.close()


def test_runs_of_several_jobs_waiting_for_a_slot_across_a_crash_get_them_in_the_order_they_fell_due(
    monkeypatch: pytest.MonkeyPatch,
):
    """The runs that waited in a line are read back after a restart job by job: the first
    job read must not take every free slot for its runs ahead of an older run of another."""
    net = {**BASE, "catchup_window_s": 3600, "overlap": "allow"}  # two slots
    hogs = tuple({**net, "id": f"hog{i}", "schedule": "0 0 * * *"} for i in (1, 2))
    first = {**net, "id": "first", "schedule": "1,3 0 * * *"}  # read back first: it waited longest
    other = {**net, "id": "other", "schedule": "2 0 * * *"}
    # the hogs hold both slots from 00:00 to 00:07, while chronod is down; the others take a minute
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (420.0 if "hog" in plan.id else 60.0, 0))
    cfg = Config(days=0.05, jobs=4, seed=1, faults=frozenset(), job_docs=(*hogs, first, other), start=START)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 250, "crash", {"calls": 0, "downtime": 300.0})]  # down 00:04-00:09
    out = sim.run()
    try:
        names = ["resource_limit_held", "one_terminal_state", "reason_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
        started = sorted((p for p in out.world.procs.values() if "hog" not in p.job_id), key=lambda p: p.started_mono)
        assert [p.scheduled_at.strftime("%H:%M") for p in started] == ["00:01", "00:02", "00:03"], [
            (p.job_id, p.scheduled_at.strftime("%H:%M"), p.started_wall.strftime("%H:%M:%S")) for p in started
        ]
    finally:
        out.close()
