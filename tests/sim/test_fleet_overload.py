"""A fleet past its ceiling on the simulated clock: three real daemons whose start limit
is half of what falls due. Each node sheds what it would start late, says so, and starts
what it keeps on time, at its start limit."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import timedelta

from chronod.core import overload
from chronod.sim.fleet import FleetSimulation
from chronod.sim.fleet_checks import check_fleet
from chronod.sim.scenario import Config
from tests.sim.fleet_jobs import every_ten_seconds

JOBS = 90  # every 10 s, spread over the 10 seconds: 9 owed a second
MAX_STARTS = 1.5  # per node: 4.5 starts a second for the fleet, half of what is owed
WARM_S = 30.0  # the first seconds: the nodes start, and find out they are behind


def test_a_fleet_at_twice_its_start_limit_sheds_the_excess_early_and_starts_the_rest_on_time():
    docs = tuple(every_ten_seconds(i) for i in range(JOBS))
    cfg = Config(
        days=0.003, jobs=JOBS, nodes=3, seed=3, faults=frozenset(), job_docs=docs, mean_s=0.05, max_starts=MAX_STARTS
    )
    out = FleetSimulation(dataclasses.replace(cfg, drain_s=20.0)).run()
    try:
        results = check_fleet(out, ["attempt_started_once", "any_runs_once", "reasons_true"])
        assert not {name: bad[0] for name, bad in results.items() if bad}
        lo = out.wall(out.t0 + WARM_S).replace(microsecond=0) + timedelta(seconds=1)
        hi = out.wall(out.world.mono() - 30.0).replace(microsecond=0)
        rows = [r for r in out.store.runs() if lo <= r.fire_at < hi]
        states = Counter(r.state for r in rows)
        span = (hi - lo).total_seconds()
        # every owed occurrence is recorded, once (one row each, none left waiting): 9 fall due each second
        assert len(rows) == len({r.run_id for r in rows}) == JOBS / 10 * span, states
        assert states["pending"] == states["running"] == 0, states
        shed = [r for r in rows if overload.shed_record(r.state, r.error)]
        assert states["skipped_outage"] == len(shed) > 0, states
        assert all(r.error and r.error.startswith("node node") and "under 1 s" in r.error for r in shed)
        # the fleet starts at its ceiling (the three nodes' start limits), not below it
        started = [r for r in rows if r.started_at is not None]
        assert len(started) / span >= 0.9 * 3 * MAX_STARTS, (len(started) / span, states)
        # and what it starts starts on time
        lags = sorted((r.started_at - r.fire_at).total_seconds() for r in started)
        assert lags[int(len(lags) * 0.99)] < 2.0, lags[-10:]
    finally:
        out.close()
