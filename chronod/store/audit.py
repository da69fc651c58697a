"""The audit's questions asked of a store: which rows `report`, `did-it-run` and `missed`
judge, and their answers (the judging itself is pure: chronod.core.history and
chronod.core.report).

chronoctl's commands and the simulation's audit check (chronod.sim.audit) both ask
through here, so what the simulation checks is what an operator is told."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from chronod.core import blackout, history
from chronod.core.model import ACTIVE_STATES, TERMINAL_STATES, JobSpec, RunState
from chronod.core.report import JobReport, job_report
from chronod.core.schedule import compile_schedule
from chronod.store.api import JobRow, Run, Store


def schedule_of(spec: JobSpec) -> Any:
    """The compiled schedule of a stored job, with its DST policy."""
    return compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)


def node_names(store: Store) -> list[str]:
    return [n.name for n in store.nodes()]


def report(
    store: Store, spec: JobSpec, since: datetime, until: datetime, now: datetime, schedule: Any = None
) -> JobReport:
    """`report JOB --from since --to until`: every expected occurrence of [since, until).
    `schedule`: the spec's compiled schedule when the caller has it (compiled otherwise)."""
    schedule = schedule if schedule is not None else schedule_of(spec)
    # Jitter moves a fire time up to tolerance_s after its nominal time; runs are keyed by both.
    runs = store.runs(spec.id, since=since - timedelta(days=1), until=until, newest_first=False)
    nodes = node_names(store) if spec.run_on.each else []
    spans = store.known_spans([spec.id]).get(spec.id, [])
    pruned = store.pruned([spec.id]).get(spec.id)
    return job_report(spec, schedule, runs, start=since, end=until, now=now, nodes=nodes, spans=spans, pruned=pruned)


def did_it_run(
    store: Store,
    row: JobRow,
    now: datetime,
    at: datetime | None = None,
    since: datetime | None = None,
    schedule: Any = None,
) -> history.Answer:
    """`did-it-run JOB [--at AT | --since ...]`: the occurrence at or before `at` (default:
    the latest due by now), or any success scheduled in (since, now]."""
    sched = schedule if schedule is not None else schedule_of(row.spec)
    nodes = node_names(store) if row.spec.run_on.each else []
    found = _runs_asked(store, row, sched, now, at, since)
    # The watermark is read after the runs: retention deletes a run and raises the watermark
    # in one transaction, so whatever a prune between the two reads took is called pruned.
    spans = store.known_spans([row.job_id]).get(row.job_id, [])
    pruned = store.pruned([row.job_id]).get(row.job_id)
    held = pauses(store)
    if since is not None:
        return history.did_it_run(
            row.spec, found, now=now, since=since, schedule=sched, nodes=nodes, spans=spans, pruned=pruned, pauses=held
        )
    return history.did_it_run(
        row.spec, found, now=now, at=at, schedule=sched, nodes=nodes, spans=spans, pruned=pruned, pauses=held
    )


def pauses(store: Store) -> list[blackout.Pause]:
    """The pauses set now (a due occurrence of a job one holds does not start)."""
    return [blackout.Pause(p.kind, p.target, p.reason, p.by, p.since, p.until) for p in store.pauses()]


def _runs_asked(
    store: Store, row: JobRow, sched: Any, now: datetime, when: datetime | None, start: datetime | None
) -> list[Run]:
    """The runs `did-it-run` judges: those of the window (since), else around the
    occurrence at or before `when` (at) or now."""
    if start is not None:
        return store.runs(row.job_id, since=start - timedelta(seconds=1), until=now)
    if sched.kind == "reboot":
        return store.runs(row.job_id, limit=1)
    nominal = sched.prev_at_or_before(when or now)
    if nominal is None:
        return []
    before = sched.prev_at_or_before(nominal - timedelta(seconds=1)) or nominal
    return store.runs(row.job_id, since=before - timedelta(seconds=1), until=nominal + timedelta(seconds=1))


def window(store: Store, since: datetime, until: datetime) -> tuple[list[Run], list[history.Mark] | None]:
    """The runs `missed` judges: with the store's slim `run_marks`, full rows only for runs
    that did not succeed (few) and marks for the rest; otherwise every run in full."""
    if not hasattr(store, "run_marks"):
        return store.runs(since=since, until=until), None
    marks = store.run_marks(since=since, until=until)
    unhappy = [s for s in (*TERMINAL_STATES, *ACTIVE_STATES) if s != RunState.SUCCEEDED]
    return store.runs(since=since, until=until, states=unhappy), marks


def missed(
    store: Store,
    rows: list[JobRow],
    since: datetime,
    now: datetime,
    found: list[Run],
    marks: list[history.Mark] | None,
    pruned: dict[str, Any],
) -> list[history.Miss]:
    """`missed --since ...`: every occurrence of the registered jobs `rows` in (since, now]
    that did not succeed or has no record; `found` and `marks` are `window`'s answer,
    `pruned` the store's pruning watermarks (read after them)."""
    known = store.known_spans([j.job_id for j in rows])
    return history.missed(
        [j.spec for j in rows],
        found,
        since=since,
        now=now,
        nodes=node_names(store),
        known={j.job_id: known.get(j.job_id, []) for j in rows},
        marks=marks,
        pruned=pruned,
        pauses=pauses(store),
    )
