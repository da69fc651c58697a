"""A start-up and a reload that do not hold firing.

A reload's heavy half (reading, validating, storing the definitions) runs beside the
loop, not in it: while it takes its time an `@every 1s` job keeps firing on the second.

In-process and on a fake clock, so that a reload of any length costs this test nothing: the
real `Daemon` on the real SQLite store and the real `ThreadReloads`, with the simulated
runner. The registry loader of the reload blocks until the test releases it. Had the loop
run the reload itself, the loader would stand for the stall and let twelve seconds pass
unseen, and the occurrences of those seconds would be late beyond their tolerance (0)
and skipped.

A start-up stores only the first occurrences that fire within a minute before READY; the
others follow after it, a slice per wake-up, earliest first.
"""

from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta, timezone

from chronod.core.clock import FakeClock
from chronod.daemon.reloads import ThreadReloads
from chronod.daemon.waker import Wakeups
from chronod.sim.world import SimRunner, World
from chronod.specfile import load_registry
from chronod.store.sql import SqlStore
from tests.integration.daemon_helpers import job, jobs_file, stepped_daemon, write_jobs

START = datetime(2026, 3, 2, 12, 0, 0, 500000, tzinfo=timezone.utc)
STALL_S = 12


class SteppedWaker:
    """The test calls `tick` itself; a finished reload pokes this."""

    stop_requested = False

    def __init__(self) -> None:
        self.poked = threading.Event()

    def poke(self) -> None:
        self.poked.set()


def test_a_slow_reload_skips_no_occurrence_of_an_every_second_job(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "tick.yaml", jobs_file(job("tick", "@every 1s", "true")))
    write_jobs(reg / "later.yaml", jobs_file(job("later", "0 4 * * *", "true")))
    clock = FakeClock(START, mono=1000.0)
    world = World(clock, random.Random(1))
    world.durations["tick"] = lambda rng: (0.2, 0)
    store = SqlStore(str(tmp_path / "chrono.db"), now=clock.now)
    store.upgrade()
    slow, released, on_loop_thread = threading.Event(), threading.Event(), []

    def load():
        if slow.is_set():
            on_loop = threading.current_thread() is threading.main_thread()
            on_loop_thread.append(on_loop)
            if on_loop:
                clock.advance(STALL_S)  # the loop itself would wait here: time passes unseen
            elif not released.wait(120):
                raise AssertionError("the test never released the reload")
            # (a real-time wait decided this before: on a loaded host the loop's 24 steps
            # outlasted it, and the test stalled its own clock)
        return load_registry([reg], now=clock.now(), secure=False)

    runner, waker = SimRunner(world, "a", str(tmp_path)), SteppedWaker()
    d = stepped_daemon(store, runner, clock, load, waker, reloads=ThreadReloads(waker.poke))
    d.start()

    def step(reload: bool = False) -> None:
        clock.advance(0.5)
        handles = [a.handle for a in d.active.values()]
        d.tick(Wakeups(reload=reload, children=runner.ended(handles)))

    for _ in range(6):
        step()
    write_jobs(reg / "later.yaml", jobs_file(job("later", "0 5 * * *", "true")))
    slow.set()
    step(reload=True)
    for _ in range(2 * STALL_S):
        step()  # the reload is still being prepared: the loop fires on
    released.set()
    waker.poked.wait(60)  # the reload finished (at once when it ran in the loop)
    for _ in range(6):
        step()
    end = clock.now()

    runs = {r.scheduled_at: r for r in store.runs("tick", limit=1000)}
    due = sorted(at for at in runs if at <= end - timedelta(seconds=1))
    assert len(due) >= 16  # 18.5 s stepped, 12 of them while the reload was prepared
    assert [(b - a).total_seconds() for a, b in zip(due, due[1:])] == [1.0] * (len(due) - 1)
    assert {runs[at].state for at in due} == {"succeeded"}, [(at, runs[at].state) for at in due]
    assert on_loop_thread == [False], "the reload was prepared on the loop's thread"
    later = store.pending([d.jobs["later"].key])
    assert [r.scheduled_at.hour for r in later] == [5], "the reload's change did not apply"


def _sliced(tmp_path, monkeypatch, jobs: list, **kw):
    """A stepped daemon on SQLite over `jobs` in one file, started, that stores the first
    occurrences left for after READY two a wake-up: (daemon, store, runner, clock)."""
    from chronod.daemon import occurrences

    monkeypatch.setattr(occurrences, "STORE_SLICE", 2)
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "a.yaml", jobs_file(*jobs))
    clock = FakeClock(START, mono=1000.0)
    store = SqlStore(str(tmp_path / "chrono.db"), now=clock.now)
    store.upgrade()
    runner = SimRunner(World(clock, random.Random(1)), "a", str(tmp_path))
    d = stepped_daemon(
        store, runner, clock, lambda: load_registry([reg], now=clock.now(), secure=False), SteppedWaker(), **kw
    )
    d.start()
    return d, store, runner, clock


def test_first_occurrences_far_ahead_are_stored_after_ready_a_slice_per_wake_up(tmp_path, monkeypatch):
    far = [f"far{i}" for i in range(5)]
    d, store, runner, clock = _sliced(
        tmp_path, monkeypatch, [job("tick", "@every 1s", "true"), *(job(f, "0 4 * * *", "true") for f in far)]
    )

    def stored() -> set[str]:
        return {r.job_id for r in store.pending() if r.state == "pending"}

    assert stored() == {"tick"}, "only what fires within a minute is stored before READY"
    assert d.next_wake() == clock.now(), "the loop wakes at once to store the rest"
    counts = []
    while d.unstored:
        d.tick(Wakeups(children=runner.ended([a.handle for a in d.active.values()])))
        counts.append(len(stored()))
    assert counts == [3, 5, 6]
    assert stored() == {"tick", *far}
    assert {r.job_id for r in d.pending.values()} == {"tick", *far}
    d.reconcile()
    assert {r.job_id for r in store.pending()} == {"tick", *far}, "reconcile found nothing missing"


