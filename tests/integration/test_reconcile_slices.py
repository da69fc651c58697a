"""The reconciler's periodic check (every RECONCILE_EVERY_S) reads the stored occurrences a
slice a wake-up, in fire order, not all of them at once: with 100,000 jobs that read held
the loop 2.7 s and an `@every 1s` job beside them was skipped twice. The check still
finds a job without its next occurrence and stores one, and the jobs that fire meanwhile
get no second one.

In-process: the real `Daemon` on the simulated clock and runner, on SQLite and on the
memory store; two occurrences a slice."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from chronod.core.clock import FakeClock
from chronod.daemon import occurrences
from chronod.daemon.occurrences import RECONCILE_EVERY_S
from chronod.daemon.waker import Wakeups
from tests.integration.test_restart_checks_nothing import (  # noqa: F401  (make_store: the fixture)
    START,
    boot,
    make_store,
    write,
)


def booted(tmp_path, store_of):
    """A chronod of 23 jobs just started, the first occurrences that fire later not stored yet."""
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write(reg)
    clock = FakeClock(START, mono=1000.0)
    store = store_of(clock)
    d, world, _ = boot(store, reg, clock)
    world.durations["tick"] = lambda rng: (0.2, 0)
    return clock, store, d


@pytest.fixture
def settled(tmp_path, make_store, monkeypatch):  # noqa: F811  (the fixture imported above)
    """A chronod of 23 jobs whose next occurrences are all stored, its check due."""
    clock, store, d = booted(tmp_path, make_store)
    d.occurrences.store_some(everything=True)
    monkeypatch.setattr(occurrences, "READ_SLICE", 2)
    reads: list[int] = []  # stored runs read by the loop, a wake-up each
    for name in ("pending", "pending_later"):
        real = getattr(store, name)

        def counted(*a, _real=real, **k):
            out = _real(*a, **k)
            if d.occurrences.clock is clock and waking:
                reads[-1] += len(out)
            return out

        monkeypatch.setattr(store, name, counted)
    clock.advance(RECONCILE_EVERY_S)
    return clock, store, d, reads


waking: list[bool] = []  # (non-empty: inside a wake-up, whose reads count)


def wake(d, reads) -> None:
    reads.append(0)
    waking.append(True)
    try:
        d.on_wakeup(Wakeups(children=d.runner.ended([a.handle for a in d.active.values()])))
    finally:
        waking.clear()


def scheduled(store) -> Counter[str]:
    return Counter(r.job_id for r in store.pending() if r.state == "pending" and r.trigger == "schedule")


def test_the_check_reads_a_slice_a_wake_up_while_the_tick_fires(settled):
    clock, store, d, reads = settled
    for _ in range(20):  # 23 stored occurrences, two a wake-up
        wake(d, reads)
        clock.advance(0.1)
    assert max(reads) <= 3, f"stored runs read a wake-up: {reads}"  # a slice and one more
    assert sum(1 for n in reads if n) >= 8
    assert not d.occurrences.reconciling(), "the check is over"
    assert set(scheduled(store).values()) == {1}, "no job got a second occurrence"
    ticks = [r for r in store.runs("tick", limit=100) if r.started_at is not None]
    assert ticks and all(r.started_at - r.fire_at < timedelta(seconds=0.5) for r in ticks)


def test_the_check_stores_the_next_occurrence_a_job_lost(settled):
    clock, store, d, reads = settled
    lost = next(r for r in d.pending.values() if r.job_id == "b7")
    assert store.delete_run(lost.run_id)  # (a row lost: a cancelled one keeps its run id)
    d.forget(["b7"])
    assert "b7" not in scheduled(store)
    for _ in range(20):
        wake(d, reads)
        clock.advance(0.1)
    assert scheduled(store)["b7"] == 1
    assert set(scheduled(store).values()) == {1}
    assert "b7" in {r.job_id for r in d.pending.values()}, "and tracked"


def test_a_check_due_while_the_first_occurrences_are_stored_waits_for_their_slices(
    tmp_path,
    make_store,  # noqa: F811  (the fixture imported above)
    monkeypatch,
):
    """On a slow machine the slices after a cold READY may outlast RECONCILE_EVERY_S: the
    check stored all that was left in one wake-up (seconds with 100,000 new jobs)."""
    clock, store, d = booted(tmp_path, make_store)
    monkeypatch.setattr(occurrences, "STORE_SLICE", 2)
    left = len(d.unstored)
    assert left > 10, "the first occurrences that fire later are left for after READY"
    clock.advance(RECONCILE_EVERY_S)
    wake(d, [])
    assert len(d.unstored) >= left - 2, "one slice stored, not all that was left"
    for _ in range(60):
        clock.advance(0.1)
        wake(d, [])
    assert not d.unstored and not d.occurrences.reconciling(), "the slices, then the check, are done"
    assert set(scheduled(store).values()) == {1}


@pytest.mark.parametrize("backlog_at", [timedelta(days=-1), timedelta(days=30)], ids=["fired", "later"])
def test_the_check_reads_each_job_once_not_its_backlog(settled, backlog_at):
    """A backlog stores many occurrences of one job: those that fired before the check
    began (they wait in a line) are not read, and the check stops once every job is
    crossed off (every 300 s, a month-long backlog is thousands of rows)."""
    from chronod.daemon.runs import new_run

    clock, store, d, reads = settled
    tick = d.registry.jobs["tick"]
    store.insert_runs([new_run(tick, START + backlog_at + timedelta(minutes=k)) for k in range(40)])
    for _ in range(40):
        wake(d, reads)
        clock.advance(0.1)
    assert not d.occurrences.reconciling(), "the check is over"
    # 23 jobs, two a slice (each read asks one more): 12 slices, not the 32 of every row
    assert sum(reads) <= 13 * 3, f"read the backlog: {reads}"
    assert set(scheduled(store).values()) == {1, 41}, "and nothing repaired"
