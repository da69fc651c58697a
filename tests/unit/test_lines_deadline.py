"""A resource line's earliest deadline is kept as runs join the line (not computed again
over the whole line at each arrival): whatever joins, starts, expires or is forgotten,
`Lines.deadline` is the earliest fire time plus catch-up window in every line."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from chronod.core.model import JobSpec
from chronod.daemon.runs import Job
from chronod.daemon.waits import EXPIRY_SLACK, Lines
from chronod.store.api import Run

T0 = datetime(2025, 6, 2, tzinfo=UTC)


def _job(i: int, resource: str) -> Job:
    window = (60, 600, 3600)[i % 3]
    spec = JobSpec(f"j{i}", "ops", "* * * * *", "true", "idempotent", resource=resource, catchup_window_s=window)
    return Job.on(spec, "n1")


def _brute(lines: Lines, jobs: dict[str, Job]) -> datetime | None:
    times = [
        r.fire_at + timedelta(seconds=j.spec.catchup_window_s) + EXPIRY_SLACK
        for res in lines.resources()
        for j, r in lines._waiting.get(res, [])
    ]
    return min(times) if times else None


def test_the_earliest_deadline_follows_every_change_of_a_line() -> None:
    rng = random.Random(11)
    jobs = {f"j{i}": _job(i, ("db", "net")[i % 2]) for i in range(12)}
    lines = Lines()
    now = T0
    for step in range(1500):
        job = jobs[f"j{rng.randrange(12)}"]
        op = rng.random()
        if op < 0.5:
            fire = T0 + timedelta(seconds=rng.randrange(0, 7200))
            run = Run(f"r{step}", job.spec.id, job.key, fire, fire)
            lines.wait_for_slot(job, run)
        elif op < 0.85:
            now += timedelta(seconds=rng.randrange(0, 120))
            resource = rng.choice(["db", "net"])
            lines.slot_turn(resource, 1 if resource == "db" else 2, rng.randrange(0, 3), now)
            lines.tidy(resource)
        elif op < 0.9:
            lines.forget(job.spec.id)
        lines.deadline(jobs)  # asked between changes, as every wake-up does
        assert lines.deadline(jobs) == _brute(lines, jobs), step