def test_no_slice_of_first_occurrences_is_stored_just_before_a_tracked_one_fires(tmp_path, monkeypatch):
    """A slice stored on the loop's thread holds what falls due meanwhile: within
    STORE_CLEAR_S of a tracked occurrence's fire time the loop fires that one first."""
    far = [f"far{i}" for i in range(5)]
    d, store, _, clock = _sliced(
        tmp_path, monkeypatch, [job("tick", "@every 1s", "true"), *(job(f, "0 4 * * *", "true") for f in far)]
    )
    left = len(d.unstored)
    clock.advance(0.3)  # 12:00:00.8: the tick's 12:00:01 fires in 0.2 s
    fire = START.replace(microsecond=0) + timedelta(seconds=1)
    assert d.next_wake() == fire, "the loop waits for the tick, not for a slice"
    d.tick(Wakeups())
    assert len(d.unstored) == left, "no slice stored 0.2 s before a fire time"
    clock.advance(0.2)
    d.tick(Wakeups())
    assert [r.state for r in store.runs("tick", limit=10) if r.scheduled_at == fire] == ["running"], "the tick fired"
    assert len(d.unstored) == left - 2, "and the slice followed it"


def test_the_heap_is_tidied_once_the_last_slice_of_first_occurrences_is_stored(tmp_path, monkeypatch):
    """The first occurrences stored after READY are a heap built to be kept: the daemon
    keeps it out of later collections and trims what was freed (`Reloads.tidy`) after the
    last slice, not at each one."""
    from chronod.daemon.reloads import InlineReloads

    class Counted(InlineReloads):
        tidied = 0

        def tidy(self) -> None:
            self.tidied += 1

    reloads = Counted()
    d, *_ = _sliced(tmp_path, monkeypatch, [job(f"far{i}", "0 4 * * *", "true") for i in range(5)], reloads=reloads)
    assert reloads.tidied == 1  # the start-up's reload
    ticks = 0
    while d.unstored:
        d.tick(Wakeups())
        ticks += 1
    assert ticks == 3
    assert reloads.tidied == 2
    d.tick(Wakeups())
    assert reloads.tidied == 2, "nothing left to store: nothing to tidy"


def test_the_node_info_encoded_in_slices_is_the_plain_json_text():
    import json

    from chronod.daemon.synced import node_info_json as _node_info_json

    for n in (0, 1, 2000, 2001, 4500):
        info = {
            "registry_loaded_at": START.isoformat(),
            "jobs": n,
            "spec_hashes": {f'j"{i}': f"{i:016x}" for i in range(n)},
            "registry_errors": 0,
            "pid": 1,
            "state_dir": '/odd "spec_hashes": null',
        }
        assert _node_info_json(info) == json.dumps(info, sort_keys=True, default=str), n


def test_a_job_removed_while_the_loop_fires_it_leaves_no_pending_occurrence(tmp_path):
    """The reload's preparation stores the definitions (cancelling the removed job's waiting
    rows) on its thread; the loop, still carrying the job until the swap, fires it and
    stores its next occurrence. After the swap no occurrence of the removed job may wait:
    nothing would ever start or settle it, and `missed` would list it."""
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "tick.yaml", jobs_file(job("tick", "@every 1s", "true")))
    write_jobs(reg / "stays.yaml", jobs_file(job("stays", "0 4 * * *", "true")))
    clock = FakeClock(START, mono=1000.0)
    world = World(clock, random.Random(1))
    world.durations["tick"] = lambda rng: (0.2, 0)
    store = SqlStore(str(tmp_path / "chrono.db"), now=clock.now)
    store.upgrade()
    stored, release = threading.Event(), threading.Event()
    real_sync = store.sync_jobs

    def sync_then_wait(node, specs, fell_due=None):
        real_sync(node, specs, fell_due)
        if threading.current_thread() is not threading.main_thread():
            stored.set()  # the definitions are stored: the loop fires on before the swap
            release.wait(60)

    store.sync_jobs = sync_then_wait  # type: ignore[method-assign]
    runner, waker = SimRunner(world, "a", str(tmp_path)), SteppedWaker()
    load = lambda: load_registry([reg], now=clock.now(), secure=False)  # noqa: E731
    d = stepped_daemon(store, runner, clock, load, waker, reloads=ThreadReloads(waker.poke))
    d.start()

    def step(reload: bool = False) -> None:
        clock.advance(0.5)
        d.tick(Wakeups(reload=reload, children=runner.ended([a.handle for a in d.active.values()])))

    for _ in range(4):
        step()
    (reg / "tick.yaml").unlink()
    step(reload=True)
    assert stored.wait(60), "the reload's preparation did not store the definitions"
    for _ in range(4):
        step()  # the loop still carries tick: it fires and stores the next occurrence
    release.set()
    waker.poked.wait(60)
    for _ in range(4):
        step()
    assert "tick" not in d.jobs
    waiting = [(r.run_id, r.state) for r in store.pending(["tick"])]
    assert waiting == [], "an occurrence of the removed job still waits"
    runs = store.runs("tick", limit=100)
    assert any(r.state == "cancelled" and r.error == "job removed from the registry" for r in runs)
