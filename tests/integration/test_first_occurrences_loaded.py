"""A start takes each new job's first occurrence from its load, which computed it where the
job's file was validated (`load_registry(..., node=...)`, in the workers of a cold start),
and computes it itself only when that one no longer holds: the load took long enough for
it to fire, or the clock stepped back past the load's `now`. Either way it stores and
tracks exactly what a start computing every first occurrence itself would.

In-process, on a fake clock: the real `Daemon` on the real SQLite store, the simulated runner.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest

from chronod.core.clock import FakeClock
from chronod.daemon.occurrences import Occurrences
from chronod.sim.world import SimRunner, World
from chronod.specfile import load_registry
from chronod.store.sql import SqlStore
from tests.integration.daemon_helpers import job, jobs_file, stepped_daemon, write_jobs

START = datetime(2026, 3, 2, 12, 0, 0, 500000, tzinfo=timezone.utc)
JOBS = [
    job("tick", "@every 1s", "true"),
    job("soon", "1 12 * * *", "true"),
    job("spread", "*/10 * * * *", "true", tolerance_s=300, tolerance_reason="spread"),
    job("berlin", "30 2 * * *", "true", timezone="Europe/Berlin", run_on="each"),
    *(job(f"far{i}", f"{i} 4 * * *", "true") for i in range(4)),
    job("boot", "@reboot", "true"),
    job("off", "0 5 * * *", "true", enabled=False),
]


def start(tmp_path, name: str, monkeypatch, *, node: bool, during_load: float = 0.0, step: float = 0.0):
    """A daemon started on its own database over JOBS: its load holds the first occurrences
    when `node`; the load takes `during_load` seconds, or the wall clock steps by `step`
    while it runs. Returns what it stored and tracked, and the jobs whose first
    occurrence it computed itself."""
    reg = tmp_path / f"{name}.d"
    reg.mkdir()
    write_jobs(reg / "a.yaml", jobs_file(*JOBS))
    clock = FakeClock(START, mono=1000.0)
    store = SqlStore(str(tmp_path / f"{name}.db"), now=clock.now)
    store.upgrade()
    runner = SimRunner(World(clock, random.Random(1)), "a", str(tmp_path / name))

    def load():
        got = load_registry([reg], now=clock.now(), secure=False, node=runner.node if node else None)
        clock.advance(during_load)
        clock.jump_wall(step)
        return got

    computed: list[str] = []
    next_run = Occurrences.next_run

    def counted(self, job, after):
        computed.append(job.spec.id)
        return next_run(self, job, after)

    monkeypatch.setattr(Occurrences, "next_run", counted)
    d = stepped_daemon(store, runner, clock, load, _Waker())
    d.start()
    monkeypatch.setattr(Occurrences, "next_run", next_run)
    rows = sorted((r.job_key, r.run_id, r.scheduled_at, r.fire_at) for r in store.pending() if r.state == "pending")
    unstored = [(r.job_key, r.run_id, r.scheduled_at, r.fire_at) for r in d.unstored]
    tracked = sorted((r.job_key, r.run_id, r.fire_at) for r in d.pending.values())
    return (rows, unstored, tracked), sorted(computed)


class _Waker:
    stop_requested = False

    def poke(self) -> None:
        pass


def test_a_start_takes_the_first_occurrences_its_load_computed(tmp_path, monkeypatch):
    computed_here, everything = start(tmp_path, "here", monkeypatch, node=False)
    loaded, none = start(tmp_path, "loaded", monkeypatch, node=True)
    assert loaded == computed_here
    assert none == [], "no first occurrence computed again"
    assert everything == ["berlin", "far0", "far1", "far2", "far3", "soon", "spread", "tick"]
    rows, unstored, _ = loaded
    assert {k for k, *_ in rows} == {"tick", "soon"}, "what fires within a minute stored before READY"
    assert {k for k, *_ in unstored} == {"berlin@a", "spread", "far0", "far1", "far2", "far3"}


@pytest.mark.parametrize(
    ("during_load", "step", "again"),
    [
        (1.5, 0.0, ["tick"]),  # the tick's 12:00:01 fired during the load
        (0.0, -30.0, ["berlin", "far0", "far1", "far2", "far3", "soon", "spread", "tick"]),  # stepped back
        (0.0, 3600.0, ["soon", "spread", "tick"]),  # stepped ahead an hour: the 04:00s still hold
    ],
)
def test_a_first_occurrence_that_no_longer_holds_is_computed_again(tmp_path, monkeypatch, during_load, step, again):
    computed_here, _ = start(tmp_path, "here", monkeypatch, node=False, during_load=during_load, step=step)
    loaded, computed = start(tmp_path, "loaded", monkeypatch, node=True, during_load=during_load, step=step)
    assert loaded == computed_here
    assert computed == again
