"""Occurrences a maintenance window held (`blackout: defer`) when chronod died, read back
by a chronod that carries no such window (the file that defines it was broken when it
started, so it has no last good version of it): they fell due inside the window, not
while chronod was down, so the window's release decides them, under the job's catch-up
policy, and those it does not run are `skipped_blackout`, never `skipped_outage`. Seed 119
of two days of 300 jobs found them recorded `skipped_outage`, as if chronod had been down
when they fell due."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver, scenario
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
BASE = {
    "owner": "ops",
    "command": "true",
    "idempotency_class": "idempotent",
    "schedule": "* * * * *",
    "blackout": "defer",
    "catchup_window_s": 600,
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
FILLER = {**BASE, "id": "filler", "schedule": "0 * * * *", "blackout": "skip"}  # the windows' file
NONE = {**BASE, "id": "none", "catchup": "none"}
LATEST = {**BASE, "id": "latest", "catchup": "latest"}
WINDOW = {
    "name": "swap",
    "reason": "CHG-5: disk swap",
    "cron": "5 0 * * *",
    "duration": "30m",
    "jobs": ["none", "latest"],
}


def restarted_without_the_window(monkeypatch: pytest.MonkeyPatch):
    """The window holds 00:05-00:35; its file breaks at 00:02 (the running chronod keeps its
    last good version); chronod dies at 00:07:30, holding 00:05, 00:06 and 00:07, and starts
    again a minute later without the window."""
    monkeypatch.setattr(scenario, "JOBS_PER_FILE", 1)  # the window's file holds no job held
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1.0, 0))
    cfg = Config(
        days=0.07,
        jobs=3,
        seed=1,
        faults=frozenset(),
        job_docs=(FILLER, NONE, LATEST),
        blackouts=(WINDOW,),
        start=START,
    )
    sim = Simulation(cfg)

    def break_the_windows_file() -> str:
        name = min(sim.registry.files)
        sim.registry.write(name, bad=True)
        return f"broke {name}"

    monkeypatch.setattr(sim.registry, "edit", break_the_windows_file)
    sim.events = [
        Event(sim.t0 + 120.0, "registry"),
        Event(sim.t0 + 450.0, "crash", {"calls": 0, "downtime": 60.0}),
    ]
    return sim.run()


def test_occurrences_held_by_a_window_the_next_chronod_does_not_carry_are_released_as_its_end_would(
    monkeypatch: pytest.MonkeyPatch,
):
    out = restarted_without_the_window(monkeypatch)
    try:
        assert [life.how for life in out.world.lives][:1] == ["crash"]
        held = {"none": {}, "latest": {}}
        for job, rows in held.items():
            for r in out.store.runs(job, newest_first=False):
                if r.scheduled_at.minute in (5, 6, 7) and r.scheduled_at.hour == 0:
                    rows[r.scheduled_at.minute] = (r.state, r.error)
        for job, rows in held.items():
            assert sorted(rows) == [5, 6, 7], (job, rows)
            for minute, (state, error) in rows.items():
                assert state == "skipped_blackout", (job, minute, state, error)
                assert error.startswith("deferred by a maintenance window; "), (job, minute, error)
        assert all("catchup: none" in error for _, error in held["none"].values()), held["none"]
        # under `latest` the occurrence due when chronod came back ran in their place
        ran = [p for p in out.world.procs.values() if p.job_id == "latest" and p.scheduled_at.hour == 0]
        assert any(p.scheduled_at.minute == 8 for p in ran), sorted(p.scheduled_at for p in ran)
        names = ["one_terminal_state", "blackout_honoured", "reason_truth", "audit_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()


def test_occurrences_a_window_still_holds_at_the_end_are_not_late(monkeypatch: pytest.MonkeyPatch):
    """A `defer` job's occurrences that a window holds past the end of the simulation stay
    pending, held (docs/maintenance.md: released when the window ends): they are not "still
    pending long after they fell due". Seed 126 of two days of 300 jobs: a catch-up
    backlog's occurrences met a window of 78 minutes that ended after the simulation, and
    the checks called the first two late."""
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1.0, 0))
    doc = {**LATEST, "schedule": "*/5 * * * *"}
    window = {**WINDOW, "cron": "30 0 * * *", "duration": "90m", "jobs": ["latest"]}  # 00:30-02:00
    # 0.07 days: the end is 01:40:48; the checks judge what fell due up to an hour before it
    cfg = Config(days=0.07, jobs=1, seed=1, faults=frozenset(), job_docs=(doc,), blackouts=(window,), start=START)
    sim = Simulation(cfg)
    sim.events = []
    out = sim.run()
    try:
        held = [r for r in out.store.runs("latest", newest_first=False) if r.state == "pending" and r.error]
        assert [r.scheduled_at.strftime("%H:%M") for r in held][:3] == ["00:30", "00:35", "00:40"], held
        assert all(r.error.startswith("deferred by maintenance window swap") for r in held), held
        assert not {name: bad[0].what for name, bad in check(out, ["one_terminal_state"]).items() if bad}
    finally:
        out.close()
