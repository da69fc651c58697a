"""The daemon's heap is kept out of garbage collections once built.

A daemon of 100,000 jobs holds millions of long-lived objects; each full collection walked
all of them while holding the interpreter (0.2-0.9 s, on whichever thread it fell), and the
loop started an `@every 1s` job that late. So start-up builds its heap with collections
held and freezes it (`kernel.collections_held`), the notifier's round over every job does
the same, and a reload swapped in freezes what it left (`ThreadReloads.tidy`).
"""

from __future__ import annotations

import gc
import threading

import pytest

from chronod.daemon import kernel
from chronod.daemon.reloads import ThreadReloads


@pytest.fixture(autouse=True)
def unfrozen():
    """This test process's heap as it was: nothing frozen, collections on."""
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.enable()


class Tracked:
    """An object the collector tracks (an instance with a __dict__)."""


def all_frozen(objs: list[Tracked]) -> bool:
    """Whether every one of `objs` is in the permanent generation (`gc.get_objects` lists
    the collected generations only). Not the freeze count: frozen objects that die leave
    it, so a count taken before can be above one taken after (a flaky comparison)."""
    collected = {id(o) for o in gc.get_objects()}
    return not any(id(o) in collected for o in objs)


def test_no_collection_runs_while_a_heap_is_built_and_the_built_heap_is_kept():
    with kernel.collections_held():
        assert not gc.isenabled()
        built = [Tracked() for _ in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(built)


def test_collections_stay_held_until_the_last_of_two_builders_is_done():
    inner_done, outer_may_leave = threading.Event(), threading.Event()

    def notifier_round():
        with kernel.collections_held():
            inner_done.set()
            outer_may_leave.wait(5)

    with kernel.collections_held():
        t = threading.Thread(target=notifier_round)
        t.start()
        inner_done.wait(5)
    assert not gc.isenabled()  # the other builder still builds
    outer_may_leave.set()
    t.join(5)
    assert gc.isenabled()


def test_a_reload_swapped_in_keeps_the_heap_it_left():
    reloads = ThreadReloads(lambda: None)
    left = [Tracked() for _ in range(100)]
    assert not all_frozen(left)
    reloads.tidy()
    assert all_frozen(left)


def test_a_supervisor_forked_without_the_launcher_leaves_the_kept_heap_frozen(monkeypatch):
    from chronod.runner import runner

    monkeypatch.setattr(runner.os, "fork", lambda: 4242)  # the parent's side only
    kept = [Tracked() for _ in range(100)]
    kernel.keep_heap()
    assert all_frozen(kept)
    assert runner._fork_supervisor(None) == 4242  # type: ignore[arg-type]
    assert all_frozen(kept)
