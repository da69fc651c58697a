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


def test_an_occurrence_due_before_chronod_started_is_catch_up_however_recent():
    """chronod stopped at :50 and started again at :18: the :00 fell due while it was down,
    18 s ago. `none` records it skipped_outage; `latest` and `all` run it as catch-up."""
    started = NOW - timedelta(seconds=2)
    recent = [policy.Due(NOW - timedelta(seconds=20), NOW - timedelta(seconds=20))]
    d = policy.catchup(spec(catchup="none"), recent, NOW, started)
    assert d.run == () and [why for _, why in d.skip] == ["fell due while chronod could not run it; catchup: none"]
    for mode in ("latest", "all"):
        assert policy.catchup(spec(catchup=mode), recent, NOW, started).run == tuple(recent), mode
    # due after the start (a slow burst, a short stall): on time under every policy
    later = [policy.Due(NOW - timedelta(seconds=1), NOW - timedelta(seconds=1))]
    assert policy.catchup(spec(catchup="none"), later, NOW, started).run == tuple(later)
    assert policy.catchup(spec(catchup="none"), recent, NOW).run == tuple(recent)  # no start given


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


@pytest.mark.parametrize(
    "overlap,running,expected",
    [
        ("forbid", 0, "start"),
        ("forbid", 1, "skip"),
        ("allow", 3, "start"),
        ("replace", 1, "replace"),
    ],
)
def test_overlap_policy_decides_what_a_second_run_does(overlap, running, expected):
    assert policy.overlap(spec(overlap=overlap), running) == expected


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


# --- the catch-up rule: a backlog drains in order, one at a time under forbid -------------------


def w(run_id: str, minutes_ago: float, window_s: int = 3600) -> policy.Waiting:
    fire = NOW - timedelta(minutes=minutes_ago)
    return policy.Waiting(run_id, fire, fire + timedelta(seconds=window_s))


def test_catchup_all_runs_every_occurrence_inside_the_window_in_scheduled_order():
    d = policy.catchup(spec(catchup="all", catchup_window_s=3600), due(5, 20, 10, 15, 0.1), NOW)
    assert [x.fire_at for x in d.run] == sorted(x.fire_at for x in d.run)
    assert len(d.run) == 5 and d.skip == ()


@pytest.mark.parametrize(
    "overlap, running, queue, starts, expires",
    [
        # forbid: the oldest starts, and only when nothing of the job runs
        ("forbid", 0, [("c", 4), ("a", 12), ("b", 8)], ["a"], []),
        ("forbid", 1, [("a", 12), ("b", 8)], [], []),
        # replace drains the backlog one at a time too (cancelling its own backlog would lose it)
        ("replace", 0, [("b", 8), ("a", 12)], ["a"], []),
        # allow: everything at once, still in scheduled order
        ("allow", 2, [("c", 4), ("a", 12), ("b", 8)], ["a", "b", "c"], []),
        # an occurrence that waited past its catch-up window never starts late
        ("forbid", 0, [("old", 90), ("a", 12)], ["a"], ["old"]),
        ("forbid", 1, [("old", 90), ("a", 12)], [], ["old"]),
        ("forbid", 0, [], [], []),
    ],
)
def test_a_catchup_backlog_starts_in_scheduled_order_and_never_beyond_its_overlap(
    overlap, running, queue, starts, expires
):
    turn = policy.catchup_turn(spec(overlap=overlap), [w(r, m) for r, m in queue], running, NOW)
    assert [x.run_id for x in turn.start] == starts
    assert [x.run_id for x in turn.expire] == expires


@pytest.mark.parametrize(
    "catchup, line, kept, replaced",
    [
        # latest and none: only the newest of the occurrences waiting behind a backfill run waits
        ("latest", [("c", 1), ("a", 3), ("b", 2)], ["c"], ["a", "b"]),
        ("none", [("a", 3), ("b", 2)], ["b"], ["a"]),
        ("latest", [("a", 3)], ["a"], []),
        ("latest", [], [], []),
        # all: each waits its turn, in scheduled order
        ("all", [("c", 1), ("a", 3), ("b", 2)], ["c", "a", "b"], []),
    ],
)
def test_under_latest_the_newest_occurrence_waiting_in_a_line_replaces_the_older(catchup, line, kept, replaced):
    stay, gone = policy.newest_waiting(spec(catchup=catchup), [w(r, m) for r, m in line])
    assert [x.run_id for x in stay] == kept
    assert [x.run_id for x in gone] == replaced


