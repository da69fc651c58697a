"""The account check decides at each launch, on the simulated clock: a job whose account
is locked ends `skipped_account` and never starts; once unlocked, its next occurrence
starts; a job without `user:` is never asked about; an account that expires at midnight
UTC is refused from that instant on.

In-process: the real `Daemon` on the real SQLite store, the simulated runner, and the
shadow file's answers given as values (the real file is read in test_locked_accounts)."""

from __future__ import annotations

import random
from datetime import date, datetime, timezone

from chronod.core.accounts import Account
from chronod.core.clock import FakeClock
from chronod.daemon.waker import Wakeups
from chronod.sim.world import SimRunner, World
from chronod.specfile import load_registry
from chronod.store.api import StoreError
from chronod.store.sql import SqlStore
from tests.integration.daemon_helpers import job, jobs_file, stepped_daemon, write_jobs

START = datetime(2026, 3, 2, 23, 57, 30, tzinfo=timezone.utc)


class Waker:
    stop_requested = False


class Shadow:
    """What the shadow file says, set by the test."""

    def __init__(self) -> None:
        self.accounts: dict[str, Account] = {}
        self.asked: list[str] = []

    def account(self, user: str) -> Account | None:
        self.asked.append(user)
        return self.accounts.get(user)


def test_a_locked_accounts_occurrence_is_skipped_and_the_next_one_runs_once_unlocked(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(
        reg / "a.yaml",
        jobs_file(job("report", "* * * * *", "true", user="alice"), job("rootjob", "* * * * *", "true")),
    )
    clock = FakeClock(START, mono=1000.0)
    world = World(clock, random.Random(1))
    world.durations["report"] = world.durations["rootjob"] = lambda rng: (5.0, 0)  # done within the minute
    store = SqlStore(str(tmp_path / "chrono.db"), now=clock.now)
    store.upgrade()
    shadow = Shadow()
    shadow.accounts["alice"] = Account("alice", locked=True)
    runner = SimRunner(world, "a", str(tmp_path))
    load = lambda: load_registry([reg], now=clock.now(), secure=False)  # noqa: E731
    d = stepped_daemon(store, runner, clock, load, Waker(), accounts=shadow)
    d.start()

    def step_to_next_minute():
        clock.advance(10)  # the runs of this minute end
        d.on_wakeup(Wakeups(children=runner.ended(list(runner.watching.values()))))
        clock.advance(50)
        d.on_wakeup(Wakeups())

    clock.advance(31)  # 23:58:01
    d.on_wakeup(Wakeups())
    started = {p.job_id for p in world.procs.values()}
    assert started == {"rootjob"}
    (skipped,) = store.runs("report", states=["skipped_account"])
    assert skipped.error.startswith("account alice is locked (usermod -L)")
    assert "rootjob" not in shadow.asked  # no user: nothing to ask

    shadow.accounts["alice"] = Account("alice", expires=date(2026, 3, 3))
    step_to_next_minute()  # 23:59:01: not expired yet
    assert sum(p.job_id == "report" for p in world.procs.values()) == 1
    step_to_next_minute()  # 00:00:01 on the expiry day
    assert sum(p.job_id == "report" for p in world.procs.values()) == 1
    last = [r for r in _runs(store, "report") if r.state != "pending"][-1]
    assert last.state == "skipped_account" and "expired on 2026-03-03" in (last.error or "")


def _runs(store, job_id):
    return sorted(store.runs(job_id), key=lambda r: r.scheduled_at)


class Unplugged:
    """The store, or (`down`) a database that does not answer."""

    def __init__(self, store: SqlStore) -> None:
        self.store, self.down = store, False

    def __getattr__(self, name: str) -> object:
        value = getattr(self.store, name)
        if callable(value) and self.down:
            raise StoreError("connection refused")
        return value


def test_the_account_check_holds_while_the_database_is_unreachable_and_its_skip_is_replayed(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "a.yaml", jobs_file(job("report", "* * * * *", "true", user="alice", run_on="each")))
    clock = FakeClock(START, mono=1000.0)
    world = World(clock, random.Random(1))
    world.durations["report"] = lambda rng: (5.0, 0)
    sql = SqlStore(str(tmp_path / "chrono.db"), now=clock.now)
    sql.upgrade()
    store = Unplugged(sql)
    shadow = Shadow()
    runner = SimRunner(world, "a", str(tmp_path))
    load = lambda: load_registry([reg], now=clock.now(), secure=False)  # noqa: E731
    d = stepped_daemon(store, runner, clock, load, Waker(), accounts=shadow)
    d.start()
    clock.advance(31)  # 23:58:01: runs online
    d.on_wakeup(Wakeups())
    clock.advance(10)
    d.on_wakeup(Wakeups(children=runner.ended(list(runner.watching.values()))))
    assert sum(p.job_id == "report" for p in world.procs.values()) == 1

    shadow.accounts["alice"] = Account("alice", locked=True)
    store.down = True
    d.link.went_offline(StoreError("connection refused"))
    clock.advance(50)  # 23:59:01, offline
    d.on_wakeup(Wakeups())
    d.on_wakeup(Wakeups())
    assert sum(p.job_id == "report" for p in world.procs.values()) == 1, "a locked account's job started offline"

    store.down = False
    clock.advance(120)
    for _ in range(3):
        d.on_wakeup(Wakeups())
    skipped = sql.runs("report", states=["skipped_account"])
    assert skipped and "is locked" in (skipped[0].error or ""), [(r.state, r.error) for r in sql.runs("report")]
