"""chronod.notify.core: one notice per change of state, decided from the history alone."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from chronod.core.model import JobSpec, Notify
from chronod.core.occurrence import run_id
from chronod.core.schedule import compile_schedule
from chronod.notify import core
from chronod.notify.core import NotifyState, decide
from chronod.store.api import Run

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
ROUTE = Notify(on=("failed", "timed_out", "lost", "silence", "recovered", "skipped_overlap"), webhook="http://x/")


def spec(**kw) -> JobSpec:
    base = dict(
        id="purge",
        owner="team-a",
        schedule="* * * * *",
        command="true",
        idempotency_class="idempotent",
        max_silence_s=600,
        notify=(ROUTE,),
    )
    return JobSpec(**{**base, **kw})


def run(minute: int, state: str, job: str = "purge", **kw) -> Run:
    at = T0 + timedelta(minutes=minute)
    return Run(
        run_id=run_id(job, at),
        job_id=job,
        job_key=job,
        scheduled_at=at,
        fire_at=at,
        state=state,
        attempts=1,
        started_at=at,
        finished_at=at + timedelta(seconds=5),
        updated_at=at + timedelta(seconds=5),
        exit_code=0 if state == "succeeded" else (1 if state == "failed" else None),
        **kw,
    )


def events(notices) -> list[str]:
    return [n.event for n in notices]


def test_a_run_the_reader_knows_is_new_is_decided_though_it_shows_a_time_before_the_seen_mark():
    """After a wall-clock step back the next run ends at a time before the mark: by the mark
    alone it is one already seen. Named in `news` it is decided, and the mark stays where it
    was, so the runs seen before the step are not decided again."""
    seen, st = decide(spec(), [run(0, "failed"), run(10, "succeeded")], NotifyState(), T0 + timedelta(minutes=11))
    assert events(seen) == ["failed", "recovered"] and st.condition == "ok"
    after_step = run(5, "failed", job="purge")  # ended after the step, stamped 5 minutes before the success
    later = T0 + timedelta(minutes=6)
    quiet, same = decide(spec(), [after_step], st, later)
    assert quiet == [] and same.condition == "ok"  # the mark alone takes it for a run seen
    told, new = decide(spec(), [run(0, "failed"), after_step], st, later, news={after_step.run_id})
    assert events(told) == ["failed"] and told[0].run_id == after_step.run_id
    assert new.condition == "failed" and (new.seen_at, new.seen_run) == (st.seen_at, st.seen_run)


def test_a_job_failing_every_minute_sends_one_failed_then_one_recovered():
    history = (
        [run(0, "succeeded")] + [run(m, "failed") for m in range(1, 30)] + [run(30, "succeeded"), run(31, "succeeded")]
    )
    notices, state = decide(spec(), history, NotifyState(), T0 + timedelta(minutes=32))
    assert events(notices) == ["failed", "recovered"]
    assert notices[0].run_id == history[1].run_id
    assert notices[1].run_id == history[30].run_id
    assert state.condition == "ok" and not state.silent


def test_a_change_from_failed_to_timed_out_is_a_new_notice_but_repeats_are_not():
    history = [run(0, "failed"), run(1, "failed"), run(2, "timed_out"), run(3, "timed_out"), run(4, "failed")]
    notices, _ = decide(spec(), history, NotifyState(), T0 + timedelta(minutes=5))
    assert events(notices) == ["failed", "timed_out", "failed"]


def test_feeding_the_same_runs_again_after_a_restart_repeats_nothing():
    history = [run(0, "succeeded"), run(1, "failed"), run(2, "failed")]
    first, state = decide(spec(), history, NotifyState(), T0 + timedelta(minutes=3))
    restored = NotifyState.from_json(state.to_json())
    again, _ = decide(spec(), history + [run(3, "failed")], restored, T0 + timedelta(minutes=4))
    assert events(first) == ["failed"]
    assert again == []


def test_dedupe_keys_are_the_same_whoever_decides():
    history = [run(0, "succeeded"), run(1, "failed"), run(2, "succeeded")]
    a, _ = decide(spec(), history, NotifyState(), T0 + timedelta(minutes=3))
    b, _ = decide(spec(), list(reversed(history)), NotifyState(), T0 + timedelta(minutes=3))
    assert [n.dedupe_key for n in a] == [n.dedupe_key for n in b]
    assert a[0].dedupe_key == f"purge|failed|{history[1].run_id}"


def test_silence_is_raised_once_at_the_deadline_and_recovered_after():
    s = spec(max_silence_s=300)
    last = run(0, "succeeded")
    before, state = decide(s, [last], NotifyState(), last.finished_at + timedelta(seconds=299))
    assert before == []
    assert core.silence_deadline(s, state) == last.finished_at + timedelta(seconds=300)
    at, state = decide(s, [], state, last.finished_at + timedelta(seconds=301))
    assert events(at) == ["silence"] and at[0].state == "silent"
    assert at[0].at == last.finished_at + timedelta(seconds=300)
    later, state = decide(s, [], state, last.finished_at + timedelta(hours=5))
    assert later == []
    back, state = decide(s, [run(400, "succeeded")], state, T0 + timedelta(minutes=401))
    assert events(back) == ["recovered"] and not state.silent


def test_a_job_that_never_succeeded_counts_its_silence_from_when_it_was_first_known():
    s = spec(max_silence_s=120)
    quiet, state = decide(s, [], NotifyState(), T0 + timedelta(seconds=100), known_since=T0)
    loud, _ = decide(s, [], state, T0 + timedelta(seconds=121))
    assert quiet == [] and events(loud) == ["silence"]


def test_a_paused_job_does_not_go_silent_and_its_clock_restarts():
    s = spec(max_silence_s=120)
    _, state = decide(s, [run(0, "succeeded")], NotifyState(), T0 + timedelta(minutes=1))
    paused, state = decide(s, [], state, T0 + timedelta(hours=3), paused=True)
    resumed, _ = decide(s, [], state, T0 + timedelta(hours=3, seconds=60))
    assert paused == [] and resumed == []
    assert state.basis == T0 + timedelta(hours=3)


def test_overlap_skips_send_one_notice_per_streak():
    history = [
        run(0, "succeeded"),
        run(1, "skipped_overlap"),
        run(2, "skipped_overlap"),
        run(3, "succeeded"),
        run(4, "skipped_overlap"),
    ]
    notices, _ = decide(spec(), history, NotifyState(), T0 + timedelta(minutes=5))
    assert events(notices) == ["skipped_overlap", "skipped_overlap"]


def test_lost_is_a_failure_condition_and_a_success_recovers_it():
    notices, _ = decide(
        spec(idempotency_class="unsafe"),
        [run(0, "lost"), run(1, "lost"), run(2, "succeeded")],
        NotifyState(),
        T0 + timedelta(minutes=3),
    )
    assert events(notices) == ["lost", "recovered"]


def test_skips_for_pause_and_outage_change_nothing():
    notices, state = decide(
        spec(),
        [run(0, "failed"), run(1, "skipped_paused"), run(2, "skipped_outage"), run(3, "failed")],
        NotifyState(),
        T0 + timedelta(minutes=4),
    )
    assert events(notices) == ["failed"] and state.condition == "failed"


def test_routes_receive_only_the_events_they_ask_for():
    s = spec(notify=(Notify(on=("failed",), command="x"), Notify(on=("recovered", "failed"), webhook="http://y/")))
    assert core.routes_for(s, "failed") == [0, 1]
    assert core.routes_for(s, "recovered") == [1]
    assert core.routes_for(s, "silence") == []


def test_an_occurrence_with_no_row_or_still_pending_past_its_grace_is_unclaimed():
    s = spec(schedule="*/10 * * * *", tolerance_s=0)
    sched = compile_schedule(s.schedule, s.timezone)
    ran = run(0, "succeeded")
    stuck = Run(
        run_id=run_id("purge", T0 + timedelta(minutes=20)),
        job_id="purge",
        job_key="purge",
        scheduled_at=T0 + timedelta(minutes=20),
        fire_at=T0 + timedelta(minutes=20),
        state="pending",
    )
    found = core.unclaimed(s, sched, [ran, stuck], since=T0 - timedelta(seconds=1), now=T0 + timedelta(minutes=25))
    assert [(n.state, n.run_id) for n in found] == [
        ("unclaimed", run_id("purge", T0 + timedelta(minutes=10))),
        ("unclaimed", stuck.run_id),
    ]
    assert all(n.event == "silence" for n in found)


def test_an_occurrence_inside_its_grace_is_not_unclaimed_yet():
    s = spec(schedule="*/10 * * * *", tolerance_s=0)
    sched = compile_schedule(s.schedule, s.timezone)
    found = core.unclaimed(
        s, sched, [run(0, "succeeded")], since=T0 - timedelta(seconds=1), now=T0 + timedelta(minutes=10, seconds=30)
    )
    assert found == []


def test_a_job_without_a_next_occurrence_is_reported_once_per_break():
    s = spec()
    sched = compile_schedule(s.schedule, s.timezone)
    first, state = core.no_next(s, sched, False, "abc", NotifyState(), T0)
    again, state = core.no_next(s, sched, False, "abc", state, T0 + timedelta(minutes=1))
    healed, state = core.no_next(s, sched, True, "abc", state, T0 + timedelta(minutes=2))
    broken, _ = core.no_next(s, sched, False, "def", state, T0 + timedelta(minutes=3))
    assert [n.state for n in first] == ["no_next_occurrence"] and again == [] and healed == []
    assert [n.dedupe_key for n in broken] == ["purge|no_next_occurrence|def"]


def test_a_disabled_job_never_goes_silent_nor_lacks_a_next_occurrence():
    s = spec(enabled=False, max_silence_s=60)
    sched = compile_schedule(s.schedule, s.timezone)
    notices, _ = decide(s, [], NotifyState(), T0 + timedelta(days=3), known_since=T0)
    missing, _ = core.no_next(s, sched, False, None, NotifyState(), T0)
    assert notices == [] and missing == []


# --- silence inside planned holds and gaps chronod itself made ---------------------------------


def test_a_gap_inside_the_jobs_tolerance_is_no_silence():
    """A run may start up to tolerance_s late and be on time: the switch allows for it."""
    s = spec(max_silence_s=300, tolerance_s=30)
    _, state = decide(s, [run(0, "succeeded")], NotifyState(), T0 + timedelta(minutes=1))
    last = T0 + timedelta(seconds=5)
    assert core.silence_deadline(s, state) == last + timedelta(seconds=330)
    inside, state = decide(s, [], state, last + timedelta(seconds=329))
    past, _ = decide(s, [], state, last + timedelta(seconds=331))
    assert inside == [] and events(past) == ["silence"]


def test_a_hold_that_ends_restarts_the_silence_clock_from_its_end():
    """Held by a window (or a pause) past max_silence_s: nothing while it holds, and the
    clock counts afresh from the round that sees the hold over."""
    s = spec(max_silence_s=120)
    _, state = decide(s, [run(0, "succeeded")], NotifyState(), T0 + timedelta(seconds=10))
    held, state = decide(s, [], state, T0 + timedelta(seconds=50), paused=True)  # under half: basis kept
    assert held == [] and state.basis == T0 + timedelta(seconds=5)
    over = T0 + timedelta(seconds=140)  # the window ended; the first round after it
    after, state = decide(s, [], state, over, resumed=True)
    assert after == [] and state.basis == over
    late, _ = decide(s, [], state, over + timedelta(seconds=121))
    assert events(late) == ["silence"]


def test_a_short_restart_of_chronod_sends_neither_silence_nor_recovered():
    """Down 5 s, its last success 2 s before it stopped, max_silence_s 3: the time chronod
    was down is not the job's silence, so the first round after the restart is quiet and
    the catch-up's success recovers nothing."""
    s = spec(schedule="@every 1s", max_silence_s=3)
    last = run(0, "succeeded")  # ended at T0+5s
    _, state = decide(s, [last], NotifyState(), T0 + timedelta(seconds=7))  # the last round before the stop
    back = T0 + timedelta(seconds=12)  # up again: 5 s after that round
    first, state = decide(s, [], state, back, down_s=5.0)
    assert first == []
    ok = run(0, "succeeded")
    ok = Run(**{**ok.as_dict(), "run_id": "catchup", "finished_at": back + timedelta(seconds=1)})
    then, state = decide(s, [ok], state, back + timedelta(seconds=1.5))
    assert then == [] and not state.silent
    # without the excuse the same rounds page and then recover: what the operator saw
    noisy, _ = decide(s, [], decide(s, [last], NotifyState(), T0 + timedelta(seconds=7))[1], back)
    assert events(noisy) == ["silence"]


