"""What an overloaded node sheds (chronod.core.overload), with `now` as an argument."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from chronod.core import overload, policy
from chronod.core.model import JobSpec

NOW = datetime(2026, 12, 6, 12, 0, 0, tzinfo=timezone.utc)
WHY = overload.reason("n0", 10.0)


def cand(rid: str, late_s: float, job: str = "", catchup: str = "latest", skippable: bool = True) -> policy.Candidate:
    spec = JobSpec(id=job or rid, owner="t", schedule="@every 10s", command="true", idempotency_class="idempotent")
    at = NOW - timedelta(seconds=late_s)
    return policy.Candidate(rid, replace(spec, catchup=catchup), at, at, skippable)


def test_a_line_that_starts_within_the_bound_at_the_node_s_rate_is_kept_whole():
    line = [cand(f"r{i}", 0.1) for i in range(10)]
    keep, shed = overload.shed(line, 20.0, NOW, WHY)  # the 10th starts 0.45 s from now
    assert keep == line and shed == []


def test_the_runs_that_would_start_past_the_bound_are_shed_and_the_rest_move_up():
    # 10 a second: the 11th kept would start 1 s from now, 1.1 s after its fire time
    line = [cand(f"r{i}", 0.1) for i in range(30)]
    keep, shed = overload.shed(line, 10.0, NOW, WHY)
    assert [c.run_id for c in keep] == [f"r{i}" for i in range(10)]
    assert len(shed) == 20 and {why for _, why in shed} == {WHY}


def test_runs_already_later_than_the_bound_are_shed_first_and_the_newer_start_on_time():
    line = [cand("old1", 3.0), cand("old2", 1.5), cand("new1", 0.2), cand("new2", 0.0)]
    keep, shed = overload.shed(line, 4.0, NOW, WHY)
    assert [c.run_id for c in keep] == ["new1", "new2"]
    assert [c.run_id for c, _ in shed] == ["old1", "old2"]


def test_retries_manual_runs_and_a_backlog_under_catchup_all_are_never_shed():
    line = [cand("retry", 5.0, skippable=False), cand("all", 5.0, catchup="all"), cand("latest", 5.0)]
    keep, shed = overload.shed(line, 1.0, NOW, WHY)
    assert [c.run_id for c in keep] == ["retry", "all"]
    assert [c.run_id for c, _ in shed] == ["latest"]


def test_a_node_is_overloaded_when_it_leaves_a_run_waiting_late_and_stays_so_for_a_while():
    assert not overload.late([cand("burst", overload.OVERLOAD_AFTER_S - 0.1)], NOW)
    assert overload.late([cand("a", 0.1), cand("b", overload.OVERLOAD_AFTER_S)], NOW)
    assert not overload.late([cand("retry", 9.0, skippable=False), cand("all", 9.0, catchup="all")], NOW)
    assert not overload.overloaded(None, 100.0)
    assert overload.overloaded(100.0 - overload.OVERLOAD_HOLD_S + 0.1, 100.0)
    assert not overload.overloaded(100.0 - overload.OVERLOAD_HOLD_S, 100.0)


def test_a_run_left_waiting_past_the_lag_bound_makes_the_node_overloaded_at_once():
    """A node only now and then past its ceiling must not start what it keeps later than
    the bound while it waits to count as overloaded (it waited 2 s: p99 1.9 s)."""
    assert overload.OVERLOAD_AFTER_S <= overload.OVERLOAD_LAG_S
    assert overload.late([cand("a", overload.OVERLOAD_LAG_S)], NOW)
    assert not overload.late([cand("a", overload.OVERLOAD_LAG_S - 0.1)], NOW)


def test_the_start_rate_is_per_second_spent_starting_so_an_idle_node_does_not_shed_more_and_more():
    # (monotonic, runs started, seconds spent starting them)
    starts = [(90.0, 500, 1.0), (96.0, 40, 0.2), (98.0, 40, 0.2), (99.5, 20, 0.1)]
    assert overload.start_rate(starts, 100.0) == 100 / 0.5  # the last 5 s: idle most of it
    assert overload.started_per_s(starts, 100.0) == 100 / overload.RATE_WINDOW_S
    assert overload.start_rate([], 100.0) == float("inf")
    assert overload.start_rate([(99.0, 10, 0.0)], 100.0) == float("inf")  # the simulated clock


def test_at_an_unknown_rate_only_what_is_already_late_is_shed():
    line = [cand("late", 1.5), *(cand(f"r{i}", 0.5) for i in range(100))]
    keep, shed = overload.shed(line, float("inf"), NOW, WHY)
    assert [c.run_id for c, _ in shed] == ["late"] and len(keep) == 100


def test_the_reason_names_the_node_its_starts_and_the_bound():
    why = overload.reason("n0", 52.4)
    assert why == (
        "node n0 was overloaded: it started 52 runs/s, fewer than fell due; "
        "shed to keep the fire lag of what it starts under 1 s"
    )
    assert overload.shed_record("skipped_outage", why)
    assert not overload.shed_record("skipped_outage", "this node was at its start limit (10 starts/s)")
