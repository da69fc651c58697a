"""A `catchup: all`, `overlap: forbid` job's catch-up line waits while its head waits for a
slot of the job's resource: the next occurrence joins the resource's line only once the
one before it has started. Before, the head sent to the resource's line no longer counted
as going, so the whole backlog joined the resource's line at once; the slots, freed
together, went to two of them in one turn, and each given one while the one before it ran
ended `skipped_overlap` (seed 81 of a quarter day of 1,000 jobs: four of five). An
occurrence that runs out of its catch-up window in the line behind a head waiting for a
slot ends `skipped_resource`, naming the head and the resource, not a run going."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from chronod.core.model import RunState
from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event
from tests.sim.job_docs import DEFER_LINE, EXACT

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
LINE = {**DEFER_LINE, "schedule": "*/2 * * * *", "resource": "net"}  # net: two slots
HOGS = tuple({**EXACT, "id": f"hog{i}", "schedule": "30 0 * * *", "resource": "net"} for i in (1, 2))
WINDOW = {"name": "swap", "reason": "CHG-9: disk swap", "cron": "20 0 * * *", "duration": "11m", "jobs": ["line"]}


def _run(monkeypatch: pytest.MonkeyPatch, line_s: float, window_s: int, stall: bool = False) -> tuple[list, list, Any]:
    # the window holds line's 00:20-00:30 occurrences and ends at 00:31; the hogs hold both
    # slots of net from 00:30 to 00:35, so the released line's head waits for a slot
    monkeypatch.setattr(
        driver, "duration", lambda plan: lambda rng: (300.0 if plan.id.startswith("hog") else line_s, 0)
    )
    doc = {**LINE, "catchup_window_s": window_s}
    cfg = Config(days=0.05, jobs=3, seed=1, faults=frozenset(), job_docs=(doc, *HOGS), blackouts=(WINDOW,), start=START)
    sim = Simulation(cfg)
    if stall:  # chronod freezes 00:31:30-00:36, past the deadlines of the head and the one behind it
        sim.events = [Event(sim.t0 + 31.5 * 60, "stall", {"seconds": 270.0})]
    out = sim.run()
    rows = [r for r in out.store.runs("line", newest_first=False) if START + timedelta(minutes=20) <= r.scheduled_at]
    procs = sorted((p for p in out.world.procs.values() if p.job_id == "line"), key=lambda p: p.started_mono)
    return rows, procs, out


def test_a_released_line_starts_one_after_another_behind_its_head_waiting_for_a_slot(
    monkeypatch: pytest.MonkeyPatch,
):
    rows, procs, out = _run(monkeypatch, 20.0, 86400)
    try:
        held = [r for r in rows if r.scheduled_at < START + timedelta(minutes=31)]
        assert len(held) == 6, [r.scheduled_at for r in held]
        assert [(r.scheduled_at.strftime("%H:%M"), r.state) for r in held] == [
            (r.scheduled_at.strftime("%H:%M"), RunState.SUCCEEDED) for r in held
        ]
        order = [p.scheduled_at for p in procs if p.scheduled_at in {r.scheduled_at for r in held}]
        assert order == sorted(order) and len(order) == 6, order
        first = min(p.started_wall for p in procs if p.scheduled_at == held[0].scheduled_at)
        assert first >= START + timedelta(minutes=35), first  # it waited for a slot
        names = ["one_terminal_state", "catchup_all_in_order", "reason_truth", "audit_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()


def test_an_occurrence_that_waits_past_its_window_behind_a_head_waiting_for_a_slot_is_skipped_for_the_resource(
    monkeypatch: pytest.MonkeyPatch,
):
    # a catch-up window of 12 minutes: the 00:20 head waits from 00:31 for the slots the
    # hogs hold until 00:35 and its window ends at 00:32, the 00:22 behind it at 00:34; when
    # chronod comes back at 00:36 the line's rule decides the 00:22 while its head is
    # still in the resource's line
    rows, procs, out = _run(monkeypatch, 20.0, 720, stall=True)
    try:
        by_at = {r.scheduled_at.strftime("%H:%M"): r for r in rows}
        second = by_at["00:22"]
        assert second.state == RunState.SKIPPED_RESOURCE, (second.state, second.error)
        assert by_at["00:20"].run_id in (second.error or "") and "'net'" in (second.error or ""), second.error
        assert by_at["00:20"].state == RunState.SKIPPED_RESOURCE, (by_at["00:20"].state, by_at["00:20"].error)
        names = ["one_terminal_state", "reason_truth", "audit_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()
