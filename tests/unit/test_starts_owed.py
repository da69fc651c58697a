"""A burst longer than one wake-up's time slice: the runs admitted but not started go
before recording endings, and endings wait no longer than ENDINGS_WAIT_MAX_S (then
recorded after that wake-up's starts: tests/integration/test_burst_starts_first.py)."""

from __future__ import annotations

from datetime import datetime, timezone

from chronod.core.clock import FakeClock
from chronod.daemon.startlimit import ENDINGS_WAIT_MAX_S, StartLimit
from chronod.sim.world import NullMetrics


def Node() -> StartLimit:
    return StartLimit(FakeClock(datetime(2026, 1, 1, tzinfo=timezone.utc)), lambda *a, **k: None, NullMetrics(), None)


def test_nothing_owed_before_a_slice_runs_out():
    node = Node()
    assert not node.starts_owed()
    node.backlog = [("job", "run")]  # waiting for the start limit, not for a slice
    assert not node.starts_owed()


def test_given_back_runs_go_first_until_started():
    node = Node()
    node.give_back([("job", "run-1"), ("job", "run-2")])
    assert node.starts_owed()
    node.clock.advance(ENDINGS_WAIT_MAX_S / 2)
    assert node.starts_owed()
    node.backlog = []  # all started
    assert not node.starts_owed()


def test_endings_wait_at_most_the_bound_then_again_for_the_next_slice():
    node = Node()
    node.give_back([("job", "run-1")])
    assert node.endings_wait()
    node.clock.advance(ENDINGS_WAIT_MAX_S + 0.01)
    assert not node.endings_wait()  # this wake-up records the endings, after its starts
    assert node.starts_owed()  # the runs still owed go first at the next wake-up
    assert node.endings_wait()  # and its endings wait again, the bound counted from now
    node.backlog = []  # all started
    assert not node.starts_owed() and not node.endings_wait()
