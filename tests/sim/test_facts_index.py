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
                asked += bool(want)
        assert asked > 100  # the questions met processes, not only gaps
    finally:
        out.close()


def test_holding_is_the_walk_over_every_process_of_the_resource() -> None:
    """`Facts.holding` (reason_truth's question for every run skipped for its resource):
    the hulls of the resource's processes that meet a span, as the walk over all finds them."""
    out = Simulation(Config(days=0.1, jobs=40, seed=9)).run()
    try:
        f = Facts(out)
        rng = random.Random(9)
        met = 0
        resources = sorted({p.resource for p in f.procs if p.resource})
        assert resources
        for resource in resources:
            hulls = [f.hull(p) for p in f.procs if p.resource == resource]
            for _ in range(200):
                a, b = rng.choice(hulls)
                lo = a + timedelta(seconds=rng.uniform(-600, 600))
                hi = lo + timedelta(seconds=rng.choice([0, 0.002, 5, 600, 3600]))
                want = sorted((s, e) for s, e in hulls if s <= hi and lo <= e)
                assert sorted(f.holding(resource, lo, hi)) == want, (resource, lo, hi)
                met += bool(want)
        assert met > 50  # the questions met processes, not only gaps
    finally:
        out.close()
