"""Which past occurrences a backfill runs, and when the next may start (pure: no database,
no clock). The history is built by hand; `missed` is the audit the choice must agree with."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from chronod.core import backfill as bf
from chronod.core import history
from chronod.core.model import JobSpec
from chronod.core.schedule import compile_schedule
from chronod.store.api import Pruned
from tests.unit.test_history import CountingSchedule, T, run, spec

UTC = timezone.utc
NOW = T("2026-03-10 09:00")
DAILY = spec(schedule="0 2 * * *")
SCHED = compile_schedule("0 2 * * *", "UTC")
WEEK = dict(start=T("2026-03-03 00:00"), end=T("2026-03-09 23:59"), now=NOW)


def days(choice: bf.Choice) -> list[str]:
    return [p.occurrence.scheduled_at.strftime("%m-%d") for p in choice.picks]


def history_of_a_bad_week() -> list:
    return [
        run(DAILY, "2026-03-03 02:00", "succeeded"),
        run(DAILY, "2026-03-04 02:00", "failed", exit_code=1),
        # 03-05: no record at all (the daemon was down, nothing caught it up)
        run(DAILY, "2026-03-06 02:00", "skipped_outage"),
        run(DAILY, "2026-03-07 02:00", "timed_out"),
        run(DAILY, "2026-03-08 02:00", "lost"),
        run(DAILY, "2026-03-09 02:00", "succeeded"),
    ]


def test_only_missed_runs_exactly_what_the_missed_command_reports_oldest_first():
    runs = history_of_a_bad_week()
    choice = bf.choose(DAILY, SCHED, runs, only="missed", **WEEK)
    audit = [m for m in history.missed([DAILY], runs, since=WEEK["start"], now=NOW) if m.scheduled_at <= WEEK["end"]]
    assert days(choice) == ["03-04", "03-05", "03-06", "03-07", "03-08"]
    assert [p.occurrence.run_id for p in choice.picks] == [m.run_id for m in audit]
    assert [p.was for p in choice.picks] == ["failed", history.NO_RECORD, "skipped_outage", "timed_out", "lost"]


def test_only_failed_runs_the_runs_that_ended_failed_timed_out_or_lost():
    choice = bf.choose(DAILY, SCHED, history_of_a_bad_week(), only="failed", **WEEK)
    assert days(choice) == ["03-04", "03-07", "03-08"]


def test_only_all_runs_every_occurrence_of_the_range_even_those_that_succeeded():
    choice = bf.choose(DAILY, SCHED, history_of_a_bad_week(), only="all", **WEEK)
    assert days(choice) == ["03-03", "03-04", "03-05", "03-06", "03-07", "03-08", "03-09"]


def test_each_pick_keeps_the_occurrences_own_run_id_so_a_keyed_job_dedupes():
    choice = bf.choose(DAILY, SCHED, [], only="all", start=T("2026-03-04 02:00"), end=T("2026-03-04 02:00"), now=NOW)
    (pick,) = choice.picks
    assert pick.occurrence.run_id == run(DAILY, "2026-03-04 02:00", "pending").run_id
    assert pick.occurrence.scheduled_at == datetime(2026, 3, 4, 2, 0, tzinfo=UTC)


def test_both_ends_of_the_range_are_included():
    choice = bf.choose(DAILY, SCHED, [], only="all", start=T("2026-03-04 02:00"), end=T("2026-03-06 02:00"), now=NOW)
    assert days(choice) == ["03-04", "03-05", "03-06"]


def test_a_run_in_flight_is_never_picked_and_says_so():
    runs = [run(DAILY, "2026-03-04 02:00", "running"), run(DAILY, "2026-03-05 02:00", "retry_wait")]
    choice = bf.choose(DAILY, SCHED, runs, only="all", start=T("2026-03-04 00:00"), end=T("2026-03-05 23:00"), now=NOW)
    assert choice.picks == ()
    assert [x.state for x in choice.left] == ["running", "retry_wait"]
    assert all("in flight" in x.reason for x in choice.left)


def test_occurrences_not_due_yet_are_never_run():
    choice = bf.choose(DAILY, SCHED, [], only="all", start=T("2026-03-09 00:00"), end=T("2026-03-12 00:00"), now=NOW)
    assert days(choice) == ["03-09", "03-10"]
    jittered = spec(tolerance_s=3600)
    early = T("2026-03-10 02:00") + timedelta(seconds=1)
    choice = bf.choose(jittered, SCHED, [], only="all", start=T("2026-03-10 00:00"), end=early, now=early)
    assert choice.picks == () and [x.state for x in choice.left] == [history.NOT_DUE]


def test_pruned_occurrences_are_left_out_of_missed_with_the_retention_named():
    mark = Pruned("billing-export", through=T("2026-03-05 02:00"), kept_s=3 * 86400, at=NOW)
    runs = [r for r in history_of_a_bad_week() if r.scheduled_at > mark.through]
    choice = bf.choose(DAILY, SCHED, runs, only="missed", pruned=mark, **WEEK)
    assert days(choice) == ["03-06", "03-07", "03-08"]
    pruned = [x for x in choice.left if x.state == "pruned"]
    assert [x.occurrence.scheduled_at.day for x in pruned] == [3, 4, 5]
    assert "pruned (history kept 3 days)" in pruned[0].reason and "--only all" in pruned[0].reason


def test_only_all_runs_pruned_occurrences_too():
    mark = Pruned("billing-export", through=T("2026-03-05 02:00"), kept_s=3 * 86400, at=NOW)
    choice = bf.choose(DAILY, SCHED, [], only="all", pruned=mark, **WEEK)
    assert len(choice.picks) == 7


def test_occurrences_before_the_job_was_registered_are_not_missed():
    spans = [(T("2026-03-06 12:00"), None)]
    choice = bf.choose(DAILY, SCHED, [], only="missed", spans=spans, **WEEK)
    assert days(choice) == ["03-07", "03-08", "03-09"]
    assert {x.state for x in choice.left} == {history.NOT_REGISTERED}


def test_a_range_that_ends_before_it_starts_is_refused():
    with pytest.raises(bf.Refused, match="before --from"):
        bf.choose(DAILY, SCHED, [], only="all", start=T("2026-03-05 00:00"), end=T("2026-03-04 00:00"), now=NOW)


def test_a_range_of_too_many_occurrences_is_refused():
    minutely = spec(schedule="* * * * *")
    with pytest.raises(bf.Refused, match="shorter range"):
        bf.choose(
            minutely,
            compile_schedule("* * * * *", "UTC"),
            [],
            only="all",
            start=T("2026-01-01 00:00"),
            end=T("2026-03-01 00:00"),
            now=NOW,
        )


@pytest.mark.parametrize("only", ["all", "missed", "failed"])
def test_ten_years_of_a_job_every_second_is_refused_before_the_range_is_walked(only):
    every_second = spec(schedule="@every 1s")
    counting = CountingSchedule("@every 1s")
    with pytest.raises(bf.Refused, match=r"more than 100,000 occurrences of .*--to 2016-01-02T03:46:39Z"):
        bf.choose(
            every_second, counting, [], only=only, start=T("2016-01-01 00:00"), end=T("2026-01-01 00:00"), now=NOW
        )
    assert counting.produced <= bf.MAX_RANGE + 1


def test_an_unsafe_job_is_refused_without_allow_unsafe_and_a_reason():
    unsafe = JobSpec(id="pay", owner="finance", schedule="0 2 * * *", command="true", idempotency_class="unsafe")
    assert "--allow-unsafe" in bf.refusal(unsafe, allow_unsafe=False, reason="owner agreed")
    assert "--reason" in bf.refusal(unsafe, allow_unsafe=True, reason="  ")
    assert bf.refusal(unsafe, allow_unsafe=True, reason="INC-7: owner agreed") is None
    assert bf.refusal(DAILY, allow_unsafe=False, reason=None) is None


@pytest.mark.parametrize(
    "overlap, paused, in_flight, job_running, limit, expected",
    [
        ("forbid", False, 0, 0, 4, True),
        ("forbid", False, 1, 1, 4, False),  # one at a time, whatever --max-concurrency says
        ("forbid", False, 0, 1, 4, False),  # a scheduled run is going: wait, never skip
        ("replace", False, 0, 1, 1, False),  # never cancel a run to make room
        ("allow", False, 3, 3, 4, True),
        ("allow", False, 4, 4, 4, False),
        ("allow", True, 0, 0, 4, False),  # a paused job waits
    ],
)
def test_may_start_follows_pause_overlap_and_max_concurrency(overlap, paused, in_flight, job_running, limit, expected):
    sp = spec(overlap=overlap)
    got = bf.may_start(sp, paused=paused, in_flight=in_flight, job_running=job_running, max_concurrency=limit)
    assert got is expected


def test_progress_counts_done_in_flight_and_not_succeeded():
    ids = ["a", "b", "c", "d"]
    states = {"a": "succeeded", "b": "failed", "c": "running"}
    assert bf.progress(states, ids, 3) == {
        "total": 4,
        "started": 3,
        "in_flight": 1,
        "done": 2,
        "succeeded": 1,
        "not_succeeded": 1,
    }


def test_a_backfilled_run_says_so_in_the_audit():
    r = run(DAILY, "2026-03-04 02:00", "succeeded", trigger="backfill")
    assert history.describe_run(r, NOW).endswith("(run by a backfill)")
    answer = history.did_it_run(DAILY, [r], at=T("2026-03-04 02:00"), now=NOW)
    assert answer.yes
    assert history.missed([DAILY], [r], since=T("2026-03-04 00:00"), now=T("2026-03-04 12:00")) == []


def test_the_audit_report_counts_a_backfilled_occurrence_as_run_and_names_the_backfill():
    from chronod.core import report

    runs = [
        run(DAILY, "2026-03-08 02:00", "succeeded", trigger="backfill", attempts=2),
        run(DAILY, "2026-03-09 02:00", "failed", exit_code=1, trigger="backfill"),
    ]
    rep = report.job_report(DAILY, SCHED, runs, start=T("2026-03-08 00:00"), end=T("2026-03-10 00:00"), now=NOW)
    assert rep.totals == {"succeeded": 1, "failed": 1}
    doc = report.to_json(rep, "daily")
    assert [o["trigger"] for o in doc["occurrences"]] == ["backfill", "backfill"]
    assert doc["occurrences"][0]["explanation"] == "run by a backfill"
    assert doc["occurrences"][1]["explanation"].endswith("(run by a backfill)")


def test_the_progress_line_draws_a_bar_of_what_is_done():
    from chronoctl.cmd_backfill import progress_line

    data = {
        "id": 7,
        "progress": bf.progress({"a": "succeeded", "b": "failed", "c": "running"}, ["a", "b", "c", "d"], 3),
    }
    line = progress_line(data)
    assert line.startswith("backfill 7 [" + "#" * 15 + "." * 15 + "] 2/4 done, 1 running, 1 not succeeded")
