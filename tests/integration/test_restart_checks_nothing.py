"""A start whose definitions are exactly the ones its stored occurrences were last checked
against (the mark stored with the definitions, sealed with the node's key) and whose jobs
table nobody wrote since neither stores the definitions again nor checks each stored
occurrence with its schedule, and compiles a schedule only when it is used; anything else
(an edited job, a pause or another writer, a mark sealed with another key, a crash between
storing new definitions and checking) goes the full way, as every start did before.

In-process: the real `Daemon` on the simulated clock and runner, on SQLite and on the
memory store, restarted on the same database."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest

from chronod.core.clock import FakeClock
from chronod.daemon.filestore import StoredFiles
from chronod.daemon.occurrences import Occurrences
from chronod.daemon.waker import Wakeups
from chronod.sim.world import SimRunner, World
from chronod.specfile import FileCache, load_registry
from chronod.store.memory import MemoryStore
from chronod.store.sql import SqlStore
from tests.integration.daemon_helpers import job, jobs_file, stepped_daemon, write_jobs

START = datetime(2026, 3, 2, 10, 0, 30, tzinfo=timezone.utc)
KEY = b"k" * 32


class Waker:
    stop_requested = False


@pytest.fixture(params=["sqlite", "memory"])
def make_store(request, tmp_path):
    def make(clock):
        if request.param == "memory":
            if not hasattr(make, "memory"):
                make.memory = MemoryStore(now=clock.now)  # one database across restarts
            return make.memory
        store = SqlStore(str(tmp_path / "chrono.db"), now=clock.now)
        store.upgrade()
        return store

    return make


class Counted:
    """What a start did: occurrences checked one by one, definitions stored."""

    def __init__(self, monkeypatch, store) -> None:
        self.checks = 0
        self.syncs = 0
        real_check, real_sync = Occurrences.still_scheduled, store.sync_jobs

        def check(occ, job, run):
            self.checks += 1
            return real_check(occ, job, run)

        def sync(node, specs, fell_due=None):
            self.syncs += 1
            return real_sync(node, specs, fell_due)

        monkeypatch.setattr(Occurrences, "still_scheduled", check)
        monkeypatch.setattr(store, "sync_jobs", sync)


def boot(store, reg, clock, key: bytes = KEY):
    """A new chronod process on `store`: its file cache and marks over the store, as
    `chronod.daemon.main.start` builds them."""
    world = World(clock, random.Random(1))
    runner = SimRunner(world, "a", str(reg.parent))
    marks = StoredFiles(store, runner.node, key)
    files = FileCache(marks)
    d = stepped_daemon(
        store, runner, clock, lambda: load_registry([reg], now=clock.now(), secure=False, cache=files), Waker()
    )
    d.registry.marks = marks
    d.start()
    return d, world, marks


def first_life(tmp_path, make_store):
    """The registry written, a new database, and the first chronod on them, started."""
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write(reg)
    clock = FakeClock(START, mono=1000.0)
    store = make_store(clock)
    d, _, marks = boot(store, reg, clock)
    return reg, clock, store, d, marks


def write(reg, hourly: str = "0 * * * *") -> None:
    write_jobs(
        reg / "a.yaml",
        jobs_file(job("tick", "@every 1s", "true"), job("hourly", hourly, "true"), job("daily", "30 4 * * *", "true")),
    )
    write_jobs(reg / "b.yaml", jobs_file(*(job(f"b{i}", f"{i} 3 * * *", "true") for i in range(20))))


def pending(store) -> dict[str, datetime]:
    return {r.job_id: r.scheduled_at for r in store.pending() if r.trigger == "schedule"}


def test_an_unchanged_restart_checks_no_occurrence_stores_no_definition_and_compiles_only_what_it_uses(
    tmp_path, make_store, monkeypatch
):
    reg, clock, store, d, marks = first_life(tmp_path, make_store)
    d.occurrences.store_some(everything=True)  # the daemon settled: every first occurrence stored
    d.registry.mark_checked()
    assert marks.checked() is not None
    before = pending(store)
    assert set(before) == {"tick", "hourly", "daily", *(f"b{i}" for i in range(20))}

    clock.advance(60)  # down for a minute; the files unchanged
    counted = Counted(monkeypatch, store)
    d2, world, _ = boot(store, reg, clock)
    assert counted.checks == 0 and counted.syncs == 0
    compiled = {j for j, job_ in d2.jobs.items() if job_._schedule is not None}
    assert "daily" not in compiled and "b7" not in compiled  # stored occurrences: no schedule needed
    after = pending(store)
    assert {j: after[j] for j in before if j != "tick"} == {j: before[j] for j in before if j != "tick"}
    d2.occurrences.read_some(everything=True)  # those firing after the next minute are read after READY
    assert {r.job_id: r.scheduled_at for r in d2.pending.values() if r.job_id != "tick"} == {
        j: t for j, t in after.items() if j != "tick"
    }
    # and it fires on: the every-second job at once, the hourly one at 11:00 (compiled then)
    for _ in range(3):
        clock.advance(1)
        d2.on_wakeup(Wakeups())
    assert any(p.job_id == "tick" for p in world.procs.values())
    clock.advance((datetime(2026, 3, 2, 11, 0, 0, tzinfo=timezone.utc) - clock.now()).total_seconds())
    d2.on_wakeup(Wakeups())
    assert any(p.job_id == "hourly" for p in world.procs.values())
    assert pending(store)["hourly"] == datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)


def test_a_schedule_edited_while_down_is_checked_and_its_stale_occurrence_cancelled(tmp_path, make_store, monkeypatch):
    reg, clock, store, d, _ = first_life(tmp_path, make_store)
    d.occurrences.store_some(everything=True)
    assert pending(store)["hourly"] == datetime(2026, 3, 2, 11, 0, tzinfo=timezone.utc)

    write(reg, hourly="15 * * * *")  # edited while down
    counted = Counted(monkeypatch, store)
    d2, _, marks = boot(store, reg, clock)
    assert counted.checks > 0 and counted.syncs == 1
    d2.occurrences.store_some(everything=True)
    assert pending(store)["hourly"] == datetime(2026, 3, 2, 10, 15, tzinfo=timezone.utc)
    (stale,) = [r for r in store.runs("hourly", limit=10) if r.state == "cancelled"]
    assert stale.scheduled_at == datetime(2026, 3, 2, 11, 0, tzinfo=timezone.utc)
    assert marks.checked() is not None  # checked now: the next start trusts these


def test_a_pause_while_down_means_the_next_start_checks_again(tmp_path, make_store, monkeypatch):
    reg, clock, store, d, _ = first_life(tmp_path, make_store)
    d.occurrences.store_some(everything=True)
    clock.advance(5)
    assert store.set_paused("daily", True, "maintenance", by="ops")  # another writer of the jobs table
    counted = Counted(monkeypatch, store)
    boot(store, reg, clock)
    assert counted.checks > 0 and counted.syncs == 1


def test_a_mark_not_sealed_with_this_nodes_key_is_not_trusted(tmp_path, make_store, monkeypatch):
    reg, clock, store, d, _ = first_life(tmp_path, make_store)
    d.occurrences.store_some(everything=True)
    counted = Counted(monkeypatch, store)
    boot(store, reg, clock, key=b"x" * 32)  # a writer of the database without the state directory's key
    assert counted.checks > 0 and counted.syncs == 1


def test_definitions_stored_but_not_yet_checked_leave_no_mark(tmp_path, make_store, monkeypatch):
    """A reload stores the definitions off the loop's thread and the loop checks the stored
    occurrences later: a crash in between must leave the next start checking."""
    reg, clock, store, d, marks = first_life(tmp_path, make_store)
    assert marks.checked() is not None
    write(reg, hourly="15 * * * *")
    d.registry.prepare()  # stored the edited definition; the crash comes before `finish`
    assert StoredFiles(store, d.node, KEY).checked() is None
    counted = Counted(monkeypatch, store)
    d2, _, _ = boot(store, reg, clock)
    assert counted.checks > 0
    d2.occurrences.store_some(everything=True)
    assert pending(store)["hourly"] == datetime(2026, 3, 2, 10, 15, tzinfo=timezone.utc)


def test_a_reload_that_changes_a_job_marks_the_definitions_it_checked(tmp_path, make_store, monkeypatch):
    reg, clock, store, d, marks = first_life(tmp_path, make_store)
    first = marks.checked()
    write(reg, hourly="15 * * * *")
    d.reload()
    assert marks.checked() not in (None, first)
    clock.advance(30)
    d.occurrences.store_some(everything=True)
    counted = Counted(monkeypatch, store)
    boot(store, reg, clock)
    assert counted.checks == 0 and counted.syncs == 0
    assert pending(store)["hourly"] == datetime(2026, 3, 2, 10, 15, tzinfo=timezone.utc)
