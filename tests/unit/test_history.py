"""did-it-run, missed, streaks and silence, from hand-built histories (no database, no clock)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from chronod.core import history as h
from chronod.core.model import JobSpec, RunOn
from chronod.core.occurrence import jitter_offset, manual_run_id, run_id
from chronod.core.schedule import compile_schedule
from chronod.store.api import JobRow, Run

UTC = timezone.utc


def T(s: str) -> datetime:
    """'2026-03-10 02:00' -> aware UTC."""
    return datetime.fromisoformat(s).replace(tzinfo=UTC)


def spec(id="billing-export", schedule="0 2 * * *", owner="finance", **kw) -> JobSpec:
    kw.setdefault("max_silence_s", 2 * 86400)
    return JobSpec(id=id, owner=owner, schedule=schedule, command="true", idempotency_class="idempotent", **kw)


def run(sp: JobSpec, at: str, state: str, *, node=None, key=None, **kw) -> Run:
    """A run of `sp` for the occurrence nominally at `at`, with its real identity."""
    key = key or (f"{sp.id}@{node}" if sp.run_on.each else sp.id)
    sched = T(at)
    fire = sched + timedelta(seconds=jitter_offset(key, sp.tolerance_s))
    defaults = dict(
        attempts=1 if state not in ("pending", "skipped_overlap", "skipped_outage", "skipped_paused") else 0,
        node=node or "web1",
    )
    if state in ("succeeded", "failed", "timed_out"):
        defaults.update(started_at=fire, finished_at=fire + timedelta(seconds=30))
    if state == "running":
        defaults.update(started_at=fire)
    defaults.update(kw)
    return Run(
        run_id=run_id(key, sched), job_id=sp.id, job_key=key, scheduled_at=sched, fire_at=fire, state=state, **defaults
    )


NOW = T("2026-03-10 09:00")
DAILY = spec()


class CountingSchedule:
    """A real schedule that counts the instants it was asked for."""

    def __init__(self, expr: str) -> None:
        self.inner, self.produced = compile_schedule(expr, "UTC"), 0
        self.kind = self.inner.kind

    def fires(self, start, end, limit=None):
        out = self.inner.fires(start, end, limit)
        self.produced += len(out)
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


# --- did-it-run, one occurrence -------------------------------------------------------------


def test_a_succeeded_occurrence_answers_yes():
    a = h.did_it_run(DAILY, [run(DAILY, "2026-03-10 02:00", "succeeded")], now=NOW)
    assert a.yes and a.state == "succeeded"
    assert a.occurrence.scheduled_at == T("2026-03-10 02:00")


def test_the_default_question_is_about_the_latest_due_occurrence_not_an_older_one():
    runs = [run(DAILY, "2026-03-09 02:00", "succeeded"), run(DAILY, "2026-03-10 02:00", "failed", exit_code=3)]
    a = h.did_it_run(DAILY, runs, now=NOW)
    assert not a.yes
    assert a.state == "failed"
    assert "exit code 3" in a.reason


def test_at_picks_the_occurrence_nominally_at_or_just_before_it():
    runs = [run(DAILY, "2026-03-09 02:00", "succeeded"), run(DAILY, "2026-03-10 02:00", "failed", exit_code=1)]
    assert h.did_it_run(DAILY, runs, now=NOW, at=T("2026-03-10 01:59")).yes
    assert not h.did_it_run(DAILY, runs, now=NOW, at=T("2026-03-10 02:00")).yes


@pytest.mark.parametrize(
    "state, words",
    [
        ("timed_out", "timed out"),
        ("skipped_overlap", "overlap policy"),
        ("skipped_outage", "catch-up policy"),
        ("skipped_paused", "paused"),
        ("lost", "lost"),
        ("cancelled", "cancelled"),
    ],
)
def test_each_terminal_failure_state_answers_no_and_says_why(state, words):
    a = h.did_it_run(DAILY, [run(DAILY, "2026-03-10 02:00", state)], now=NOW)
    assert (a.yes, a.state) == (False, state)
    assert words in a.reason


def test_a_running_occurrence_is_not_yet_a_yes():
    a = h.did_it_run(DAILY, [run(DAILY, "2026-03-10 02:00", "running", node="db2")], now=NOW)
    assert (a.yes, a.state) == (False, "running")
    assert "still running on db2" in a.reason


def test_a_retrying_occurrence_names_the_next_attempt():
    r = run(DAILY, "2026-03-10 02:00", "retry_wait", attempts=2, exit_code=7, next_attempt_at=T("2026-03-10 09:05"))
    a = h.did_it_run(DAILY, [r], now=NOW)
    assert a.state == "retry_wait"
    assert "attempt 2 failed (exit code 7)" in a.reason and "2026-03-10T09:05:00Z" in a.reason


def test_an_occurrence_in_the_future_is_not_due_yet():
    a = h.did_it_run(DAILY, [], now=NOW, at=T("2026-03-11 03:00"))
    assert (a.yes, a.state) == (False, h.NOT_DUE)
    assert "2026-03-11T02:00:00Z" in a.reason


def test_an_occurrence_that_fell_due_without_a_row_is_reported_as_no_record():
    a = h.did_it_run(DAILY, [run(DAILY, "2026-03-09 02:00", "succeeded")], now=NOW)
    assert (a.yes, a.state) == (False, h.NO_RECORD)
    assert a.occurrence.run_id == run_id("billing-export", T("2026-03-10 02:00"))
    assert a.occurrence.run_id in a.reason


def test_a_pending_row_past_its_fire_time_says_it_is_late():
    a = h.did_it_run(DAILY, [run(DAILY, "2026-03-10 02:00", "pending")], now=NOW)
    assert a.state == "pending" and "not started yet (late by 7h)" in a.reason


def test_jitter_that_pushes_the_latest_occurrence_past_now_means_the_one_before_is_asked_about():
    sp = spec(tolerance_s=3600)
    off = jitter_offset(sp.id, 3600)
    now = T("2026-03-10 02:00") + timedelta(seconds=off - 1)  # nominally past 02:00, not yet fired
    a = h.did_it_run(sp, [run(sp, "2026-03-09 02:00", "succeeded")], now=now)
    assert a.yes and a.occurrence.scheduled_at == T("2026-03-09 02:00")


# --- did-it-run, a window -------------------------------------------------------------------


def test_any_success_in_the_window_answers_yes():
    hourly = spec(id="sync", schedule="0 * * * *")
    runs = [run(hourly, "2026-03-10 07:00", "succeeded"), run(hourly, "2026-03-10 08:00", "failed", exit_code=1)]
    a = h.did_it_run(hourly, runs, now=NOW, since=NOW - timedelta(hours=3))
    assert a.yes and a.run.scheduled_at == T("2026-03-10 07:00")


def test_a_window_without_success_reports_the_latest_occurrence_and_how_many_failed():
    hourly = spec(id="sync", schedule="0 * * * *")
    runs = [run(hourly, f"2026-03-10 0{h_}:00", "failed", exit_code=2) for h_ in (7, 8)]
    a = h.did_it_run(hourly, runs, now=NOW, since=NOW - timedelta(hours=2, minutes=30))
    assert not a.yes
    assert a.state == h.NO_RECORD  # 09:00 fell due exactly at now and has no row
    assert "none of the 3 occurrences" in a.reason


def test_a_manual_success_in_the_window_counts_and_is_named():
    manual = run(DAILY, "2026-03-10 05:00", "succeeded", key="billing-export", trigger="manual")
    manual.run_id = manual_run_id("billing-export", T("2026-03-10 05:00"))
    runs = [run(DAILY, "2026-03-10 02:00", "failed", exit_code=1), manual]
    a = h.did_it_run(DAILY, runs, now=NOW, since=NOW - timedelta(hours=12))
    assert a.yes and "manual" in a.reason


def test_a_window_of_ten_years_of_a_job_every_second_is_answered_without_walking_all_of_it():
    every_second = spec(id="poll", schedule="@every 1s")
    counting = CountingSchedule("@every 1s")
    runs = [run(every_second, "2026-03-10 08:59:59", "failed", exit_code=1)]
    a = h.did_it_run(every_second, runs, now=NOW, since=NOW - timedelta(days=3650), schedule=counting)
    assert not a.yes
    assert "none of the more than 100,000 occurrences since 2016-03-12T09:00:00Z" in a.reason
    assert counting.produced <= h.MAX_WALK + 1


def test_a_window_of_a_monthly_job_is_walked_whole_without_date_arithmetic_past_the_calendar():
    monthly = spec(id="close", schedule="0 3 1 * *")
    a = h.did_it_run(monthly, [], now=NOW, since=NOW - timedelta(minutes=5))
    assert (a.yes, a.state) == (False, h.NO_OCCURRENCE)


def test_a_window_in_which_nothing_fell_due_says_when_it_will():
    a = h.did_it_run(DAILY, [], now=NOW, since=NOW - timedelta(hours=3))
    assert (a.yes, a.state) == (False, h.NO_OCCURRENCE)
    assert "2026-03-11T02:00:00Z" in a.reason


def test_asking_about_a_moment_and_a_window_at_once_is_refused():
    with pytest.raises(ValueError):
        h.did_it_run(DAILY, [], now=NOW, at=NOW, since=NOW)


# --- run_on: each ---------------------------------------------------------------------------

EACH = spec(id="logrotate", owner="platform", run_on=RunOn(mode="each"))


def test_an_each_job_ran_only_when_every_known_node_succeeded():
    runs = [
        run(EACH, "2026-03-10 02:00", "succeeded", node="a"),
        run(EACH, "2026-03-10 02:00", "failed", node="b", exit_code=1),
    ]
    a = h.did_it_run(EACH, runs, now=NOW)
    assert not a.yes and a.reason.startswith("on b: failed")


def test_an_each_job_reports_a_node_that_has_no_row():
    runs = [run(EACH, "2026-03-10 02:00", "succeeded", node="a")]
    a = h.did_it_run(EACH, runs, now=NOW, nodes=["a", "c"])
    assert (a.yes, a.state) == (False, h.NO_RECORD)
    assert a.occurrence.node == "c" and a.occurrence.job_key == "logrotate@c"


# --- missed ---------------------------------------------------------------------------------


def test_missed_lists_failures_and_occurrences_without_rows_grouped_by_owner():
    hourly = spec(id="sync", schedule="0 * * * *", owner="data")
    runs = [run(DAILY, "2026-03-10 02:00", "failed", exit_code=4)]
    runs += [run(hourly, f"2026-03-10 0{x}:00", "succeeded") for x in range(1, 9) if x != 5]
    got = h.missed([DAILY, hourly], runs, since=T("2026-03-10 00:30"), now=T("2026-03-10 08:30"))
    assert [(m.owner, m.job_id, m.scheduled_at, m.state) for m in got] == [
        ("data", "sync", T("2026-03-10 05:00"), h.NO_RECORD),
        ("finance", "billing-export", T("2026-03-10 02:00"), "failed"),
    ]
    assert list(h.group_by_owner(got)) == ["data", "finance"]


def test_missed_ignores_occurrences_still_inside_their_grace():
    hourly = spec(id="sync", schedule="0 * * * *")
    assert h.missed([hourly], [], since=T("2026-03-10 07:30"), now=T("2026-03-10 08:00:30")) == []
    got = h.missed([hourly], [], since=T("2026-03-10 07:30"), now=T("2026-03-10 08:01:01"))
    assert [m.run_id for m in got] == [run_id("sync", T("2026-03-10 08:00"))]


def test_missed_does_not_count_running_or_retrying_runs_but_counts_overdue_pending_ones():
    hourly = spec(id="sync", schedule="0 * * * *")
    runs = [
        run(hourly, "2026-03-10 06:00", "running"),
        run(hourly, "2026-03-10 07:00", "retry_wait"),
        run(hourly, "2026-03-10 08:00", "pending"),
    ]
    got = h.missed([hourly], runs, since=T("2026-03-10 05:30"), now=T("2026-03-10 08:10"))
    assert [(m.scheduled_at, m.state) for m in got] == [(T("2026-03-10 08:00"), "pending")]


def test_missed_expects_nothing_before_a_job_was_known():
    hourly = spec(id="sync", schedule="0 * * * *")
    got = h.missed(
        [hourly],
        [],
        since=T("2026-03-10 00:00"),
        now=T("2026-03-10 08:30"),
        known={"sync": [(T("2026-03-10 07:30"), None)]},
    )
    assert [m.scheduled_at for m in got] == [T("2026-03-10 08:00")]


def test_missed_expects_nothing_of_a_disabled_job():
    assert h.missed([spec(enabled=False)], [], since=T("2026-03-09 00:00"), now=NOW) == []


def test_missed_computes_each_jobs_per_known_node():
    got = h.missed(
        [EACH],
        [run(EACH, "2026-03-10 02:00", "succeeded", node="a")],
        since=T("2026-03-10 00:00"),
        now=NOW,
        nodes=["a", "b"],
    )
    assert [(m.job_key, m.state) for m in got] == [("logrotate@b", h.NO_RECORD)]


def test_missed_reports_failed_runs_of_jobs_no_longer_registered_under_no_owner():
    gone = spec(id="old-job")
    got = h.missed([], [run(gone, "2026-03-10 02:00", "failed", exit_code=1)], since=T("2026-03-10 00:00"), now=NOW)
    assert [(m.owner, m.job_id) for m in got] == [("", "old-job")]


# --- streaks and silence ---------------------------------------------------------------------


def test_the_success_streak_counts_back_to_the_first_failure_skipping_active_runs():
    runs = [
        run(DAILY, f"2026-03-0{d} 02:00", s)
        for d, s in [(3, "succeeded"), (4, "failed"), (5, "succeeded"), (6, "succeeded"), (7, "running")]
    ]
    assert h.success_streak(runs) == 2
    assert h.success_streak([]) == 0


def test_silence_compares_the_age_of_the_last_success_with_max_silence():
    s = h.silence(DAILY, T("2026-03-08 02:00"), NOW)
    assert s.silent and s.age_s == 2 * 86400 + 7 * 3600
    assert not h.silence(DAILY, T("2026-03-09 02:00"), NOW).silent


def test_silence_without_any_success_counts_from_when_the_job_was_known():
    assert h.silence(DAILY, None, NOW).age_s is None
    assert h.silence(DAILY, None, NOW, known_since=T("2026-03-01 00:00")).silent


def test_the_last_success_is_the_one_that_finished_last():
    runs = [
        run(DAILY, "2026-03-08 02:00", "succeeded"),
        run(DAILY, "2026-03-09 02:00", "succeeded"),
        run(DAILY, "2026-03-10 02:00", "failed"),
    ]
    assert h.last_success(runs).scheduled_at == T("2026-03-09 02:00")


def registered(sp: JobSpec, updated_at: str = "2026-03-01 00:00", **kw) -> JobRow:
    return JobRow(job_id=sp.id, spec=sp, spec_hash="h", node="web1", updated_at=T(updated_at), **kw)


def test_the_latest_success_per_job_is_its_latest_finish_and_failures_do_not_count():
    other = spec(id="purge", owner="privacy")
    runs = [
        run(DAILY, "2026-03-08 02:00", "succeeded"),
        run(DAILY, "2026-03-09 02:00", "succeeded"),
        run(DAILY, "2026-03-10 02:00", "failed"),
        run(other, "2026-03-07 02:00", "succeeded"),
        run(other, "2026-03-08 02:00", "timed_out"),
    ]
    assert h.latest_successes(runs) == {"billing-export": T("2026-03-09 02:00:30"), "purge": T("2026-03-07 02:00:30")}


def test_a_job_whose_only_successes_are_older_than_max_silence_is_silent_since_the_switch_tripped():
    last = T("2026-03-07 02:00:30")  # 3 days before NOW; the limit is 2 days
    [q] = h.silent_jobs([registered(DAILY, "2026-03-09 12:00")], {DAILY.id: last}, NOW)
    assert (q.job_id, q.owner, q.last_success) == ("billing-export", "finance", last)
    assert q.silence_s == (NOW - last).total_seconds()
    assert q.max_silence_s == 2 * 86400 and q.silent_since == last + timedelta(days=2)
    assert h.silent_jobs([registered(DAILY)], {DAILY.id: T("2026-03-08 09:30")}, NOW) == []


def test_a_job_that_never_succeeded_is_silent_once_max_silence_has_passed_since_its_last_change():
    [q] = h.silent_jobs([registered(DAILY, "2026-03-07 00:00")], {}, NOW)
    assert q.last_success is None and q.silent_since == T("2026-03-09 00:00")
    assert h.silent_jobs([registered(DAILY, "2026-03-09 00:00")], {}, NOW) == []


def test_a_job_that_never_succeeded_is_silent_from_its_registration_not_from_its_last_edit():
    # registered 03-01, its command edited 03-09 12:00, never succeeded; max_silence_s 2 days
    row = registered(DAILY, "2026-03-09 12:00")
    spans = {DAILY.id: [(T("2026-02-01 00:00"), T("2026-02-02 00:00")), (T("2026-03-01 00:00"), None)]}
    [q] = h.silent_jobs([row], {}, NOW, spans)
    assert q.last_success is None and q.silent_since == T("2026-03-03 00:00")
    assert h.known_since(spans[DAILY.id]) == T("2026-03-01 00:00")
    assert h.known_since([(T("2026-03-01 00:00"), T("2026-03-02 00:00"))]) == T("2026-03-01 00:00")
    assert h.known_since([]) is None


def test_paused_disabled_and_reboot_jobs_are_never_silent_and_the_rest_come_in_id_order():
    old = T("2026-01-01 00:00")
    rows = [
        registered(spec(id="zeta")),
        registered(spec(id="paused"), paused=True),
        registered(spec(id="off", enabled=False)),
        registered(spec(id="boot", schedule="@reboot", max_silence_s=None)),
        registered(spec(id="alpha")),
    ]
    got = h.silent_jobs(rows, {r.job_id: old for r in rows}, NOW)
    assert [q.job_id for q in got] == ["alpha", "zeta"]


def test_only_jobs_without_a_success_scheduled_inside_their_max_silence_need_their_last_success_looked_up():
    hourly = spec(id="hourly", schedule="0 * * * *", max_silence_s=3 * 3600)
    rows = [
        registered(DAILY),
        registered(hourly),
        registered(spec(id="purge")),
        registered(spec(id="paused"), paused=True),
    ]
    recent = [
        run(DAILY, "2026-03-10 02:00", "succeeded"),
        run(hourly, "2026-03-10 05:00", "succeeded"),
        run(hourly, "2026-03-10 08:00", "failed"),
        h.Mark("x", "purge", "purge", T("2026-03-10 02:00"), "failed", "schedule"),
    ]
    assert [j.job_id for j in h.silence_suspects(rows, recent, NOW)] == ["hourly", "purge"]
    recent.append(h.Mark("y", "hourly", "hourly", T("2026-03-10 06:00"), "succeeded", "schedule"))
    assert [j.job_id for j in h.silence_suspects(rows, recent, NOW)] == ["purge"]


def test_a_manual_run_id_never_equals_the_scheduled_one_at_the_same_instant():
    at = T("2026-03-10 02:00")
    assert manual_run_id("billing-export", at) != run_id("billing-export", at)
    assert len(manual_run_id("billing-export", at)) == 16


# --- the gap search equals the full search -----------------------------------------------------


@pytest.mark.parametrize(
    "expr, tz, start, days",
    [
        ("0 * * * *", "UTC", "2026-03-01 00:00", 3),
        ("*/20 * * * *", "UTC", "2026-03-01 00:00", 1),
        ("30 2 * * *", "America/New_York", "2026-03-01 00:00", 14),  # spring forward on 03-08
        ("0 1 * * *", "America/New_York", "2026-10-25 00:00", 14),  # fall back on 11-01
        ("15 * * * *", "Europe/Berlin", "2026-03-28 00:00", 2),  # spring forward on 03-29
        ("0 9 * * 1-5", "UTC", "2026-03-01 00:00", 21),
    ],
)
def test_missed_finds_exactly_the_occurrences_without_rows_whatever_the_gaps(expr, tz, start, days):
    import random

    from chronod.core.schedule import compile_schedule

    sp = spec(id="gappy", schedule=expr, timezone=tz)
    sched = compile_schedule(expr, tz)
    since, now = T(start), T(start) + timedelta(days=days, seconds=90)
    fires = sched.fires(since, now)
    rng = random.Random(f"{expr}{tz}")
    for trial in range(8):
        absent = set(rng.sample(fires, k=min(len(fires), trial)))
        if trial == 7:
            absent |= set(fires[:3]) | set(fires[-2:])  # at both edges of the window
        runs = [run(sp, at.strftime("%Y-%m-%d %H:%M:%S"), "succeeded") for at in fires if at not in absent]
        got = h.missed([sp], runs, since=since, now=now)
        assert {m.scheduled_at for m in got} == absent


def test_missed_with_slim_marks_and_only_the_unhappy_runs_answers_as_with_every_run():
    hourly = spec(id="sync", schedule="0 * * * *", owner="data")
    runs = [
        run(hourly, f"2026-03-10 0{x}:00", "failed" if x == 3 else "succeeded", exit_code=1)
        for x in range(1, 9)
        if x != 5
    ]
    marks = [h.Mark(r.run_id, r.job_id, r.job_key, r.scheduled_at, r.state, r.trigger) for r in runs]
    unhappy = [r for r in runs if r.state != "succeeded"]
    kw = dict(since=T("2026-03-10 00:30"), now=T("2026-03-10 08:30"))
    full = h.missed([hourly], runs, **kw)
    slim = h.missed([hourly], unhappy, marks=marks, **kw)
    assert (
        [(m.scheduled_at, m.state) for m in slim]
        == [(m.scheduled_at, m.state) for m in full]
        == [(T("2026-03-10 03:00"), "failed"), (T("2026-03-10 05:00"), h.NO_RECORD)]
    )


# --- occurrences are expected only while the job was registered ------------------------------

EVERY_2S = spec(id="tick", schedule="@every 2s", max_silence_s=60)
LIVED = [(T("2026-03-10 06:48:00"), T("2026-03-10 06:50:00"))]


@pytest.mark.parametrize(
    "fire_at, expected",
    [
        ("2026-03-10 06:47:59", False),  # before the registration
        ("2026-03-10 06:48:00", True),  # the registration instant itself
        ("2026-03-10 06:49:00", True),
        ("2026-03-10 06:50:00", True),  # the removal instant itself
        ("2026-03-10 06:50:01", False),  # after the removal
    ],
)
def test_an_occurrence_is_expected_only_inside_a_registration(fire_at, expected):
    assert h.registered(LIVED, T(fire_at)) is expected


def test_without_any_record_of_registration_every_occurrence_is_expected():
    assert h.registered(None, T("2000-01-01 00:00"))
    assert not h.registered([], T("2000-01-01 00:00"))


def test_missed_expects_nothing_before_a_registration_nor_after_a_removal():
    got = h.missed([EVERY_2S], [], since=T("2026-03-10 00:00"), now=T("2026-03-10 09:00"), known={"tick": LIVED})
    assert len(got) == 61  # 06:48:00 .. 06:50:00 every 2 s, none recorded
    assert {m.state for m in got} == {h.NO_RECORD}
    assert min(m.fire_at for m in got) == T("2026-03-10 06:48:00")
    assert max(m.fire_at for m in got) == T("2026-03-10 06:50:00")


def test_missed_expects_nothing_while_a_job_was_removed_between_two_registrations():
    spans = [(T("2026-03-10 01:00"), T("2026-03-10 03:00")), (T("2026-03-10 06:00"), None)]
    hourly = spec(id="sync", schedule="0 * * * *")
    got = h.missed([hourly], [], since=T("2026-03-10 00:00"), now=T("2026-03-10 08:30"), known={"sync": spans})
    assert [m.scheduled_at.hour for m in got] == [1, 2, 3, 6, 7, 8]


def test_did_it_run_right_after_a_first_registration_says_nothing_has_fallen_due_yet():
    a = h.did_it_run(DAILY, [], now=NOW, spans=[(T("2026-03-10 08:00"), None)])
    assert not a.yes and a.state == h.NO_OCCURRENCE
    assert "registered at 2026-03-10T08:00:00Z" in a.reason and "no record" not in a.reason


def test_did_it_run_at_an_occurrence_before_the_registration_says_not_registered():
    a = h.did_it_run(DAILY, [], now=NOW, at=T("2026-03-09 02:00"), spans=[(T("2026-03-10 08:00"), None)])
    assert not a.yes and a.state == h.NOT_REGISTERED
    assert "before the job was first registered" in a.reason


def test_did_it_run_since_ignores_occurrences_of_a_removed_job_after_its_removal():
    spans = [(T("2026-03-01 00:00"), T("2026-03-09 12:00"))]
    a = h.did_it_run(
        DAILY,
        [run(DAILY, "2026-03-09 02:00", "failed", exit_code=1)],
        now=NOW,
        since=T("2026-03-08 12:00"),
        spans=spans,
    )
    assert not a.yes and a.state == "failed"  # the 03-09 run, not the unexpected 03-10 one


def test_did_it_run_still_judges_a_row_that_exists_outside_the_registration():
    a = h.did_it_run(
        DAILY, [run(DAILY, "2026-03-10 02:00", "succeeded")], now=NOW, spans=[(T("2026-03-10 08:00"), None)]
    )
    assert a.yes


def test_the_audit_report_counts_occurrences_outside_the_registration_as_not_registered_never_missing():
    from chronod.core import report
    from chronod.core.schedule import compile_schedule

    hourly = spec(id="sync", schedule="0 * * * *")
    runs = [run(hourly, "2026-03-10 07:00", "succeeded")]
    rep = report.job_report(
        hourly,
        compile_schedule("0 * * * *", "UTC"),
        runs,
        start=T("2026-03-10 00:00"),
        end=T("2026-03-11 00:00"),
        now=NOW,
        spans=[(T("2026-03-10 06:48"), None)],
    )
    assert [line.scheduled_at.hour for line in rep.lines] == list(range(7, 24))
    assert rep.totals == {"succeeded": 1, "missing": 2, "not_due": 14}  # 08:00 and 09:00 have no row
    assert rep.not_registered == 7  # 00:00 .. 06:00
    doc = report.to_json(rep, "hourly")
    assert doc["not_registered"] == 7 and doc["registered"] == [{"from": "2026-03-10T06:48:00+00:00", "until": None}]
    assert "Not registered: 7 occurrence(s)" in report.to_markdown(rep, "hourly", NOW)


# --- held on purpose: deferred by a window, held by a pause ----------------------------------------

WINDOW_END = T("2026-03-10 10:00")
DEFERRED_ROW = dict(error="deferred by maintenance window swap-disks (CHG-7 (disks)) until 2026-03-10T10:00:00Z")


def test_a_due_occurrence_a_window_deferred_says_which_window_why_and_until_when():
    r = run(DAILY, "2026-03-10 02:00", "pending", next_attempt_at=WINDOW_END, **DEFERRED_ROW)
    a = h.did_it_run(DAILY, [r], now=NOW)
    assert not a.yes and a.state == h.DEFERRED
    assert (a.hold.kind, a.hold.name, a.hold.reason, a.hold.until) == (
        "window",
        "swap-disks",
        "CHG-7 (disks)",
        WINDOW_END,
    )
    assert "deferred by maintenance window swap-disks (CHG-7 (disks)) until 2026-03-10T10:00:00Z" in a.reason
    assert "not started yet" not in a.reason
    [m] = h.missed([DAILY], [r], since=NOW - timedelta(days=1), now=NOW)
    assert m.state == h.DEFERRED and m.hold == a.hold and m.reason == a.reason


def test_a_due_occurrence_of_a_paused_job_says_who_paused_it_why_and_until_when():
    from chronod.core.blackout import Pause

    r = run(DAILY, "2026-03-10 02:00", "pending")
    tag = Pause("tag", "finance-jobs", "INC-4 replica lag", "alice", T("2026-03-10 01:00"), T("2026-03-10 12:00"))
    other = Pause("tag", "db", "not this one", "bob", T("2026-03-10 01:00"))
    sp = spec(tags=("finance-jobs",))
    a = h.did_it_run(sp, [r], now=NOW, pauses=[other, tag])
    assert a.state == h.HELD_PAUSED and (a.hold.kind, a.hold.name, a.hold.by) == ("pause", "tag finance-jobs", "alice")
    assert "held by a pause (tag finance-jobs) by alice: INC-4 replica lag until 2026-03-10T12:00:00Z" in a.reason
    [m] = h.missed([sp], [r], since=NOW - timedelta(days=1), now=NOW, pauses=[tag])
    assert m.state == h.HELD_PAUSED and m.hold == a.hold
    # a pause comes before a window; without either, the row is just late
    both = run(DAILY, "2026-03-10 02:00", "pending", next_attempt_at=WINDOW_END, **DEFERRED_ROW)
    assert h.did_it_run(sp, [both], now=NOW, pauses=[tag]).state == h.HELD_PAUSED
    plain = h.did_it_run(DAILY, [r], now=NOW, pauses=[tag])
    assert plain.state == "pending" and plain.hold is None and "not started yet" in plain.reason


def test_a_due_occurrence_waiting_for_a_resource_slot_says_which_resource_and_since_when():
    from chronod.core.blackout import slot_wait

    sp = spec(resource="db", catchup_window_s=7200)
    give_up = T("2026-03-10 04:00")
    r = run(sp, "2026-03-10 02:00", "pending", error=slot_wait("db", 2, T("2026-03-10 02:00")), next_attempt_at=give_up)
    a = h.did_it_run(sp, [r], now=NOW.replace(hour=3))
    assert not a.yes and a.state == h.WAITING, a
    assert (a.hold.kind, a.hold.name, a.hold.since, a.hold.until) == ("resource", "db", T("2026-03-10 02:00"), give_up)
    assert a.reason.startswith(
        "waiting for a slot of resource db (max_concurrency 2, every slot taken) since 2026-03-10T02:00:00Z"
    ), a.reason
    assert "late" not in a.reason and "ends skipped_resource at 2026-03-10T04:00:00Z" in a.reason
    [m] = h.missed([sp], [r], since=NOW - timedelta(days=1), now=NOW.replace(hour=3))
    assert m.state == h.WAITING and m.hold == a.hold and m.reason == a.reason
    # a pause of the job comes first; the row's own description names the resource too
    assert "resource db" in h.describe_run(r, NOW.replace(hour=3), sp)


def test_an_audit_report_of_more_occurrences_than_it_can_list_is_refused_before_walking_them():
    from chronod.core import report

    every_second = spec(id="poll", schedule="@every 1s")
    counting = CountingSchedule("@every 1s")
    with pytest.raises(
        report.TooLong, match=r"poll \(@every 1s\) falls due more than 600,000 times .*--to 2016-01-07T22:40:00Z"
    ):
        report.job_report(every_second, counting, [], start=T("2016-01-01 00:00"), end=T("2026-01-01 00:00"), now=NOW)
    assert counting.produced <= report.MAX_LINES + 1


def test_a_cron_schedule_that_cannot_exceed_the_limit_is_walked_once_not_twice():
    from chronod.core import report

    five = spec(id="rollup", schedule="*/5 * * * *")
    counting = CountingSchedule("*/5 * * * *")
    r = report.job_report(five, counting, [], start=T("2026-01-01 00:00"), end=T("2026-04-01 00:00"), now=NOW)
    assert len(r.lines) == 90 * 288 and counting.produced == len(r.lines)
    every_minute = CountingSchedule("* * * * *")  # a year of it could exceed the limit: counted first
    with pytest.raises(report.TooLong):
        report.job_report(
            spec(id="m", schedule="* * * * *"),
            every_minute,
            [],
            start=T("2025-01-01 00:00"),
            end=T("2026-06-01 00:00"),
            now=NOW,
        )


def test_an_occurrence_an_edit_withdrew_before_it_fell_due_is_not_missed():
    """The README's tour: `edit` changes the schedule, the daemon cancels the pending
    occurrence the old schedule had stored, and `missed` must not call that a miss."""
    every5 = spec("demo.heartbeat", "@every 5s", max_silence_s=3600)
    edited_at = T("2026-03-10 08:59:58")
    withdrawn = run(every5, "2026-03-10 09:00", "cancelled", attempts=0, finished_at=edited_at)
    withdrawn.error = "schedule changed before it fell due"
    late = run(every5, "2026-03-10 08:59:55", "cancelled", attempts=0, finished_at=T("2026-03-10 08:59:57"))
    got = h.missed([], [withdrawn, late], since=T("2026-03-10 08:59"), now=T("2026-03-10 09:00:10"), grace_s=0)
    assert [m.run_id for m in got] == [late.run_id]  # cancelled after it fell due: that one is a miss