# --- the overlap rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overlap, running, queued, forced, expected",
    [
        ("forbid", 0, 0, False, "start"),
        ("forbid", 1, 0, False, "skip"),
        ("forbid", 1, 3, False, "queue"),  # falls due while a catch-up backlog drains: waits its turn
        ("forbid", 0, 2, False, "queue"),  # the backlog goes first even between two of its runs
        ("forbid", 1, 0, True, "start"),  # a forced manual run
        ("replace", 1, 0, False, "replace"),
        ("replace", 0, 0, False, "start"),
        ("replace", 1, 2, False, "queue"),
        ("allow", 3, 0, False, "start"),
        ("allow", 3, 3, False, "start"),
    ],
)
def test_the_overlap_rule_decides_what_a_run_that_falls_due_does(overlap, running, queued, forced, expected):
    assert policy.overlap(spec(overlap=overlap), running, queued, forced=forced) == expected


# --- the resource rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "limit, used, queue, admitted, expired",
    [
        (1, 0, [("b", 1), ("a", 2)], ["a"], []),  # the oldest fire time takes the one slot
        (1, 1, [("a", 2), ("b", 1)], [], []),  # full: everyone keeps waiting, in line
        (2, 0, [("c", 1), ("a", 3), ("b", 2)], ["a", "b"], []),
        (3, 1, [("a", 3)], ["a"], []),
        (1, 1, [("gone", 61), ("a", 2)], [], ["gone"]),  # waited past its window: skipped_resource
        (1, 0, [("gone", 61), ("a", 2)], ["a"], ["gone"]),  # an expired run never takes a slot
        (1, 5, [("a", 1)], [], []),  # more running than the limit (a reload lowered it)
    ],
)
def test_the_resource_rule_admits_the_oldest_waiting_runs_into_free_slots(limit, used, queue, admitted, expired):
    turn = policy.resource_admission(limit, used, [w(r, m, window_s=3600) for r, m in queue], NOW)
    assert [x.run_id for x in turn.start] == admitted
    assert [x.run_id for x in turn.expire] == expired


def test_a_waiting_run_may_start_until_its_fire_time_plus_the_catchup_window():
    run = policy.waiting("r", NOW, spec(catchup_window_s=60))
    assert run.deadline == NOW + timedelta(seconds=60)
    assert policy.resource_admission(1, 0, [run], NOW + timedelta(seconds=60)).start == (run,)
    assert policy.resource_admission(1, 0, [run], NOW + timedelta(seconds=61)).expire == (run,)


# --- when the loop wakes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "interval, last, mono, expected",
    [
        (1.5, None, 100.0, 100.0),  # never pinged: ping at once (an idle daemon too)
        (1.5, 100.0, 100.4, 101.5),  # then every WATCHDOG_USEC/2
        (None, None, 100.0, None),  # no watchdog asked for
        (0.0, 50.0, 100.0, None),
    ],
)
def test_the_watchdog_is_pinged_from_the_first_moment_then_every_half_period(interval, last, mono, expected):
    assert policy.watchdog_ping_at(interval, last, mono) == expected


def test_the_loop_wakes_for_the_earliest_deadline_and_sleeps_without_any():
    assert policy.next_wake([None, NOW + timedelta(hours=4), NOW + timedelta(seconds=1.5), None]) == NOW + timedelta(
        seconds=1.5
    )
    assert policy.next_wake([None, None]) is None


# --- the start limit: who starts now, who waits, who the catch-up rule skips ---------

T0 = NOW - timedelta(seconds=1)


def cand(rid: str, fire_ago_s: float, *, job: str | None = None, offset_s: int = 0, **kw) -> policy.Candidate:
    """A due run `rid` whose fire time was `fire_ago_s` before NOW (scheduled `offset_s` earlier)."""
    s = spec(id=job or rid, **kw)
    fire = NOW - timedelta(seconds=fire_ago_s)
    return policy.Candidate(rid, s, fire - timedelta(seconds=offset_s), fire)


def admit(rate, line, tokens=None, mono=100.0, at=None):
    budget = policy.Budget(rate if tokens is None else tokens, mono if at is None else at)
    return policy.start_admission(rate, budget, line, NOW, mono)


def ids(cands) -> list[str]:
    return [c.run_id for c in cands]


