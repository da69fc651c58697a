"""The overlap rule is the same with the database and without it: an `each` job with
`overlap: replace` that falls due during an outage terminates its running run before
the new one starts, as it does online (it used to start beside it).

In-process on a fake clock: the real `Daemon` on the real SQLite store, the simulated
runner, and an outage made by taking the node offline."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from chronod.core.clock import FakeClock
from chronod.daemon.waker import Wakeups
from chronod.sim.world import SimRunner, World
from chronod.specfile import load_registry
from chronod.store.api import StoreError
from chronod.store.sql import SqlStore
from tests.integration.daemon_helpers import job, jobs_file, stepped_daemon, write_jobs

START = datetime(2026, 3, 2, 12, 0, 30, tzinfo=timezone.utc)


class Waker:
    stop_requested = False


class Unplugged:
    """The store, or (`down`) a database that does not answer."""

    def __init__(self, store: SqlStore) -> None:
        self.store, self.down = store, False

    def __getattr__(self, name: str) -> object:
        value = getattr(self.store, name)
        if callable(value) and self.down:
            raise StoreError("connection refused")
        return value


def test_replace_terminates_the_running_run_while_the_database_is_unreachable(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "a.yaml", jobs_file(job("sweep", "* * * * *", "true", overlap="replace", run_on="each")))
    clock = FakeClock(START, mono=1000.0)
    world = World(clock, random.Random(1))
    world.durations["sweep"] = lambda rng: (600.0, 0)  # still running when the next minute falls due
    sql = SqlStore(str(tmp_path / "chrono.db"), now=clock.now)
    sql.upgrade()
    store = Unplugged(sql)
    runner = SimRunner(world, "a", str(tmp_path))
    d = stepped_daemon(store, runner, clock, lambda: load_registry([reg], now=clock.now(), secure=False), Waker())
    d.start()
    clock.advance(31)  # 12:01:01: the first occurrence starts with the database
    d.on_wakeup(Wakeups())
    (first,) = [p for p in world.procs.values() if p.job_id == "sweep"]
    assert first.cancelled_mono is None

    store.down = True
    d.link.went_offline(StoreError("connection refused"))
    clock.advance(60)  # 12:02:01, offline: the next occurrence falls due
    d.on_wakeup(Wakeups())  # the retry of the database fails
    d.on_wakeup(Wakeups())  # the due occurrence starts without it
    procs = sorted((p for p in world.procs.values() if p.job_id == "sweep"), key=lambda p: p.started_mono)
    assert len(procs) == 2, "the occurrence due offline starts"
    assert first.cancelled_mono is not None, "overlap: replace left the running run beside the new one"
    assert procs[1].scheduled_at == first.scheduled_at + timedelta(minutes=1)
