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
        for j, r in lines.waiting(res)
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


def test_a_retry_in_line_counts_its_wait_from_when_it_fell_due() -> None:
    """A retry waits for a slot from when its retry fell due (`slot_since`), not from its
    occurrence's fire time: the line's deadline is that plus its window. Counted from the
    fire time, the deadline of a retry that joined a line already waiting was in the past,
    nothing expired at it, and the loop woke again at once, every millisecond until a slot
    freed (400,000 wake-ups in a simulated day of 1,000 jobs)."""
    db = _job(1, "db")  # catchup_window_s 600
    other = _job(4, "db")
    lines = Lines()
    first = T0 + timedelta(seconds=1200)
    lines.wait_for_slot(other, Run("r0", other.spec.id, other.key, first, first))
    assert lines.deadline({}) == first + timedelta(seconds=600) + EXPIRY_SLACK  # the line's deadline is kept now
    fell_due = T0 + timedelta(seconds=900)
    retry = Run("r1", db.spec.id, db.key, T0, T0, state="retry_wait", next_attempt_at=fell_due)
    lines.wait_for_slot(db, retry)
    deadline = lines.deadline({})
    assert deadline == fell_due + timedelta(seconds=600) + EXPIRY_SLACK
    # at that deadline the retry expires: the line moves, and the next deadline is later
    start, expired = lines.slot_turn("db", 1, 1, deadline) or ([], [])
    assert [r.run_id for _, r in expired] == ["r1"] and not start
    assert lines.deadline({}) == first + timedelta(seconds=600) + EXPIRY_SLACK
