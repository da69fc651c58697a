"""Seeds that once broke a promise, each pinned with the fewest faults and days that still
showed it (`python -m chronod.sim --days 0.1 --jobs 20 --seed S`, every fault, found it)."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import FAULTS, Config
from chronod.sim.world import Event


def broken(cfg: Config, names: list[str]) -> dict[str, str]:
    out = Simulation(cfg).run()
    try:
        return {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()


def test_seed_34_a_catch_up_backlog_that_outlasts_the_simulation_is_still_waiting():
    # job00003 runs every 30 s, catchup: all, overlap: forbid, and its runs take about a
    # minute: after a 27-minute crash its backlog drains one run after another past the
    # end, so an occurrence due an hour before the end rightly still runs or waits.
    cfg = Config(days=0.1, jobs=20, seed=34, faults=frozenset({"crash"}))
    assert not broken(cfg, ["one_terminal_state", "audit_agrees"])


@pytest.mark.parametrize("seed", [34, 37])
def test_seeds_34_37_a_scheduled_occurrence_that_waited_its_turn_behind_a_backfill_run_is_not_late(seed):
    # every fault: on seed 34 job00018 (every 30 s, overlap: forbid) fell due at 11:06:30
    # while only a backfill run of it was going; it waited its turn (docs/backfill.md, the
    # schedule comes first) and started the instant that run ended, 21 s after its time.
    # On seed 37 job00015's waited behind a backfill run and an older occurrence.
    cfg = Config(days=0.1, jobs=20, seed=seed, faults=frozenset(FAULTS))
    assert not broken(cfg, ["fire_lag_bounded", "schedule_first"])


def test_seed_24_every_fault():
    # job00011 (hourly, blackout: defer, catchup: none) fell due at 23:00:40 inside a
    # window; the window ended at 23:12 during an outage, chronod died at 23:13 and came
    # back at 23:30: the occurrence was recorded skipped_outage, "fell due while chronod
    # could not run it", though chronod was up when it fell due and the window held it.
    # (And job00007's occurrences waited behind a backfill run: fire_lag_bounded, above.)
    assert not broken(Config(days=0.1, jobs=20, seed=24, faults=frozenset(FAULTS)), ["one_terminal_state"])


HELD = {
    "id": "held",
    "owner": "ops",
    "schedule": "0 * * * *",
    "command": "true",
    "idempotency_class": "idempotent",
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
    "blackout": "defer",
}
WINDOW = {"name": "swap", "reason": "CHG-2: disk swap", "cron": "50 0 * * *", "duration": "20m", "jobs": ["held"]}


@pytest.mark.parametrize(
    ("catchup", "window_s", "downtime", "state", "why"),
    [
        ("none", 86400, 600.0, "skipped_blackout", "deferred by a maintenance window; catchup: none"),
        ("latest", 86400, 600.0, "succeeded", None),
        ("all", 86400, 600.0, "succeeded", None),
        ("latest", 1800, 3600.0, "skipped_blackout", "when the window ended, and catchup_window_s=1800 ran out"),
    ],
)
def test_a_window_that_ends_while_chronod_is_down_releases_what_it_held(catchup, window_s, downtime, state, why):
    """The 01:00 occurrence falls due inside a window (00:50 to 01:10) and is held; chronod
    dies at 01:05 and the next one reads it back after the window ended. It fell due while
    chronod was up: the window's release decides it, never the outage's catch-up."""
    job = {**HELD, "catchup": catchup, "catchup_window_s": window_s}
    start = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
    cfg = Config(days=0.1, jobs=1, seed=1, faults=frozenset(), job_docs=(job,), blackouts=(WINDOW,), start=start)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 3900, "crash", {"calls": 0, "downtime": downtime})]
    out = sim.run()
    try:
        row = next(r for r in out.store.runs("held") if r.scheduled_at.hour == 1)
        assert (row.state, row.error and row.error[-len(why or "") :]) == (state, why or None)
        assert not {name: bad for name, bad in check(out, ["one_terminal_state", "reason_truth"]).items() if bad}
    finally:
        out.close()


def test_seed_28_a_backfill_of_a_job_a_restart_dropped_ends_cancelled():
    # every fault: job00008's file broke at 22:32 (the daemon kept its last good version);
    # an operator stored a backfill of it at 00:17, while chronod was down after a crash,
    # and the next start, with no good version of the file, dropped the job: the backfill
    # ended cancelled, "its job was removed from the registry", as docs/backfill.md says.
    assert not broken(Config(days=0.1, jobs=20, seed=28, faults=frozenset(FAULTS)), ["backfill_completes"])


def test_seed_33_a_restart_does_not_start_a_paused_jobs_backfill():
    # every fault: job00017 was paused at 12:22 until after the end, and an operator stored
    # a backfill of it at 12:29. The daemon that started at 12:30 after a crash started its
    # first run at once: it drove the backfill before it had read the pauses. A paused
    # job's backfill waits until it is resumed (docs/backfill.md), here past the end.
    assert not broken(Config(days=0.1, jobs=20, seed=33, faults=frozenset(FAULTS)), ["backfill_completes"])


def test_seed_57_an_adopted_backlog_run_that_waits_for_its_retry_holds_its_line():
    # every fault: job00013 (every 30 s, catchup: all, overlap: forbid, two attempts)
    # drained a backlog across a crash. The 01:17:30 occurrence's first attempt, started
    # by the daemon that died and adopted by the next one, timed out at 02:36:08; the new
    # daemon started the 01:18:00 occurrence at once and the retry 5 s later beside it:
    # its line counted only the retries of the runs it had started itself.
    assert not broken(Config(days=0.1, jobs=20, seed=57, faults=frozenset(FAULTS)), ["catchup_all_in_order"])


def test_seed_52_a_backfill_whose_run_outlasts_the_simulation_is_still_running():
    # every fault: job00017's backfill, stored 37 minutes before the end, started its
    # second occurrence again at 03:39; that run (its runs take minutes) ended after the
    # simulation did, so the backfill rightly had not ended.
    assert not broken(Config(days=0.1, jobs=20, seed=52, faults=frozenset(FAULTS)), ["backfill_completes"])


SEED_53 = Config(days=0.1, jobs=20, seed=53, faults=frozenset(FAULTS))


def test_seed_53_a_backfill_that_yields_to_a_busy_line_up_to_the_end_is_still_waiting():
    # every fault: job00018 runs every 30 s, overlap: forbid, and its runs take minutes.
    # Its backfill of 8 occurrences, stored at 13:54, started one whenever the line came
    # free and yielded to the scheduled occurrences (the schedule comes first); at the end
    # (14:53) a scheduled run still went and 4 occurrences waited their turn: the line
    # never stood idle but in the outage, so the backfill rightly had not ended.
    assert not broken(SEED_53, ["backfill_completes"])


def test_a_backfill_that_never_takes_its_turn_on_a_free_line_is_caught(monkeypatch):
    from chronod.core import backfill

    monkeypatch.setattr(backfill, "may_start", lambda spec, **kw: False)  # it yields for ever
    what = broken(SEED_53, ["backfill_completes"]).get("backfill_completes", "")
    assert "still running at the end (its line stood idle from" in what


def test_seed_13_a_backfill_waits_for_the_retry_of_a_scheduled_run():
    # every fault, half a day of 50 jobs: job00018 (every 20 min, catchup: all, overlap:
    # forbid, three attempts) had its 03:20 occurrence wait behind a backfill run; its
    # first attempt failed at 03:48:39 and the backfill started its next occurrence that
    # instant, during the 5-s backoff; the retry, which always starts, then ran beside it.
    cfg = Config(days=0.5, jobs=50, seed=13, faults=frozenset(FAULTS))
    assert not broken(cfg, ["catchup_all_in_order", "backfill_completes"])


SEED_2_DAY = Config(days=1, jobs=100, seed=2, faults=frozenset(FAULTS))


def test_seed_2_a_daemon_started_while_the_windows_file_is_broken_holds_nothing():
    # every fault, a day of 100 jobs: jobs-000.yaml, the file that defines the maintenance
    # window, broke and stayed broken; a daemon started after a crash had no last good
    # version of it (nor of its jobs), so it carried no window, and job00073 (tag maint)
    # ran through the next one. The check still held it to the window it no longer had.
    assert not broken(SEED_2_DAY, ["blackout_honoured", "one_terminal_state", "reason_truth"])


def test_a_daemon_that_ignores_the_windows_it_carries_is_still_caught_on_seed_2(monkeypatch):
    from chronod.core import blackout

    monkeypatch.setattr(blackout, "blackout_at", lambda spec, windows, at: None)
    assert "started inside window" in broken(SEED_2_DAY, ["blackout_honoured"]).get("blackout_honoured", "")


def test_seed_15_an_occurrence_waiting_in_a_line_when_chronod_died_is_no_outage_s():
    # every fault, half a day of 50 jobs: job00016's 00:02:30 occurrence fell due with
    # chronod up and waited in a line; chronod crashed at 00:03:46 and the next start read
    # its row back as an occurrence that fell due while chronod was down: skipped_outage,
    # "catchup: latest ran a newer occurrence". Now its row says where it waits and the
    # next start puts it back there. (job00021's backlog, read back beside occurrences that
    # waited behind it, must still start oldest first: catchup_all_in_order.)
    cfg = Config(days=0.5, jobs=50, seed=15, faults=frozenset(FAULTS))
    assert not broken(cfg, ["one_terminal_state", "catchup_all_in_order"])


@pytest.mark.parametrize("seed", [5, 11])
def test_seeds_5_11_occurrences_waiting_in_a_line_across_a_crash_are_judged_by_its_rule(seed):
    # every fault, a day of 100 jobs: occurrences that fell due with chronod up and waited
    # their turn (behind a catch-up backlog, or for a resource's slot) were recorded
    # skipped_outage by the start after a crash (seed 11: 122 of them).
    cfg = Config(days=1, jobs=100, seed=seed, faults=frozenset(FAULTS))
    assert not broken(cfg, ["one_terminal_state"])


def test_fleet_seed_18_a_replay_refused_by_a_lapsed_lease_keeps_its_records():
    # 8 nodes: node5 replayed its spool after a database outage and was stopped just
    # before a write for 83 s, past its lease; every record after the stop was refused
    # (stale token) and the spool emptied all the same: the refused claim left 7 `each`
    # runs that had started offline stored as still waiting, and node5 started them again
    # as attempt 1 under its next token. The records not written stay in the spool for it.
    from chronod.sim.fleet import FLEET_FAULTS, FleetSimulation
    from chronod.sim.fleet_checks import check_fleet

    out = FleetSimulation(Config(days=0.02, jobs=50, seed=18, nodes=8, faults=frozenset(FLEET_FAULTS))).run()
    try:
        bad = check_fleet(out, ["attempt_started_once", "stale_writes_refused"])
        assert not {name: found[0].what for name, found in bad.items() if found}
    finally:
        out.close()


def test_seed_9_a_job_removed_during_an_outage_records_what_fell_due_in_it():
    # every fault, a day of 100 jobs: job00060 (every 20 s, run_on: any, catchup: none)
    # waited through a database outage from 13:21:22, as `any` jobs do; its file was
    # removed meanwhile, and the reconnect at 13:31:48 read the registry before the
    # catch-up: the removal cancelled the one stored occurrence and the 29 that fell due
    # after it, never materialized, had no record at all. They are recorded cancelled.
    cfg = Config(days=1, jobs=100, seed=9, faults=frozenset(FAULTS))
    assert not broken(cfg, ["one_terminal_state", "audit_agrees"])


def test_seed_16_a_pause_that_holds_a_retry_keeps_the_failed_outcome():
    # every fault, a day of 100 jobs: job00040 (hourly, three attempts) fell due at 12:11
    # and its first attempt ran; the job was paused at 12:15 and the attempt failed at
    # 12:37; the pause held the retry and recorded the occurrence skipped_paused, though
    # it fell due before the pause and ran. It is recorded failed, the error naming the
    # retry the pause kept from starting (docs/maintenance.md).
    cfg = Config(days=1, jobs=100, seed=16, faults=frozenset(FAULTS))
    assert not broken(cfg, ["one_terminal_state", "reason_truth"])


def test_seed_24_a_backlog_run_whose_retry_falls_due_after_the_end_is_still_going():
    # every fault, a day of 100 jobs: job00099 (every 20 s, catchup: all, overlap: forbid,
    # two attempts) drained a backlog to the end; its 21:56:20 occurrence's first attempt
    # failed at 22:56:19 and its retry fell due 30 s later, after the simulation ended. The
    # run had not ended (retry_wait): it is neither stuck nor missed, and it still held its
    # line when the occurrence behind it waited past its window at 22:56:40.
    cfg = Config(days=1, jobs=100, seed=24, faults=frozenset(FAULTS))
    assert not broken(cfg, ["one_terminal_state", "audit_agrees", "reason_truth"])


def test_seed_1_a_silence_after_a_clock_step_back_is_measured_from_the_last_success_in_time():
    # every fault, 1,000 jobs: at 20:08:57 the clock stepped back to 20:00:45. job00103
    # (every 30 s, max_silence_s 60) last succeeded at 20:05:29 after the step and was
    # rightly called silent 60 s later, at 20:06:29; the check measured from a success
    # before the step, at 20:06:20 by the wall clock, and called the notice false.
    cfg = Config(days=0.03, jobs=1000, seed=1, faults=frozenset(FAULTS))
    assert not broken(cfg, ["silence_truth"])


@pytest.mark.parametrize("seed", [2, 22])
def test_seeds_2_22_a_silence_across_a_clock_step_forward_is_true_by_the_wall_clock(seed):
    # every fault: on seed 2 the clock stepped forward from 03:26 to 05:20, over a whole
    # maintenance window (04:27 to 04:51) that never held the job; on seed 22 from 23:04 to
    # 00:40. The notifier counts silence by the wall clock, as an operator reads it.
    cfg = Config(days=0.1, jobs=20, seed=seed, faults=frozenset(FAULTS))
    assert not broken(cfg, ["silence_truth"])
