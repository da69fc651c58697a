"""Catch-up, overlap and retry decisions, with `now` as an argument."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from chronod.core import policy
from chronod.core.model import JobSpec, Retry

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=timezone.utc)


def spec(**kw) -> JobSpec:
    base = JobSpec(id="j", owner="team", schedule="*/5 * * * *", command="true", idempotency_class="idempotent")
    return replace(base, **kw)


def due(*minutes_ago: float) -> list[policy.Due]:
    out = [policy.Due(NOW - timedelta(minutes=m), NOW - timedelta(minutes=m)) for m in minutes_ago]
    return sorted(out, key=lambda d: d.fire_at)


def test_an_occurrence_picked_up_on_time_runs_under_every_policy():
    for mode in ("latest", "all", "none"):
        d = policy.catchup(spec(catchup=mode), due(0.1), NOW)
        assert [x.fire_at for x in d.run] == [NOW - timedelta(minutes=0.1)], mode
        assert d.skip == ()


def test_latest_runs_only_the_newest_missed_occurrence_and_skips_the_rest():
    d = policy.catchup(spec(catchup="latest"), due(15, 10, 5), NOW)
    assert [x.fire_at for x in d.run] == [NOW - timedelta(minutes=5)]
    assert [x.fire_at for x, _ in d.skip] == [NOW - timedelta(minutes=15), NOW - timedelta(minutes=10)]
    assert all("catchup: latest" in why for _, why in d.skip)


def test_latest_skips_the_whole_backlog_when_the_current_occurrence_is_on_time():
    d = policy.catchup(spec(catchup="latest"), due(10, 5, 0), NOW)
    assert [x.fire_at for x in d.run] == [NOW]
    assert len(d.skip) == 2


def test_all_runs_every_missed_occurrence_inside_the_window_in_order():
    d = policy.catchup(spec(catchup="all", catchup_window_s=3600), due(120, 15, 10, 5), NOW)
    assert [x.fire_at for x in d.run] == [NOW - timedelta(minutes=m) for m in (15, 10, 5)]
    assert [x.fire_at for x, _ in d.skip] == [NOW - timedelta(minutes=120)]
    assert "older than catchup_window_s=3600" in d.skip[0][1]


def test_none_records_every_missed_occurrence_as_skipped():
    d = policy.catchup(spec(catchup="none"), due(15, 10, 5), NOW)
    assert d.run == ()
    assert len(d.skip) == 3 and all("catchup: none" in why for _, why in d.skip)


def test_latest_runs_nothing_older_than_the_catchup_window():
    d = policy.catchup(spec(catchup="latest", catchup_window_s=60), due(15, 10, 5), NOW)
    assert d.run == ()
    assert len(d.skip) == 3


@pytest.mark.parametrize("overlap,running,expected", [
    ("forbid", 0, "start"), ("forbid", 1, "skip"), ("allow", 3, "start"), ("replace", 1, "replace"),
])
def test_overlap_policy_decides_what_a_second_run_does(overlap, running, expected):
    assert policy.overlap_action(spec(overlap=overlap), running) == expected


def test_unsafe_jobs_are_never_retried_and_never_redispatched():
    s = spec(idempotency_class="unsafe", retry=Retry(attempts=3))
    assert not policy.may_retry(s, 1, "failed")
    assert policy.on_unknown_outcome(s) == "lost"
    assert policy.on_unknown_outcome(spec(idempotency_class="keyed")) == "redispatch"


def test_retries_stop_after_the_last_attempt_and_never_follow_a_cancellation():
    s = spec(retry=Retry(attempts=3, backoff_s=10, max_backoff_s=25))
    assert policy.may_retry(s, 1, "failed") and policy.may_retry(s, 2, "timed_out")
    assert not policy.may_retry(s, 3, "failed")
    assert not policy.may_retry(s, 1, "cancelled")
    assert not policy.may_retry(s, 1, "succeeded")


def test_retry_backoff_doubles_is_capped_and_jittered_by_twenty_percent():
    s = spec(retry=Retry(attempts=5, backoff_s=10, max_backoff_s=25))
    rng = random.Random(7)
    for attempt, base in ((1, 10), (2, 20), (3, 25), (4, 25)):
        for _ in range(50):
            assert base * 0.8 <= policy.retry_delay_s(s, attempt, rng) <= base * 1.2
