"""Fair shares on the simulated clock: the real daemon past its start limit, one
account's flood of every-second jobs beside one job of root's."""

from __future__ import annotations

import dataclasses
from collections import Counter

from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config


def broken(results):
    return {name: bad[0] for name, bad in results.items() if bad}


def every_second(job_id: str, user: str | None) -> dict:
    doc = {
        "id": job_id,
        "owner": "ops",
        "schedule": "* * * * * *",
        "command": "true",
        "idempotency_class": "idempotent",
        "tolerance_s": 0,
        "tolerance_reason": "a herd on purpose",
    }
    if user:
        doc["user"] = user
    return doc


def test_past_the_start_limit_a_flood_of_one_accounts_jobs_leaves_roots_job_all_its_occurrences():
    """60 every-second jobs of `nobody` and one of root's against 10 starts a second: the
    start limit skips most of the flood, and root's job (its id sorting last) starts
    at (nearly) every occurrence."""
    docs = (*(every_second(f"nb.tick{i:02d}", "nobody") for i in range(60)), every_second("zz.root", None))
    cfg = Config(days=0.0007, jobs=len(docs), seed=7, faults=frozenset(), job_docs=docs, mean_s=0.05, max_starts=10)
    out = Simulation(dataclasses.replace(cfg, drain_s=5.0)).run()
    try:
        assert not broken(check(out, ["one_terminal_state"]))
        rows = out.store.runs(limit=1_000_000)
        root = Counter(r.state for r in rows if r.job_id == "zz.root")
        flood = Counter(r.state for r in rows if r.job_id != "zz.root")
        # saturated: the flood's runs mostly wait past their next occurrence (skipped_overlap)
        assert flood["succeeded"] < sum(flood.values()) / 3, flood
        ended = sum(root.values()) - root["pending"] - root["running"]
        assert ended >= 30, root
        assert root["succeeded"] >= ended - 2, root  # the first second or the last may fall between
    finally:
        out.close()
