"""The audit commands' answers about a simulation, asked at its end: `missed`, `report`
and `did-it-run` as an operator gets them.

They are asked through chronod.store.audit, the same functions chronoctl's commands call
(which rows each judges, and the pure judging in chronod.core.history and .report), not
through chronoctl itself: the daemon's package does not depend on the CLI, and what is
left in chronoctl is parsing flags and printing."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from chronod.store import audit

SLACK = timedelta(seconds=60)  # the windows start this long before the simulation


def missed_now(out: Any) -> dict[str, tuple[str, datetime]]:
    """run_id -> (job, scheduled_at) of every occurrence `missed` lists over the whole
    simulation, asked at its end (as `missed --since` the simulation's length would)."""
    store, now, since = out.store, out.end, out.start - SLACK
    rows = [j for j in store.jobs() if j.removed_at is None]
    found, marks = audit.window(store, since - timedelta(seconds=1), now + timedelta(seconds=1))
    misses = audit.missed(store, rows, since, now, found, marks, store.pruned())
    return {m.run_id: (m.job_id, m.scheduled_at) for m in misses}


def report_now(out: Any) -> dict[str, dict[str, Any]]:
    """job_id -> {"spec": the stored definition, "lines": run_id -> (state, scheduled_at)} of
    `report JOB` over the whole simulation for every job the store knows (removed too)."""
    store, now = out.store, out.end
    answers: dict[str, dict[str, Any]] = {}
    for row in store.jobs(include_removed=True):
        rep = audit.report(store, row.spec, out.start - SLACK, now, now)
        answers[row.job_id] = {"spec": row.spec, "lines": {ln.run_id: (ln.state, ln.scheduled_at) for ln in rep.lines}}
    return answers


def did_it_run_at(out: Any, job_id: str, at: datetime) -> Any:
    """`did-it-run JOB --at AT` asked at the end of the simulation (None: no such job)."""
    row = out.store.get_job(job_id)
    if row is None:
        return None
    return audit.did_it_run(out.store, row, out.end, at=at)
