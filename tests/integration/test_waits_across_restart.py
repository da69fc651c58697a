"""An occurrence waiting in a line when chronod dies fell due with chronod up: the next
start puts it back in its line, whose rule decides it (it waits its turn inside its
catch-up window), never the outage's catch-up (it used to be recorded skipped_outage,
"fell due while chronod could not run it; catchup: none").

In-process on a fake clock: the real `Daemon` on the real SQLite store, the simulated
runner; a crash is a daemon dropped without stopping, its processes left running."""

from __future__ import annotations

import random
from datetime import datetime, timezone

from chronod.core import blackout
from chronod.core.clock import FakeClock
from chronod.core.model import RunState
from chronod.daemon.waker import Wakeups
from chronod.sim.world import SimRunner, World
from chronod.specfile import load_registry
from chronod.store.sql import SqlStore
from tests.integration.daemon_helpers import job, jobs_file, stepped_daemon, write_jobs

START = datetime(2026, 3, 2, 12, 0, 30, tzinfo=timezone.utc)


class Waker:
    stop_requested = False


def step(d, runner, clock, seconds: float) -> None:
    """Second by second, telling the daemon which of its processes ended."""
    for _ in range(int(seconds)):
        clock.advance(1)
        handles = d.starter.handles()
        done = {id(h) for _, h in runner.exits(set(map(id, handles)), until=clock.monotonic())}
        d.on_wakeup(Wakeups(children=[h for h in handles if id(h) in done]))


def test_a_run_waiting_for_a_slot_when_chronod_dies_waits_its_turn_after_the_restart(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(
        reg / "a.yaml",
        "resources:\n  db: {max_concurrency: 1}\n"
        + jobs_file(
            job("hog", "1 12 * * *", "true", resource="db"),
            job("waiter", "2 12 * * *", "true", resource="db", catchup="none", catchup_window_s=3600),
        ),
    )
    clock = FakeClock(START, mono=1000.0)
    world = World(clock, random.Random(1))
    world.durations["hog"] = lambda rng: (600.0, 0)  # holds the slot until 12:11
    world.durations["waiter"] = lambda rng: (5.0, 0)
    store = SqlStore(str(tmp_path / "chrono.db"), now=clock.now)
    store.upgrade()

    def load():
        return load_registry([reg], now=clock.now(), secure=False)

    runner = SimRunner(world, "a", str(tmp_path))
    d = stepped_daemon(store, runner, clock, load, Waker())
    d.start()
    step(d, runner, clock, 150)  # 12:03:00: the hog runs, the waiter waits for the slot since 12:02
    (row,) = [r for r in store.runs("waiter") if r.state == RunState.PENDING and r.fire_at <= clock.now()]
    assert (row.error or "").startswith(blackout.WAITING_FOR), row.error

    # chronod dies (its processes go on) and is back two minutes later, the hog still running
    clock.advance(120)
    runner = SimRunner(world, "a", str(tmp_path))
    d = stepped_daemon(store, runner, clock, load, Waker())
    d.start()
    step(d, runner, clock, 5)
    again = store.get_run(row.run_id)
    assert again is not None and again.state != RunState.SKIPPED_OUTAGE, again.error
    assert again.state == RunState.PENDING, "the slot is still taken: it waits its turn"

    step(d, runner, clock, 600)  # 12:15: the hog ended at 12:11, the waiter had its turn
    ran = [p for p in world.procs.values() if p.job_id == "waiter"]
    assert [p.scheduled_at for p in ran] == [row.scheduled_at]
    assert store.get_run(row.run_id).state == RunState.SUCCEEDED