def test_a_crash_loop_still_trips_the_switch():
    """Only the time down is forgiven: a job that never succeeds between restarts goes silent."""
    s = spec(schedule="@every 1s", max_silence_s=30)
    _, state = decide(s, [run(0, "succeeded")], NotifyState(), T0 + timedelta(seconds=6))
    at = T0 + timedelta(seconds=6)
    said = []
    for _ in range(10):  # up 10 s, down 5 s
        at += timedelta(seconds=5)
        out, state = decide(s, [], state, at, down_s=5.0)
        said += out
        at += timedelta(seconds=10)
        out, state = decide(s, [], state, at)
        said += out
    assert events(said) == ["silence"]


def test_a_clock_step_back_while_chronod_was_down_does_not_shorten_the_down():
    """Seed 3 of a day of 100 jobs: a job every 30 s (max_silence_s 65, tolerance_s 5). The
    notifier's last round before a crash was at T0; chronod stayed down 1,023 s, and 50 s
    into it the clock stepped back 99 s; the job's run ended 73 s into it, stamped by the
    stepped clock 26 s before T0. By the wall clock chronod was down 924 s, so that success
    looked as if it had ended before the crash and its 26 s counted as silence: the switch
    tripped 44.5 s after the restart, inside the 70 s allowance. On the same boot the
    monotonic clock says 1,023 s: the success ended while chronod was down, and the silence
    clock counts afresh from the restart."""
    s = spec(schedule="*/30 * * * * *", max_silence_s=65, tolerance_s=5)
    before = Run(**{**run(0, "succeeded").as_dict(), "run_id": "before", "finished_at": T0 - timedelta(seconds=40)})
    _, state = decide(s, [before], NotifyState(), T0)  # the last round before the crash
    alive = {"at": T0.isoformat(), "mono": 1000.0, "boot": "b1"}  # what that round wrote
    back = T0 + timedelta(seconds=1023 - 99)  # up again, by the stepped clock
    ended = Run(**{**before.as_dict(), "run_id": "in-the-down", "finished_at": T0 - timedelta(seconds=26)})

    down = core.downtime_s(alive, back, 2023.0, "b1")
    assert down == 1023.0
    first, state = decide(s, [ended], state, back, down_s=down)
    assert first == [] and state.basis == back
    assert decide(s, [], state, back + timedelta(seconds=44.5))[0] == []
    assert events(decide(s, [], state, back + timedelta(seconds=71))[0]) == ["silence"]  # 70 s of it up: true

    # the wall clock alone (what the notifier measured): a silence 44.5 s after the restart
    _, wrong = decide(s, [ended], decide(s, [before], NotifyState(), T0)[1], back, down_s=924.0)
    assert events(decide(s, [], wrong, back + timedelta(seconds=44.5))[0]) == ["silence"]


