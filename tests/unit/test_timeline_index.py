"""`Timeline.job_runs` answers from an index by job: it must name exactly the tracked runs
of the job, whatever tracked, took, dropped or reset them (a retry's line and a backfill's
turn ask it for the runs waiting for their next attempt)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from chronod.core.model import RunState
from chronod.daemon.timeline import Timeline
from chronod.store.api import Run

T0 = datetime(2025, 6, 2, tzinfo=UTC)


def _run(i: int, job: str) -> Run:
    at = T0 + timedelta(minutes=i)
    state = RunState.RETRY_WAIT if i % 3 == 0 else RunState.PENDING
    return Run(f"r{i}", job, job, at, at, state=state, next_attempt_at=at if state == RunState.RETRY_WAIT else None)


def _by_scan(tl: Timeline, job: str) -> set[str]:
    return {r.run_id for r in tl.runs() if r.job_id == job}


def test_job_runs_names_the_tracked_runs_of_the_job_after_any_sequence_of_changes() -> None:
    rng = random.Random(7)
    tl = Timeline()
    jobs = ["a", "b", "c"]
    for step in range(2000):
        op = rng.random()
        i = rng.randrange(60)
        job = jobs[i % 3]
        if op < 0.35:
            tl.track(_run(i, job))
        elif op < 0.45:
            tl.look_at(T0 + timedelta(minutes=rng.randrange(60)))
        elif op < 0.55:
            tl.hold(_run(i, job), T0 + timedelta(hours=1))
        elif op < 0.85:
            tl.take(f"r{i}")
        elif op < 0.95:
            tl.drop({rng.choice(jobs)}, entries=rng.random() < 0.5)
        elif op < 0.97:
            tl.reset()
        else:
            tl.due(T0 + timedelta(minutes=rng.randrange(60)))
        for j in jobs:
            assert {r.run_id for r in tl.job_runs(j)} == _by_scan(tl, j), step
            assert all(tl.get(r.run_id) is r for r in tl.job_runs(j))
