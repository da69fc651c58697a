"""A warm start (its stored occurrences trusted as stored, tests/integration/
test_restart_checks_nothing.py) reads before READY only the stored occurrences that fire
within STORE_AHEAD_S; the others are read after it, a slice per wake-up, in fire order,
and no slice is read just before a tracked occurrence fires. Meanwhile an occurrence due
fires on time, no job gets a second pending occurrence, and a reload, a removal or the
reconciler in the middle of the slices leaves every carried job with exactly its stored
next occurrence tracked.

In-process: the real `Daemon` on the simulated clock and runner, on SQLite and on the
memory store, restarted on the same database; two occurrences a slice."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from chronod.daemon import occurrences
from chronod.daemon.occurrences import STORE_CLEAR_S
from chronod.daemon.waker import Wakeups
from tests.integration.daemon_helpers import job, jobs_file, write_jobs
from tests.integration.test_restart_checks_nothing import (  # noqa: F401  (make_store: the fixture)
    boot,
    first_life,
    make_store,
    pending,
    write,
)

LATER = {"hourly", "daily", *(f"b{i}" for i in range(20))}  # none fires within a minute of the restart


@pytest.fixture
def warm(tmp_path, make_store, monkeypatch):  # noqa: F811  (the fixture imported above)
    """A first chronod that settled (every next occurrence stored, the mark written), down
    for a minute, and a second one started on the same files and database."""
    reg, clock, store, d, _ = first_life(tmp_path, make_store)
    d.occurrences.store_some(everything=True)
    d.registry.mark_checked()
    clock.advance(60)
    monkeypatch.setattr(occurrences, "READ_SLICE", 2, raising=False)  # (raising: the test runs on older code too)
    d2, world, _ = boot(store, reg, clock)
    world.durations["tick"] = lambda rng: (0.2, 0)
    return reg, clock, store, d2, world


def tracked(d) -> Counter[str]:
    return Counter(r.job_id for r in d.pending.values())


def one_each(store) -> dict[str, int]:
    """The jobs with other than exactly one pending scheduled occurrence stored."""
    n = Counter(r.job_id for r in store.pending() if r.state == "pending" and r.trigger == "schedule")
    return {j: c for j, c in n.items() if c != 1}


def wake(d, reload: bool = False) -> None:
    d.on_wakeup(Wakeups(reload=reload, children=d.runner.ended([a.handle for a in d.active.values()])))


def step(d, clock, world, s: float = 0.5) -> None:
    clock.advance(s)
    wake(d)


def test_the_later_occurrences_are_read_after_ready_a_slice_per_wake_up_while_the_due_ones_fire(warm):
    reg, clock, store, d, world = warm
    assert set(tracked(d)) == {"tick"}, "only what fires within a minute is read before READY"
    assert one_each(store) == {} and set(pending(store)) == {"tick", *LATER}, "and no job got a second one"
    assert d.occurrences.read_at(clock.now()) == clock.now(), "the loop wakes at once to read the rest"
    counts = []
    while d.occurrences.reading():
        step(d, clock, world)
        counts.append(len(d.pending))
    assert counts == [1 + 2 * n for n in range(1, 12)]  # 22 later ones, two a wake-up, the tick's beside
    assert tracked(d) == Counter({"tick": 1, **dict.fromkeys(LATER, 1)})
    assert {r.run_id for r in d.pending.values()} == {r.run_id for r in store.pending()}
    # the every-second job fired on its second all along
    ticks = [
        r
        for r in store.runs("tick", limit=100)
        if r.started_at is not None and r.scheduled_at > clock.now() - timedelta(seconds=5)
    ]
    assert ticks and all(r.started_at - r.fire_at < timedelta(seconds=0.5) for r in ticks)
    assert one_each(store) == {}
    d.reconcile()
    assert one_each(store) == {} and set(pending(store)) == {"tick", *LATER}, "reconcile found nothing missing"


def test_no_slice_is_read_just_before_a_tracked_occurrence_fires(warm):
    """A slice read on the loop's thread holds what falls due meanwhile: within
    STORE_CLEAR_S of a tracked occurrence's fire time the loop fires that one first."""
    reg, clock, store, d, world = warm
    fire = clock.now().replace(microsecond=0) + timedelta(seconds=1)
    clock.advance((fire - clock.now()).total_seconds() - 0.9)
    wake(d)  # the catch-up of the tick (it runs 0.2 s) and a slice
    clock.advance(0.9 - STORE_CLEAR_S / 2)
    wake(d)  # the tick's next one fires in STORE_CLEAR_S / 2
    left = len(d.pending)
    assert d.next_wake() == fire, "the loop waits for the tick, not for a slice"
    wake(d)
    assert len(d.pending) == left, "no slice read just before a fire time"
    clock.advance(STORE_CLEAR_S / 2)
    wake(d)
    assert [r.state for r in store.runs("tick", limit=10) if r.scheduled_at == fire] == ["running"], "the tick fired"
    assert len(d.pending) == left + 2, "and the slice followed it"