def test_the_down_is_the_longer_of_the_wall_and_the_monotonic_spans():
    """A step forward while chronod was down is in the wall span, one back in the monotonic
    span; another boot's (or an older state's) monotonic reading means nothing: the wall."""
    alive = {"at": T0.isoformat(), "mono": 1000.0, "boot": "b1"}
    ahead = T0 + timedelta(seconds=600 + 3600)  # down 600 s, the clock stepped 1 h forward
    assert core.downtime_s(alive, ahead, 1600.0, "b1") == 4200.0
    behind = T0 + timedelta(seconds=600 - 99)
    assert core.downtime_s(alive, behind, 1600.0, "b1") == 600.0
    assert core.downtime_s(alive, behind, 1600.0, "b2") == 501.0  # rebooted: the wall only
    assert core.downtime_s({"at": T0.isoformat()}, behind, 1600.0, "b1") == 501.0
    assert core.downtime_s({}, behind, 1600.0, "b1") == 0.0
    assert core.downtime_s(alive, behind, 1600.0, None) == 501.0


def test_a_skip_the_notifier_does_not_read_would_tell_nothing_and_change_nothing_but_the_seen_mark():
    """The store leaves the skips out of what the notifier reads (`NOTICED_STATES`): each
    would tell nothing, to a route that asks for every event, and leave every part of the
    state but the seen mark as it was, whatever the state before."""
    from dataclasses import replace

    from chronod.core.model import NOTICED_STATES, TERMINAL_STATES

    every = Notify(on=tuple(TERMINAL_STATES) + ("silence", "recovered"), webhook="http://x/")
    quiet = [s for s in TERMINAL_STATES if s not in NOTICED_STATES]
    assert quiet and "skipped_overlap" in NOTICED_STATES
    befores = [
        NotifyState(),
        NotifyState(condition="failed", basis=T0),
        NotifyState(condition="ok", overlap=True, silent=True, basis=T0),
    ]
    for state in quiet:
        for before in befores:
            told, after = core.after_run(spec(notify=(every,)), run(3, state), before)
            assert told == [], state
            assert replace(after, seen_at=before.seen_at, seen_run=before.seen_run) == before, state
