"""Under `catchup: latest` only the newest of the scheduled occurrences that wait their
turn behind a backfill run waits (chronod.core.policy.newest_waiting): the older ones end
skipped_overlap, saying which occurrence took their place. Seed 8 (a day of 100 jobs)
found the line that never emptied: a job every 20 s whose runs take minutes had every
occurrence that fell due behind one long backfill run wait, kept them across a restart,
and started them one after another for the rest of the day."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from chronod.sim import driver
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
# a simulation of 0.052 days: what fell due in its first 15 minutes is checked (SETTLE_S)
BACKFILL_AT = 610.0  # seconds after the start: 10 s after an occurrence, which ran 1 s
LONG_S = 150.0  # the backfill's first run: the occurrences of the next 150 s fall due behind it

EVERY_20S = {
    "id": "every20",
    "owner": "ops",
    "schedule": "*/20 * * * * *",
    "command": "true",
    "idempotency_class": "idempotent",
    "overlap": "forbid",
    "catchup": "latest",
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
CHECKS = ["one_terminal_state", "fire_lag_bounded", "reason_truth", "schedule_first", "backfill_completes"]


def behind_a_backfill(monkeypatch: pytest.MonkeyPatch, crash: bool):
    """Scheduled runs take 1 s; the backfill stored at BACKFILL_AT starts its first run at
    once, and that run takes LONG_S. With `crash`, chronod dies 60 s into it for 30 s."""
    sim_box: list[Simulation] = []

    def duration(plan):
        def draw(rng):
            t = sim_box[0].world.mono() - sim_box[0].t0
            return (LONG_S if BACKFILL_AT <= t < BACKFILL_AT + 1 else 1.0), 0

        return draw

    monkeypatch.setattr(driver, "duration", duration)
    cfg = Config(days=0.052, jobs=1, seed=1, faults=frozenset(), job_docs=(EVERY_20S,), mean_s=1.0, start=START)
    sim = Simulation(cfg)
    sim_box.append(sim)
    t = sim.t0 + BACKFILL_AT
    sim.events = [Event(t, "backfill", {"job": "every20", "since_s": 300.0, "until_s": 60.0, "only": "all"})]
    if crash:
        sim.events.append(Event(t + 60, "crash", {"calls": 0, "downtime": 30.0}))
    return sim.run()


@pytest.mark.parametrize("crash", [False, True])
def test_only_the_newest_occurrence_waits_behind_a_backfill_run_under_latest(monkeypatch, crash):
    out = behind_a_backfill(monkeypatch, crash)
    try:
        at = START + timedelta(seconds=BACKFILL_AT)
        backfilled = {r.run_id for r in out.store.runs("every20") if r.trigger == "backfill"}
        reruns = [p for p in out.world.procs.values() if p.run_id in backfilled and p.started_wall >= at]
        first = min(reruns, key=lambda p: p.started_mono)
        assert (first.started_wall - at).total_seconds() < 1  # the case is met: it ran from BACKFILL_AT
        ended = out.world.wall_at(first.end_mono())
        behind = sorted(
            (r for r in out.store.runs("every20") if at < r.scheduled_at < ended and r.trigger == "schedule"),
            key=lambda r: r.scheduled_at,
        )
        assert len(behind) == 7
        *older, newest = behind
        ran = [p for p in out.world.procs.values() if p.run_id == newest.run_id]
        assert newest.state == "succeeded" and abs((ran[0].started_wall - ended).total_seconds()) < 1
        states = [
            (r.state, "fell due meanwhile and waits in its place (catchup: latest)" in (r.error or "")) for r in older
        ]
        if crash:
            # the ones that fell due while chronod was down: latest ran the newest of them
            # (which then waited behind the backfill run too), the others skipped_outage
            down = [r for r in older if r.state == "skipped_outage"]
            assert down and all("catchup: latest ran a newer occurrence" in (r.error or "") for r in down)
            states = [s for s, r in zip(states, older) if r not in down]
        assert states == [("skipped_overlap", True)] * len(states) and states
        assert not {name: bad[0].what for name, bad in check(out, CHECKS).items() if bad}
    finally:
        out.close()


RETRIED = {**EVERY_20S, "retry": {"attempts": 3, "backoff_s": 10, "max_backoff_s": 10}}


def test_the_newest_occurrence_waits_for_the_backfill_runs_retry_too(monkeypatch):
    """The backfill's first run fails after 145 s, at 00:12:35, and its retry starts 8 to
    12 s later and takes 3 s: the 00:12:40 occurrence falls due between the two attempts.
    A run waiting for its next attempt is still going (its retry always starts), so that
    occurrence waits for the retry and starts when it ends, and is not late (seeds 8 and
    20, a day of 100 jobs: fire_lag_bounded took the job for idle between two attempts)."""
    sim_box: list[Simulation] = []

    def duration(plan):
        def draw(rng):
            t = sim_box[0].world.mono() - sim_box[0].t0
            if BACKFILL_AT <= t < BACKFILL_AT + 1:
                return 145.0, 1
            return (3.0 if BACKFILL_AT + 145 < t < BACKFILL_AT + 160 else 1.0), 0

        return draw

    monkeypatch.setattr(driver, "duration", duration)
    cfg = Config(days=0.052, jobs=1, seed=1, faults=frozenset(), job_docs=(RETRIED,), mean_s=1.0, start=START)
    sim = Simulation(cfg)
    sim_box.append(sim)
    job = {"job": "every20", "since_s": 300.0, "until_s": 60.0, "only": "all"}
    sim.events = [Event(sim.t0 + BACKFILL_AT, "backfill", job)]
    out = sim.run()
    try:
        at = START + timedelta(seconds=BACKFILL_AT)
        backfilled = {r.run_id for r in out.store.runs("every20") if r.trigger == "backfill"}
        first, retry = sorted(
            (p for p in out.world.procs.values() if p.run_id in backfilled and p.started_wall >= at),
            key=lambda p: p.started_mono,
        )[:2]
        assert (first.run_id, first.attempt + 1) == (retry.run_id, retry.attempt)  # the case is met
        waited = next(r for r in out.store.runs("every20") if r.scheduled_at == at + timedelta(seconds=150))
        ran = [p for p in out.world.procs.values() if p.run_id == waited.run_id]
        assert waited.state == "succeeded" and ran[0].started_wall > retry.started_wall
        assert abs((ran[0].started_wall - out.world.wall_at(retry.end_mono())).total_seconds()) < 1
        assert not {name: bad[0].what for name, bad in check(out, CHECKS).items() if bad}
    finally:
        out.close()