def test_a_reload_in_the_middle_of_the_slices_edits_removes_and_keeps_the_rest(warm):
    """Two slices read (the hourly job and b0-b2): an unchanged reload changes nothing; then
    b1 (read) and b15 (not read yet) are edited and b19 (not read yet) removed. Each edited
    job has its new occurrence tracked once, the stale ones cancelled and never read
    again, the removed one's cancelled and never tracked; the slices go on for the rest."""
    reg, clock, store, d, world = warm
    for _ in range(2):
        step(d, clock, world)
    assert set(tracked(d)) == {"tick", "hourly", "b0", "b1", "b2"}
    wake(d, reload=True)  # a SIGHUP, nothing changed
    assert d.occurrences.reading() and set(tracked(d)) >= {"tick", "hourly", "b0", "b1", "b2"}
    write_jobs(
        reg / "b.yaml",
        jobs_file(*(job(f"b{i}", "45 5 * * *" if i in (1, 15) else f"{i} 3 * * *", "true") for i in range(19))),
    )
    wake(d, reload=True)
    assert d.occurrences.reading(), "a reload of a few jobs leaves the slices to go on"
    while d.occurrences.reading():
        step(d, clock, world)
    assert tracked(d) == Counter({"tick": 1, **{j: 1 for j in LATER - {"b19"}}})
    assert one_each(store) == {}
    stored = pending(store)
    assert "b19" not in stored and stored["b1"].hour == stored["b15"].hour == 5
    assert {r.run_id for r in d.pending.values()} == {r.run_id for r in store.pending()}
    assert [r.state for r in store.runs("b19", limit=10)] == ["cancelled"]
    for j in ("b1", "b15"):
        assert sorted(r.state for r in store.runs(j, limit=10)) == ["cancelled", "pending"]


def test_the_reconciler_in_the_middle_of_the_slices_reads_the_rest_and_stores_no_second_occurrence(warm):
    reg, clock, store, d, world = warm
    step(d, clock, world)
    assert d.occurrences.reading()
    d.reconcile()
    assert not d.occurrences.reading()
    assert tracked(d) == Counter({"tick": 1, **dict.fromkeys(LATER, 1)})
    assert one_each(store) == {}


def test_a_full_reload_in_the_middle_of_the_slices_reads_everything_at_once(warm):
    """Most jobs edited: the reload reads every stored occurrence again, checking each
    against its schedule; nothing is left for the slices."""
    reg, clock, store, d, world = warm
    step(d, clock, world)
    write(reg, hourly="15 * * * *")
    write_jobs(reg / "b.yaml", jobs_file(*(job(f"b{i}", f"{i} 5 * * *", "true") for i in range(20))))
    wake(d, reload=True)
    assert not d.occurrences.reading()
    d.occurrences.store_some(everything=True)
    assert tracked(d) == Counter({"tick": 1, **dict.fromkeys(LATER, 1)})
    assert one_each(store) == {} and {pending(store)[f"b{i}"].hour for i in range(20)} == {5}


def test_no_slice_is_read_while_a_reload_is_prepared(warm, monkeypatch):
    """A reload's preparation (on its own thread) and the slices both want the interpreter:
    the slices wait for the reload to be swapped in; the every-second job fires on."""
    reg, clock, store, d, world = warm
    reloads = type(d.registry.reloads)
    monkeypatch.setattr(reloads, "busy", property(lambda self: True))
    for _ in range(4):
        step(d, clock, world)
    assert set(tracked(d)) == {"tick"} and d.occurrences.reading()
    assert any(r.state == "succeeded" for r in store.runs("tick", limit=10))
    monkeypatch.setattr(reloads, "busy", property(lambda self: False))
    step(d, clock, world)
    assert len(tracked(d)) == 3
