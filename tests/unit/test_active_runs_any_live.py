"""A catch-up line asks whether any run of its job is going, at every wake-up and after
every ending: `ActiveRuns.any_live` answers what `count_live` above 0 does, without
counting the job's runs."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from chronod.core.model import JobSpec
from chronod.daemon.runs import Active, ActiveRuns, Job
from chronod.store.api import Run

T0 = datetime(2025, 6, 2, tzinfo=UTC)


def test_any_live_is_count_live_above_zero() -> None:
    rng = random.Random(11)
    jobs = [Job.on(JobSpec(f"j{i}", "ops", "* * * * *", "true", "idempotent"), "n1") for i in range(4)]
    active = ActiveRuns()
    for step in range(2000):
        job = rng.choice(jobs)
        op = rng.random()
        if op < 0.45:
            rid = f"r{step}"
            active[rid] = Active(Run(rid, job.spec.id, job.key, T0, T0), None, job, disowned=rng.random() < 0.3)
        elif op < 0.8 and active:
            del active[rng.choice(list(active))]
        elif active:
            active[rng.choice(list(active))].disowned = rng.random() < 0.5
        for j in jobs:
            assert active.any_live(j.spec.id) == (active.count_live(j.spec.id) > 0), step
