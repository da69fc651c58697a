"""The audit commands' answers about a simulation, asked at its end: `missed`, `report`
and `did-it-run` as an operator gets them.

They are asked through chronod.store.audit, the same functions chronoctl's commands call
(which rows each judges, and the pure judging in chronod.core.history and .report), not
through chronoctl itself: the daemon's package does not depend on the CLI, and what is
left in chronoctl is parsing flags and printing."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from chronod.store import audit

SLACK = timedelta(seconds=60)  # the windows start this long before the simulation


def asked_since(out: Any) -> datetime:
    """Where the questions' windows start: `missed` and `report` take occurrences by their
    scheduled time, and the first one the daemon runs fires after the simulation starts
    but may be scheduled up to its job's tolerance before (the jitter offset)."""
    widest = max((v.spec.tolerance_s for vs in out.versions.values() for v in vs), default=0)
    start: datetime = out.start
    return start - SLACK - timedelta(seconds=widest)


def missed_now(out: Any) -> dict[str, tuple[str, datetime]]:
    """run_id -> (job, scheduled_at) of every occurrence `missed` lists over the whole
    simulation, asked at its end (as `missed --since` the simulation's length would)."""
    store, now, since = out.store, out.end, asked_since(out)
    rows = [j for j in store.jobs() if j.removed_at is None]
    found, marks = audit.window(store, since - timedelta(seconds=1), now + timedelta(seconds=1))
    misses = audit.missed(store, rows, since, now, found, marks, store.pruned())
    return {m.run_id: (m.job_id, m.scheduled_at) for m in misses}


def report_now(out: Any) -> dict[str, dict[str, Any]]:
    """job_id -> {"spec": the stored definition, "lines": run_id -> (state, scheduled_at)} of
    `report JOB` over the whole simulation for every job the store knows (removed too)."""
    store, now, since = out.store, out.end, asked_since(out)
    answers: dict[str, dict[str, Any]] = {}
    for row in store.jobs(include_removed=True):
        rep = audit.report(store, row.spec, since, now, now)
        answers[row.job_id] = {"spec": row.spec, "lines": {ln.run_id: (ln.state, ln.scheduled_at) for ln in rep.lines}}
    return answers


def did_it_run_at(out: Any, job_id: str, at: datetime) -> Any:
    """`did-it-run JOB --at AT` asked at the end of the simulation (None: no such job)."""
    row = out.store.get_job(job_id)
    if row is None:
        return None
    return audit.did_it_run(out.store, row, out.end, at=at)


@dataclass(frozen=True)
class Probe:
    """`did-it-run --at` asked, while a daemon ran, about an occurrence due and not started,
    beside what the simulation knew then: whether a pause of the job was open, whether the
    job's resource had every slot taken (`full`: runs of it going, of `limit`)."""

    at: datetime
    job: str
    run_id: str
    fire_at: datetime
    state: str  # the answer's state
    hold_kind: str | None
    hold_name: str | None
    reason: str
    paused: bool
    resource: str | None
    going: int  # processes of the resource running at `at` (or ending in the last half second)
    limit: int
    job_going: bool  # a process of the job itself runs (or ended in the last half second)
    earlier_pending: bool  # an older occurrence of the job is due and not started (a backlog), or waits for its retry


PROBE_LAG_S = 5.0  # an occurrence is asked about once it is this long past its fire time plus tolerance
MAX_PROBED = 200  # occurrences asked about per probe


def probe(sim: Any, now: datetime) -> list[Probe]:
    """Ask the audit about every occurrence due and not started now (simulation `sim`,
    a chronod.sim.driver.Simulation): what `did-it-run` says, and what the world was."""
    from chronod.core.model import RunState
    from chronod.sim.scenario import RESOURCES

    store, w = sim.store, sim.world
    # those waiting for a retry are asked about for the occurrences due behind them
    rows = store.runs(since=now - timedelta(days=2), until=now, states=[RunState.PENDING, RunState.RETRY_WAIT])
    mono = w.mono()
    out: list[Probe] = []
    live: list[Any] | None = None
    jobs_going: set[str] = set()  # of the processes running now, and those of each resource
    going_of: Counter[str | None] = Counter()
    first_fire: dict[str, datetime] = {}  # the earliest fire time of each job's occurrences due
    for o in rows:
        if o.job_id not in first_fire or o.fire_at < first_fire[o.job_id]:
            first_fire[o.job_id] = o.fire_at
    for r in sorted((r for r in rows if r.state == RunState.PENDING), key=lambda r: r.fire_at)[:MAX_PROBED]:
        job = store.get_job(r.job_id)
        if job is None or job.removed_at is not None:
            continue
        spec = job.spec
        if r.fire_at + timedelta(seconds=spec.tolerance_s + PROBE_LAG_S) > now:
            continue
        answer = audit.did_it_run(store, job, now, at=r.scheduled_at)
        if answer.occurrence is None or answer.occurrence.run_id != r.run_id:
            continue
        spans = sim.paused.get(r.job_id, [])
        res = spec.resource
        if live is None:
            live = w.going(slack_s=0.5)
            # as for the resource: one that ended in the last half second is going until the daemon has seen it end
            jobs_going = {p.job_id for p in live if p.started_mono <= mono}
            going_of = Counter(p.resource for p in live if p.started_mono <= mono)
        going = going_of[res] if res else 0
        out.append(
            Probe(
                now,
                r.job_id,
                r.run_id,
                r.fire_at,
                answer.state,
                answer.hold.kind if answer.hold else None,
                answer.hold.name if answer.hold else None,
                answer.reason,
                any(a <= now and b is None for a, b in spans),
                res,
                going,
                RESOURCES.get(res, 0) if res else 0,
                r.job_id in jobs_going,
                first_fire[r.job_id] < r.fire_at,
            )
        )
    return out
