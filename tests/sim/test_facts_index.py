"""The checks ask which of a job's processes ran at a time, or over a span, from hulls
sorted by start (`Facts.overlapping`): the answer must be the walk over all of the job's
processes, in the same order, at any time, clock steps and crashes included."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

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


def test_a_free_moment_is_the_walk_over_every_span_at_every_point() -> None:
    """`_free_moment` (is a slot of a resource free at some moment?) counts the spans at
    each point by bisection: the same moment as the count over every span, for random
    spans, holds and disturbances (touching, empty and nested ones included)."""
    from itertools import pairwise
    from types import SimpleNamespace

    from chronod.sim.invariants import INSTANT, LAG_S, _free_moment

    def walk(f, spans, limit, start, end, held):  # the count before the bisection
        settling = [(a, b + timedelta(seconds=LAG_S)) for a, b in f.spans]
        points = sorted({start, end, *(t for a, b in [*spans, *held, *settling] for t in (a, b) if start <= t <= end)})
        for x, y in pairwise(points):
            mid = x + (y - x) / 2
            if y - x <= 2 * INSTANT or any(a <= mid <= b for a, b in settling) or any(a <= mid < b for a, b in held):
                continue
            if sum(1 for a, b in spans if a <= mid <= b) < limit:
                return mid
        return None

    rng = random.Random(13)
    t0 = datetime(2025, 6, 2, tzinfo=UTC)

    def span(width: int) -> tuple:
        a = t0 + timedelta(seconds=rng.randrange(0, 600))
        return a, a + timedelta(seconds=rng.choice([0, 1, rng.randrange(0, width)]))

    found = 0
    for _ in range(3000):
        spans = [span(900) for _ in range(rng.randrange(0, 30))]
        held = [span(100) for _ in range(rng.randrange(0, 3))]
        f = SimpleNamespace(spans=[span(60) for _ in range(rng.randrange(0, 3))])
        start = t0 + timedelta(seconds=rng.randrange(0, 300))
        end = start + timedelta(seconds=rng.randrange(0, 400))
        limit = rng.choice([1, 2, 3])
        want = walk(f, spans, limit, start, end, held)
        assert _free_moment(f, spans, limit, start, end, held) == want
        found += want is not None
    assert 300 < found < 2700, found  # both answers were met often
