"""The checks ask which of a job's processes ran at a time, or over a span, from hulls
sorted by start (`Facts.overlapping`): the answer must be the walk over all of the job's
processes, in the same order, at any time, clock steps and crashes included."""

from __future__ import annotations

import random
from datetime import timedelta

from chronod.sim.driver import Simulation
from chronod.sim.invariants import Facts
from chronod.sim.scenario import Config


def test_overlapping_is_the_walk_over_every_process_of_the_job() -> None:
    out = Simulation(Config(days=0.1, jobs=20, seed=4)).run()
    try:
        f = Facts(out)
        rng = random.Random(4)
        asked = 0
        for job, procs in f.by_job.items():
            hulls = [f.hull(p) for p in procs]
            for _ in range(50):
                a, b = rng.choice(hulls)
                lo = a + timedelta(seconds=rng.uniform(-300, 300))
                hi = lo + timedelta(seconds=rng.choice([0, 0.002, 5, 600]))
                want = [p for p, (s, e) in zip(procs, hulls) if s <= hi and lo <= e]
                assert f.overlapping(job, lo, hi) == want, (job, lo, hi)
                assert f.alive(job, lo, hi) == bool(want)
                asked += bool(want)
        assert asked > 100  # the questions met processes, not only gaps
    finally:
        out.close()