@pytest.mark.parametrize(
    "case,rate,tokens,line,start,wait,skip",
    [
        # no limit: everything starts, in deadline order
        ("no limit", None, 0, [cand("b", 2), cand("a", 5)], ["a", "b"], [], []),
        # a full budget of 3: the three oldest fire times start, the fourth waits
        ("budget of 3", 3, None, [cand(x, s) for x, s in zip("abcd", (4, 3, 2, 1))], ["a", "b", "c"], ["d"], []),
        # an empty budget: all wait, nothing is lost while on time
        ("empty budget", 10, 0.5, [cand("a", 1), cand("b", 2)], [], ["b", "a"], []),
        # the job with no tolerance goes before one that tolerates 9 s, at the same fire time
        (
            "tight first",
            1,
            None,
            [cand("loose", 1, tolerance_s=9), cand("tight", 1, tolerance_s=0)],
            ["tight"],
            ["loose"],
            [],
        ),
        # a tolerant job scheduled long ago but whose window is still open waits behind a tight one
        (
            "deadline over fire time",
            1,
            None,
            [cand("loose", 3, offset_s=1, tolerance_s=60), cand("tight", 1)],
            ["tight"],
            ["loose"],
            [],
        ),
        # catchup none: late past the grace -> skipped; on time -> waits
        ("none, late", 1, 0, [cand("old", 40, catchup="none"), cand("new", 5, catchup="none")], [], ["new"], ["old"]),
        # catchup latest: a late run keeps waiting (it is its job's newest)
        ("latest, late", 1, 0, [cand("old", 40, catchup="latest")], [], ["old"], []),
        # catchup all: a late run keeps waiting too
        ("all, late", 1, 0, [cand("old", 40, catchup="all")], [], ["old"], []),
        # every policy: nothing waits past catchup_window_s
        ("past window", 5, None, [cand("old", 120, catchup="all", catchup_window_s=60)], [], [], ["old"]),
    ],
)
def test_the_start_limit_starts_waits_or_skips(case, rate, tokens, line, start, wait, skip):
    a = admit(rate, line, tokens)
    assert ids(a.start) == start, case
    assert ids(a.wait) == wait, case
    assert ids(c for c, _ in a.skip) == skip, case


def test_a_newer_occurrence_of_the_same_job_replaces_a_waiting_one_under_latest_and_none():
    for mode in ("latest", "none"):
        line = [cand("r1", 10, job="j", catchup=mode), cand("r2", 0, job="j", catchup=mode)]
        line[1] = replace(line[1], scheduled_at=line[0].scheduled_at + timedelta(seconds=10))
        a = admit(5, line, tokens=0)
        assert ids(a.wait) == ["r2"] and ids(c for c, _ in a.skip) == ["r1"], mode
        assert "newer occurrence" in a.skip[0][1] and "5 starts/s" in a.skip[0][1]


def test_under_catchup_all_every_occurrence_of_a_job_waits_its_turn():
    line = [cand("r1", 10, job="j", catchup="all"), cand("r2", 0, job="j", catchup="all")]
    line[1] = replace(line[1], scheduled_at=line[0].scheduled_at + timedelta(seconds=10))
    a = admit(5, line, tokens=1)
    assert ids(a.start) == ["r1"] and ids(a.wait) == ["r2"] and a.skip == ()


def test_the_budget_refills_at_the_rate_and_keeps_at_most_one_seconds_worth():
    assert policy.refill(policy.Budget(0, 10.0), 100, 10.25).tokens == pytest.approx(25)
    assert policy.refill(policy.Budget(0, 10.0), 100, 60.0).tokens == 100
    a = admit(100, [cand(f"r{i}", 1) for i in range(30)], tokens=0, at=99.8)
    assert len(a.start) == 20 and len(a.wait) == 10
    assert a.budget.tokens == pytest.approx(0) and a.retry_at == pytest.approx(100.1)  # when the 10 waiting may start


def test_a_node_past_its_limit_starts_the_limit_every_second_and_no_more():
    """Saturation: 300 runs due each second against a limit of 100/s; over 10 simulated
    seconds about 100 start each second, and the newest occurrence of every job still starts."""
    budget, line, started = policy.Budget(100, 0.0), [], 0
    for second in range(10):
        now = NOW + timedelta(seconds=second)
        line += [
            policy.Candidate(f"{j}-{second}", spec(id=f"j{j}"), now - timedelta(seconds=1), now) for j in range(300)
        ]
        for tick in range(10):  # the loop wakes ten times a second
            a = policy.start_admission(100, budget, line, now + timedelta(seconds=tick / 10), second + tick / 10)
            budget, line, started = a.budget, list(a.wait), started + len(a.start)
    assert 900 <= started <= 1100
    assert len(line) <= 300  # one waiting occurrence per job at most: the older ones were replaced
