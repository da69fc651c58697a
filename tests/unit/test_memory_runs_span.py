"""The memory store answers a job's runs over a span from its runs sorted by scheduled
time, not by walking the job's whole history: the answer must be the walk's, whatever
order the runs were stored in (backfills and manual runs store older times late) and
after runs are deleted (pruning)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from chronod.store.api import Run
from chronod.store.memory import MemoryStore

T0 = datetime(2025, 6, 2, tzinfo=UTC)


def test_a_span_of_a_jobs_runs_is_the_walk_over_all_of_them() -> None:
    rng = random.Random(3)
    store = MemoryStore(now=lambda: T0)
    stored: dict[str, Run] = {}
    for k in range(1500):
        job = f"j{rng.randrange(4)}"
        at = T0 + timedelta(seconds=rng.choice([k * 20, rng.randrange(0, 30000)]))  # mostly ascending
        run = Run(f"{job}-{k:05d}", job, job, at, at)
        store.insert_runs([run])
        stored[run.run_id] = run
        if rng.random() < 0.1:
            gone = rng.choice(sorted(stored))
            assert store.delete_run(gone)
            del stored[gone]
    for _ in range(400):
        job = f"j{rng.randrange(5)}"  # j4 has no runs
        lo = T0 + timedelta(seconds=rng.randrange(-600, 31000))
        since = rng.choice([None, lo])
        until = rng.choice([None, lo + timedelta(seconds=rng.choice([0, 20, 600, 9000]))])
        got = [r.run_id for r in store.runs(job, since=since, until=until)]
        want = sorted(
            (
                r
                for r in stored.values()
                if r.job_id == job
                and (since is None or r.scheduled_at >= since)
                and (until is None or r.scheduled_at < until)
            ),
            key=lambda r: (r.scheduled_at, r.run_id),
            reverse=True,
        )
        assert got == [r.run_id for r in want], (job, since, until)
