"""In a burst longer than one wake-up's time slice, no wake-up records an ending before
it starts the runs it owes, also once the endings have waited their bound
(ENDINGS_WAIT_MAX_S): the wake-up that records them starts its runs first. Recorded
before its starts, the endings of a burst's first runs held its last ones back (1,000
jobs due in one second: 687 endings recorded while the last 100 runs waited, half a
second).

In-process on a fake clock: the real `Daemon` on the real SQLite store, the simulated
runner, each launch taking 12 ms of the clock (a slice of 0.5 s holds one chunk of 50)."""

from __future__ import annotations

import random
from datetime import datetime, timezone

from chronod.core.clock import FakeClock
from chronod.daemon.startlimit import ENDINGS_WAIT_MAX_S
from chronod.daemon.waker import Wakeups
from chronod.sim.world import SimRunner, World
from chronod.specfile import load_registry
from chronod.store.sql import SqlStore
from tests.integration.daemon_helpers import job, jobs_file, stepped_daemon, write_jobs

START = datetime(2026, 3, 2, 12, 0, 30, tzinfo=timezone.utc)
JOBS = 200
LAUNCH_S = 0.012


class Waker:
    stop_requested = False


class Slow(SimRunner):
    """The simulated runner, a launch taking LAUNCH_S of the clock; the order of events."""

    def __init__(self, *args, clock: FakeClock, events: list[str]) -> None:
        super().__init__(*args)
        self.clock, self.events = clock, events

    def launch(self, req):
        self.clock.advance(LAUNCH_S)
        self.events.append("start")
        return super().launch(req)


class Watched:
    """The store; the endings it records join the order of events."""

    def __init__(self, store: SqlStore, events: list[str]) -> None:
        self.store, self.events = store, events

    def finish_many(self, endings, token):
        self.events.append("end")
        return self.store.finish_many(endings, token)

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)


def test_a_burst_starts_every_run_it_owes_before_recording_an_ending(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "a.yaml", jobs_file(*(job(f"j{i:03d}", "1 12 * * *", "true") for i in range(JOBS))))
    clock = FakeClock(START, mono=1000.0)
    world = World(clock, random.Random(1))
    for i in range(JOBS):
        world.durations[f"j{i:03d}"] = lambda rng: (0.05, 0)  # each ends long before the burst is started
    events: list[str] = []
    sql = SqlStore(str(tmp_path / "chrono.db"), now=clock.now)
    sql.upgrade()
    runner = Slow(world, "a", str(tmp_path), clock=clock, events=events)
    d = stepped_daemon(
        Watched(sql, events), runner, clock, lambda: load_registry([reg], now=clock.now(), secure=False), Waker()
    )
    d.start()
    clock.advance(30)  # 12:01:00: every job falls due
    wakeups: list[list[str]] = []  # the events of each wake-up
    while sum(w.count("start") for w in wakeups) < JOBS and len(wakeups) < 20:
        events.clear()
        d.on_wakeup(Wakeups(children=runner.ended(d.starter.handles())))
        wakeups.append(list(events))
    assert sum(w.count("start") for w in wakeups) == JOBS
    assert len(wakeups) * 0.5 > ENDINGS_WAIT_MAX_S, "the burst outlasts the endings' bound"
    assert any("end" in w for w in wakeups), "the endings are recorded during the burst, once they waited their bound"
    for n, w in enumerate(wakeups):
        assert "start" not in w or "end" not in w[: w.index("start")], (
            f"wake-up {n} recorded endings before starting its {w.count('start')} runs"
        )
