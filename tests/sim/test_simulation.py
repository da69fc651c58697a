"""The deterministic simulation: the real daemon through simulated hours of faults, its
promises checked from the simulation's own record (chronod.sim)."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from datetime import datetime, timedelta

import pytest

from chronod.core import policy
from chronod.daemon import waits
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import FAULTS, Config
from chronod.sim.world import Event

# Every fault but clock steps and backfills: for the scenarios that need fewer moving parts.
STEADY = frozenset({"crash", "stall", "outage", "registry", "dst"})


def simulate(cfg: Config, names=None):
    out = Simulation(cfg).run()
    try:
        return check(out, names)
    finally:
        out.close()


def broken(results):
    return {name: bad[0] for name, bad in results.items() if bad}


# Seeds that once broke a promise, with every fault and every invariant: 6, 9, 20 (a clock
# step inside a downtime or an outage); 13, 20 (an outcome discarded after a stall past the
# lease); 22 (a schedule edited to fire sooner; a run that ran across a clock step); 36 (a
# catch-up backlog started in the database's order). All of 1-20: `bench/bench_sim.py`.
# The simulation runs on the memory store; one seed keeps the real SQLite store under it.
@pytest.mark.parametrize(
    ("seed", "store"),
    [(6, "memory"), (9, "memory"), (13, "memory"), (20, "memory"), (22, "memory"), (36, "memory")]
    + [(6, "sqlite"), (20, "sqlite")],
)
def test_a_seeded_day_of_every_fault_keeps_every_promise(seed, store):
    results = simulate(Config(days=0.1, jobs=20, seed=seed, faults=frozenset(FAULTS), store=store))
    assert not broken(results)


def test_the_same_seed_gives_the_same_simulation():
    def once():
        out = Simulation(Config(days=0.05, jobs=8, seed=7, faults=STEADY)).run()
        try:
            return sorted((p.run_id, p.attempt, p.started_wall) for p in out.world.procs.values())
        finally:
            out.close()

    first = once()
    assert first and first == once()


BACKLOG_JOB = {
    "id": "catchup.all",
    "owner": "ops",
    "schedule": "*/3 * * * * *",
    "command": "true",
    "idempotency_class": "idempotent",
    "overlap": "forbid",
    "catchup": "all",
    "catchup_window_s": 3600,
    "tolerance_s": 0,
    "tolerance_reason": "the backlog test needs exact times",
}


def backlog_config(seed: int) -> Config:
    """One `catchup: all` job every 3 s and crashes with downtime: a backlog after each."""
    return Config(days=0.02, jobs=1, seed=seed, faults=frozenset({"crash"}), job_docs=(BACKLOG_JOB,), mean_s=1.0)


def test_a_catchup_all_backlog_starts_in_scheduled_order_one_at_a_time():
    assert not broken(simulate(backlog_config(3), ["catchup_all_in_order"]))


def test_a_planner_that_ignores_the_backlogs_order_is_caught(monkeypatch):
    real = policy.catchup_turn

    def newest_first(spec, queue, running, now):
        turn = real(spec, queue, running, now)
        live = sorted((w for w in queue if w not in turn.expire), key=lambda w: w.fire_at, reverse=True)
        return policy.Turn(tuple(live[: len(turn.start)]), turn.expire)

    monkeypatch.setattr(policy, "catchup_turn", newest_first)
    monkeypatch.setattr(waits, "_turn_matters", lambda line, window_s, now: list(line))  # asked about all of it
    bad = broken(simulate(backlog_config(3), ["catchup_all_in_order"]))
    assert "catchup_all_in_order" in bad
    assert (
        "started after the one of" in bad["catchup_all_in_order"].what
        or "still ran" in bad["catchup_all_in_order"].what
    )


def test_an_idle_daemon_pings_the_watchdog_from_its_first_second():
    idle = {
        "id": "nightly",
        "owner": "ops",
        "schedule": "0 4 * * *",
        "command": "true",
        "idempotency_class": "idempotent",
    }
    cfg = Config(days=0.05, jobs=1, seed=1, faults=frozenset(), job_docs=(idle,), watchdog_usec=3_000_000)
    assert not broken(simulate(cfg, ["watchdog_pinged"]))


def test_a_forward_clock_step_loses_no_occurrence():
    every = {
        "id": "often",
        "owner": "ops",
        "schedule": "*/30 * * * * *",
        "command": "true",
        "idempotency_class": "idempotent",
        "catchup": "none",
        "tolerance_s": 0,
        "tolerance_reason": "exact times",
    }
    sim = Simulation(Config(days=0.2, jobs=1, seed=2, faults=frozenset(), job_docs=(every,), mean_s=1.0))
    sim.events = [Event(sim.t0 + 600, "jump", {"seconds": 7200.0})]  # NTP steps the clock 2 h forward
    out = sim.run()
    try:
        assert not broken(check(out, ["one_terminal_state"]))
    finally:
        out.close()


def every_second(i: int, catchup: str) -> dict:
    return {
        "id": f"tick{i:02d}",
        "owner": "ops",
        "schedule": "* * * * * *",
        "command": "true",
        "idempotency_class": "idempotent",
        "overlap": "allow",
        "catchup": catchup,
        "tolerance_s": 0,
        "tolerance_reason": "a herd on purpose",
    }


@pytest.mark.parametrize("catchup", ["latest", "none"])
def test_past_its_start_limit_a_daemon_starts_the_limit_each_second_and_records_the_rest_skipped(catchup):
    """30 jobs every second against a limit of 10 starts a second: about 10 start each
    second (never collapsing to fewer), every occurrence ends in exactly one state, and
    the ones that did not start say why."""
    docs = tuple(every_second(i, catchup) for i in range(30))
    cfg = Config(days=0.0005, jobs=30, seed=4, faults=frozenset(), job_docs=docs, mean_s=0.05, max_starts=10)
    cfg = dataclasses.replace(cfg, drain_s=5.0)
    out = Simulation(cfg).run()
    try:
        assert not broken(check(out, ["one_terminal_state"]))
        starts = Counter(int((p.started_wall - out.start).total_seconds()) for p in out.world.procs.values())
        seconds = sorted(starts)[2:-2]  # whole seconds, away from the start and the end
        assert seconds and all(8 <= starts[s] <= 11 for s in seconds), starts
        rows = out.store.runs(limit=100_000)
        skipped = [r for r in rows if r.state == "skipped_outage"]
        assert len(skipped) > len(rows) / 2
        assert all("start limit (10 starts/s)" in r.error for r in skipped), skipped[0].error
    finally:
        out.close()


# --- maintenance windows across a daylight-saving change ------------------------------------

NY = "America/New_York"
WINDOW = {
    "name": "storage-night",
    "reason": "CHG-1: storage work",
    "timezone": NY,
    "cron": "30 1 * * *",  # 01:30 local, open 2 h of elapsed time: across both 2025 changes
    "duration": "2h",
    "tags": ["db"],
}


def window_job(job_id: str, **fields) -> dict:
    return {
        "id": job_id,
        "owner": "ops",
        "schedule": "*/10 * * * *",
        "timezone": NY,
        "command": "true",
        "idempotency_class": "idempotent",
        "tags": ["db"],
        "tolerance_s": 0,
        "tolerance_reason": "exact times for the window's edges",
        **fields,
    }


def window_config(seed: int, start: str, faults: frozenset[str] = frozenset({"crash"})) -> Config:
    """Three jobs a window holds (skip, defer with catch-up latest, defer with all), faults
    meanwhile, and a calendar that starts a few hours before New York changes its clocks."""
    jobs = (
        window_job("skipper"),
        window_job("deferrer", blackout="defer"),
        window_job("all-deferrer", blackout="defer", catchup="all"),
    )
    start_at = datetime.fromisoformat(start)
    return Config(
        days=0.25,
        jobs=3,
        seed=seed,
        faults=faults,
        job_docs=jobs,
        mean_s=2.0,
        blackouts=(WINDOW,),
        start=start_at,
    )


SPRING = ("2025-03-09T04:00:00+00:00", ("2025-03-09T06:30:00+00:00", "2025-03-09T08:30:00+00:00"))
FALL = ("2025-11-02T03:00:00+00:00", ("2025-11-02T05:30:00+00:00", "2025-11-02T07:30:00+00:00"))
ROUGH = frozenset({"crash", "stall", "outage"})


@pytest.mark.parametrize(
    "seed, when, faults",
    [
        # spring forward 2025-03-09 07:00Z: 01:30 EST (06:30Z) .. 04:30 EDT (08:30Z)
        (4, SPRING, ROUGH),
        # fall back 2025-11-02 06:00Z: 01:30 EDT (05:30Z) .. 02:30 EST (07:30Z)
        (5, FALL, ROUGH),
        # an operator changes a deferring job's schedule while the window holds its occurrences
        (6, SPRING, ROUGH | {"registry"}),
    ],
)
def test_a_window_across_a_dst_change_holds_its_jobs_for_its_elapsed_length_through_faults(seed, when, faults):
    start, window = when
    out = Simulation(window_config(seed, start, faults)).run()
    try:
        assert not broken(check(out, ["one_terminal_state", "blackout_honoured", "unsafe_at_most_once"]))
        lo, hi = (datetime.fromisoformat(t) for t in window)
        rows = [r for r in out.store.runs() if r.trigger == "schedule"]
        inside = lambda r: lo <= r.scheduled_at < hi  # noqa: E731
        held = [r for r in rows if r.job_id == "skipper" and inside(r)]
        # the simulation's operator pauses a job now and then, and a crash may swallow one
        assert held and {r.state for r in held} <= {"skipped_blackout", "skipped_paused", "skipped_outage"}
        named = [r for r in held if r.state == "skipped_blackout"]
        assert named and all("storage-night (CHG-1: storage work)" in r.error for r in named)
        deferred = [p for p in out.world.procs.values() if p.job_id == "all-deferrer" and lo <= p.scheduled_at < hi]
        assert deferred and all(p.started_wall >= hi for p in deferred)
    finally:
        out.close()


def test_a_daemon_that_ignores_the_windows_is_caught(monkeypatch):
    from chronod.core import blackout

    monkeypatch.setattr(blackout, "blackout_at", lambda spec, windows, at: None)
    results = simulate(window_config(4, "2025-03-09T04:00:00+00:00"), ["blackout_honoured"])
    assert results["blackout_honoured"]


def test_a_run_that_ends_while_the_daemon_is_stalled_past_its_lease_keeps_its_outcome():
    # The process ends during a stall longer than the lease: the outcome must be recorded
    # under the renewed lease (or kept for the next chronod), never thrown away so that a
    # later start finds nothing and calls an unsafe run `lost`.
    job = {
        "id": "unsafe.report",
        "owner": "ops",
        "schedule": "*/5 * * * *",
        "command": "true",
        "idempotency_class": "unsafe",
        "tolerance_s": 0,
        "tolerance_reason": "exact times",
    }
    sim = Simulation(Config(days=0.05, jobs=1, seed=1, faults=frozenset(), job_docs=(job,), mean_s=30.0))
    sim.events = [
        Event(sim.t0 + 301, "stall", {"seconds": 900.0}),  # longer than the 600 s SQLite lease
        Event(sim.t0 + 1800, "crash", {"calls": 0, "downtime": 10.0}),
    ]
    out = sim.run()
    try:
        rows = {r.run_id: r.state for r in out.store.runs()}
        procs = [p for p in out.world.procs.values() if p.started_mono < sim.t0 + 301 < p.end_mono()]
        assert procs, "the scenario needs a run in flight when the stall begins"
        for p in procs:
            assert rows[p.run_id] == p.final_state(), p.run_id
    finally:
        out.close()


def test_a_clock_step_inside_a_disturbance_moves_where_its_wall_span_ends():
    # Down for 600 s with a 3600 s step forward 100 s in: the wall clock showed 12:00
    # until 13:10, not 12:00 until 12:10; occurrences due at 12:30 were not on a live daemon.
    from datetime import UTC

    from chronod.core.clock import FakeClock
    from chronod.sim.world import World

    clock = FakeClock(datetime(2025, 6, 2, 12, 0, tzinfo=UTC), mono=1000.0)
    w = World(clock, random.Random(1))
    w.advance_to(1100.0)
    w.step_wall(3600.0)
    w.advance_to(1600.0)
    w.disturbed("down", 1000.0, 1600.0)
    lo, hi = w.wall_span(w.disturbances[0])
    assert lo == datetime(2025, 6, 2, 12, 0, tzinfo=UTC)
    assert hi == datetime(2025, 6, 2, 13, 10, tzinfo=UTC)


def test_after_a_step_back_a_wall_time_shown_twice_maps_to_its_latest_instant():
    from datetime import UTC

    from chronod.core.clock import FakeClock
    from chronod.sim.world import World

    at = datetime(2025, 6, 2, 12, 0, tzinfo=UTC)
    w = World(FakeClock(at, mono=1000.0), random.Random(1))
    w.advance_to(1100.0)
    w.step_wall(-60.0)  # 12:01:40 -> 12:00:40: 12:00:40 to 12:01:40 are shown twice
    w.advance_to(1200.0)  # now 12:02:20
    assert w.last_mono_at(at + timedelta(seconds=70)) == 1130.0  # after the step, not 1070
    assert w.last_mono_at(at + timedelta(seconds=10)) == 1010.0  # shown once, before it
    assert w.last_mono_at(at + timedelta(seconds=130)) == 1190.0
    assert w.last_mono_at(at + timedelta(seconds=500)) == 1200.0  # not shown yet: now
    w.step_wall(3600.0)  # 12:02:20 -> 13:02:20: 12:30 to 13:00 never shown
    w.advance_to(1210.0)
    assert not w.showed(at + timedelta(minutes=30), at + timedelta(minutes=60))
    assert w.showed(at + timedelta(minutes=30), at + timedelta(minutes=62, seconds=21))
    assert w.last_mono_at(at + timedelta(minutes=45)) == 1200.0  # the step passed over it


@pytest.mark.parametrize("command", ["report", "did-it-run"])
def test_an_audit_command_that_calls_every_occurrence_a_success_is_caught(monkeypatch, command):
    from chronod.core import history, report
    from chronod.store import audit

    if command == "report":
        real = report.job_report

        def rosy(*args, **kwargs):
            rep = real(*args, **kwargs)
            return dataclasses.replace(rep, lines=[dataclasses.replace(ln, state="succeeded") for ln in rep.lines])

        monkeypatch.setattr(audit, "job_report", rosy)
    else:
        real_answer = history.did_it_run
        monkeypatch.setattr(
            audit.history, "did_it_run", lambda *a, **k: dataclasses.replace(real_answer(*a, **k), yes=True)
        )
    bad = broken(simulate(Config(days=0.1, jobs=20, seed=4, faults=STEADY), ["audit_agrees"]))
    assert f"`{command}" in bad["audit_agrees"].what


def test_a_schedule_edited_to_fire_sooner_than_its_stored_next_occurrence_skips_nothing():
    # At :30 hourly, edited at 00:10 to every 15 minutes: the stored 00:30 still fits the new
    # schedule, but 00:15 comes first and must run, and 00:30 must run once.
    job = {
        "id": "sooner",
        "owner": "ops",
        "schedule": "30 * * * *",
        "command": "true",
        "idempotency_class": "idempotent",
        "catchup": "latest",
        "tolerance_s": 0,
        "tolerance_reason": "exact times",
    }
    sim = Simulation(Config(days=0.05, jobs=1, seed=1, faults=frozenset(), job_docs=(job,), mean_s=1.0))
    start = sim.start

    def edit():
        [plan] = sim.registry.files["jobs-000.yaml"]
        plan.doc = {**plan.doc, "schedule": "*/15 * * * *"}
        sim.registry.write("jobs-000.yaml")
        return "changed sooner to every 15 minutes"

    sim.registry.edit = edit
    sim.events = [Event(sim.t0 + 600 - start.minute * 60 - start.second, "registry", {})]  # at hh:10
    out = sim.run()
    try:
        hour = start.replace(minute=0, second=0, microsecond=0)
        rows = {r.scheduled_at: r.state for r in out.store.runs() if r.job_id == "sooner"}
        assert rows.get(hour + timedelta(minutes=15)) == "succeeded", rows
        assert rows.get(hour + timedelta(minutes=30)) == "succeeded", rows
        assert not broken(check(out, ["one_terminal_state"]))
    finally:
        out.close()


@pytest.mark.parametrize("downtime", [800.0, 812.5])
def test_an_occurrence_of_a_resource_job_that_fell_due_unseen_while_chronod_was_down_runs_after_the_restart(downtime):
    """Seed 7331: down 14 minutes, a `*/30 s` job with a resource came back with 27
    occurrences that fell due unseen; the newest, on time, went to its resource's line and
    was claimed at once, before the wake-up had written its row: the claim found no row
    ("lost to another node") and the occurrence stayed pending for good."""
    job = {
        "id": "poll",
        "owner": "ops",
        "schedule": "*/30 * * * * *",
        "command": "true",
        "idempotency_class": "idempotent",
        "catchup": "none",
        "resource": "net",
        "tolerance_s": 0,
        "tolerance_reason": "exact times",
    }
    start = datetime.fromisoformat("2025-10-26T17:00:00+00:00")
    cfg = Config(days=0.1, jobs=1, seed=7331, faults=frozenset(), job_docs=(job,), mean_s=1.0, start=start)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 600, "crash", {"calls": 0, "downtime": downtime})]
    out = sim.run()
    try:
        assert not broken(check(out, ["one_terminal_state"]))
        after = [p for p in out.world.procs.values() if p.started_wall > start + timedelta(seconds=600 + downtime)]
        assert after, "nothing ran after the restart"
    finally:
        out.close()
