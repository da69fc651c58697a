"""chronod.notify.reads: what the notifier has read, so a run that ends after a step back of
the wall clock is known new though its times are before everything read."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from chronod.notify import reads

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)


@dataclass
class Row:
    run_id: str
    updated_at: datetime
    finished_at: datetime | None = None


def s(n: float) -> timedelta:
    return timedelta(seconds=n)


def test_the_floor_reaches_back_as_far_as_a_step_back_can_have_taken_the_clock():
    assert reads.floor(None, T0, 50.0) == T0  # nothing read yet
    assert reads.floor((T0, 100.0), T0 + s(5), 105.0) == T0  # no step: the last read
    # 60 s passed, the clock shows 240 s less than at the last read: rows since carry times from T0 - 300 on
    assert reads.floor((T0, 100.0), T0 - s(240), 160.0) == T0 - s(300)
    assert reads.floor((T0, 100.0), T0 + s(5), 90.0) == T0 + s(5)  # a monotonic clock of another boot


def test_a_run_never_read_is_new_only_once_every_row_of_its_time_was_read_before():
    r = reads.Reads()
    first = [Row("a", T0 - s(10), T0 - s(10)), Row("b", T0 - s(5), T0 - s(5))]
    assert r.news(first) == set()  # the first read: nothing known to compare with
    r.remember({x.run_id: x.updated_at for x in first}, T0 - s(40), T0 - s(900))
    assert r.fresh([("a", T0 - s(10)), ("b", T0 - s(4)), ("c", T0 - s(30))]) == ["b", "c"]
    after_step = Row("c", T0 - s(30), T0 - s(30))  # ended after the clock went back
    rewritten = Row("a", T0 + s(1), T0 - s(10))  # a note added to a run read before
    late_note = Row("d", T0 - s(20), T0 - s(3600))  # an old run never read here, written again
    below = Row("e", T0 - s(50), T0 - s(50))  # before what was read: cannot be told
    assert r.news([after_step, rewritten, late_note, below]) == {"c"}


def test_what_is_read_is_kept_for_a_while_back_and_never_beyond_its_limit():
    r = reads.Reads()
    r.remember({"a": T0 - s(2000), "b": T0 - s(100)}, T0 - s(2000), T0 - s(900))
    assert set(r.keys) == {"b"} and r.floor == T0 - s(900)
    many = {f"r{i}": T0 + s(i / 1000) for i in range(reads.KEEP_MAX * 2)}
    r.remember(many, T0, T0 - s(900))
    assert len(r.keys) == reads.KEEP_MAX
    oldest = min(r.keys.values())
    assert r.floor > oldest and r.news([Row("r0", T0, T0)]) == set()  # dropped: not taken for new
