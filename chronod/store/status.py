"""The console's questions about the present, asked of a store: is chrono healthy (and so
`chronoctl status`'s exit code), what each job is doing and what holds it, what fires
next. Next to `audit.py` (the past): chronoctl renders these answers as text and JSON,
the web console as HTML, and the simulation checks them; none of them judges for itself.

Each answer is a frozen dataclass of plain values (datetimes aware, in UTC). The rules
are pure and live in the core (`health`, `blackout.held`, `history`, `agenda`); this
module only reads what they need, in as few queries as the answer allows.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, Sequence

from chronod import fsutil
from chronod.core import agenda as agenda_core
from chronod.core import health as core_health
from chronod.core import history, occurrence
from chronod.core.blackout import Hold, Pause, Window, blackout_at, held, pause_hold, paused
from chronod.core.model import JobSpec
from chronod.store.api import JobRow, Node, Run, Store
from chronod.store.audit import node_names, pauses, schedule_of

LAST_RUNS = 10  # the runs `status JOB` shows
STREAK_SCAN = 100  # how far back a success streak is counted
FAILING = ("failed", "timed_out", "lost", "skipped_account")  # a locked account's job runs no more: say so
DESIGNED_HOLDS = ("skipped_paused", "skipped_blackout")  # not an outcome: a failing job stays failing
CANCELLED_SHOWN = timedelta(days=1)  # how long `status` keeps showing a cancelled backfill


# --- health ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Host:
    """This host as the health check sees it: its names and its boot."""

    names: frozenset[str]
    boot_id: str


def this_host() -> Host:
    name = socket.gethostname()
    return Host(frozenset({name, name.split(".")[0]}), fsutil.boot_id())


def probe(node: Node, host: Host) -> core_health.Probe:
    """What this host can tell of a node's process: by pid, start time and boot id."""
    if node.hostname not in host.names:
        return core_health.Probe.REMOTE
    if node.boot_id != host.boot_id:
        return core_health.Probe.REBOOTED
    alive = fsutil.same_process(node.pid, node.pid_start)
    return core_health.Probe.RUNNING if alive else core_health.Probe.GONE


def node_health(nodes: Iterable[Node], now: datetime, host: Host | None = None) -> list[core_health.NodeHealth]:
    """Every node judged (`core.health.node_health`), newest heartbeat first."""
    here = host or this_host()
    return [core_health.node_health(n, now, probe(n, here)) for n in nodes]


def health(store: Store, now: datetime, host: Host | None = None) -> core_health.Health:
    """The installation's health: `verdict.exit_code` is `chronoctl status`'s exit code."""
    return core_health.judge(node_health(store.nodes(), now, host), store.registry_errors())


def job_health(store: Store, row: JobRow, now: datetime, host: Host | None = None) -> core_health.Health:
    """`status JOB`'s health: the installation's, and this job's quarantine and file errors."""
    errors = store.registry_errors()
    whole = core_health.judge(node_health(store.nodes(), now, host), errors)
    return core_health.judge_job(whole, row.job_id, row.spec.source_file, errors)


# --- what holds a job ---------------------------------------------------------------------


@dataclass(frozen=True)
class PauseInForce:
    """A pause set now, with the registered jobs it holds."""

    pause: Pause
    jobs: tuple[str, ...]


def pauses_in_force(store: Store, rows: Sequence[JobRow], now: datetime) -> list[PauseInForce]:
    """Every pause that holds now, each with the jobs it holds."""
    return [
        PauseInForce(p, tuple(sorted(r.job_id for r in rows if p.applies_to(r.spec))))
        for p in pauses(store)
        if p.active(now)
    ]


def held_jobs(rows: Iterable[JobRow], in_force: Sequence[PauseInForce]) -> set[str]:
    """The jobs some pause holds now (their own, their tag's or their resource's)."""
    return {j for p in in_force for j in p.jobs} | {r.job_id for r in rows if r.paused}


@dataclass(frozen=True)
class NextFire:
    """A job's next occurrence and what holds it (None: it runs)."""

    occurrence: occurrence.Occurrence
    hold: Hold | None


def next_fires(
    spec: JobSpec,
    schedule: Any,
    now: datetime,
    count: int,
    *,
    node: str | None = None,
    all_pauses: Sequence[Pause] = (),
    windows: Sequence[Window] = (),
) -> list[NextFire]:
    """The next `count` fires of `spec` (on `node` for a job on each node), each held or not."""
    place = occurrence.placement(spec, node)
    return [NextFire(o, held(spec, all_pauses, windows, o.fire_at)) for o in place.upcoming(schedule, now, count)]


# --- the overview --------------------------------------------------------------------------


@dataclass(frozen=True)
class Failing:
    """A job whose latest outcome in the last day failed, with what holds it now."""

    run: Run
    owner: str | None
    hold: Hold | None


@dataclass(frozen=True)
class Overview:
    """`chronoctl status` without a job: health, daemons, pauses, failing, silent, running."""

    now: datetime
    health: core_health.Health
    running_on: Mapping[str, tuple[str, ...]]  # node name -> job ids running there
    node_info: Mapping[str, Mapping[str, Any]]  # node name -> what it published (registry load, jobs)
    spec_disagreements: list[dict[str, Any]]
    jobs: int
    pauses: list[PauseInForce]
    paused: list[str]  # every job a pause holds now
    failing: list[Failing]
    silent: list[history.SilentJob]
    registry_errors: list[dict[str, Any]]
    running: list[Run]
    database_bytes: int | None
    runs_by_state: dict[str, int]
    backfills: list[Any] = field(default_factory=list)


def overview(store: Store, now: datetime, host: Host | None = None, windows: Sequence[Window] = ()) -> Overview:
    """Everything `status` shows, in a bounded number of queries (one day of runs);
    `windows`: the registry's maintenance windows (a job inside one is held, not silent)."""
    from chronod.fleet import placement

    rows = store.jobs()
    nodes = store.nodes()
    errors = store.registry_errors()
    day = store.runs(since=now - timedelta(days=1), until=now)
    in_force = pauses_in_force(store, rows, now)
    held_ids = held_jobs(rows, in_force)
    all_pauses = [p.pause for p in in_force]
    running = store.running()
    owners = {r.job_id: r.spec for r in rows}
    summary = store.metrics()
    return Overview(
        now=now,
        health=core_health.judge(node_health(nodes, now, host), errors),
        running_on={n.name: tuple(sorted(r.job_id for r in running if r.node == n.name)) for n in nodes},
        node_info={n.name: dict(n.info or {}) for n in nodes},
        spec_disagreements=placement.report(nodes, now),
        jobs=len(rows),
        pauses=in_force,
        paused=sorted(held_ids),
        failing=[
            Failing(r, _owner(owners, r.job_id), _hold(owners.get(r.job_id), all_pauses, now))
            for r in failing_runs(day)
        ],
        silent=silent(store, rows, now, day, held_ids, windows),
        registry_errors=errors,
        running=running,
        database_bytes=summary.get("database_bytes"),
        runs_by_state=dict(sorted(summary["runs_by_state"].items())),
        backfills=backfills_shown(store, now),
    )


def _owner(specs: Mapping[str, JobSpec], job_id: str) -> str | None:
    spec = specs.get(job_id)
    return spec.owner if spec is not None else None


def _hold(spec: JobSpec | None, all_pauses: Sequence[Pause], now: datetime) -> Hold | None:
    p = paused(spec, all_pauses, now) if spec is not None else None
    return None if p is None else pause_hold(p)


def failing_runs(runs: Iterable[Run]) -> list[Run]:
    """Per job, its latest outcome (newest first in `runs`) when that failed. A skip by a
    pause or a window is not an outcome: a failing job stays failing while paused."""
    latest: dict[str, Run] = {}
    for r in runs:
        if r.state not in ("pending", "running", "retry_wait", *DESIGNED_HOLDS):
            latest.setdefault(r.job_id, r)
    return [r for r in latest.values() if r.state in FAILING]


def silent(
    store: Store,
    rows: Sequence[JobRow],
    now: datetime,
    recent: Sequence[Any],
    held_ids: Iterable[str] = (),
    windows: Sequence[Window] = (),
) -> list[history.SilentJob]:
    """The jobs silent now (no success for longer than `max_silence_s` plus `tolerance_s`),
    for `status` and `missed` alike, as the notifier judges them. A job a pause holds (its
    own, its tag's or its resource's) or a maintenance window in `windows` holds now is
    never silent: the hold is deliberate. `recent` are the runs or marks the caller read anyway:
    a job with a recent enough success in them is not silent, and only the others are
    looked up, in one query, for their latest success, however old."""
    skip = set(held_ids)
    suspects = [j for j in history.silence_suspects(rows, recent, now) if j.job_id not in skip]
    suspects = [j for j in suspects if blackout_at(j.spec, windows, now) is None]
    if not suspects:
        return []
    ids = [j.job_id for j in suspects]
    wins = store.last_successes(ids, until=now).values()
    return history.silent_jobs(suspects, history.latest_successes(wins), now, store.known_spans(ids))


def backfills_shown(store: Store, now: datetime, job_id: str | None = None) -> list[Any]:
    """The backfills still running (all, or one job's), and those cancelled in the last day."""
    return [
        bf
        for bf in store.backfills(job_id=job_id)
        if bf.state == "running"
        or (bf.state == "cancelled" and bf.finished_at is not None and now - bf.finished_at < CANCELLED_SHOWN)
    ]


# --- one job ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeNext:
    """For a job that runs on each node: its jitter and next fire on one node."""

    node: str
    jitter_offset_s: int
    next: NextFire | None


@dataclass(frozen=True)
class JobStatus:
    """`chronoctl status JOB`: the job, what holds it, when it fires, how it has gone."""

    row: JobRow
    schedule_words: str
    jitter_offset_s: int | None
    pause: Pause | None  # the pause that holds it now (its own first, else its tag's or resource's)
    registered_since: datetime | None
    next: list[NextFire]
    nodes: list[NodeNext]
    success_streak: int
    success_streak_capped: bool
    last_success_at: datetime | None
    silence: history.Silence
    silent: bool
    pruned_through: datetime | None
    runs: list[Run]
    backfills: list[Any]
    health: core_health.Health
    waiting: list[tuple[Run, Hold]] = field(default_factory=list)  # due occurrences waiting for a resource slot

    @property
    def spec(self) -> JobSpec:
        return self.row.spec

    @property
    def hold(self) -> Hold | None:
        """The pause that holds it now, as a hold (what `--json` carries as `held`)."""
        return pause_hold(self.pause) if self.pause is not None else None


def job_status(
    store: Store, row: JobRow, now: datetime, *, windows: Sequence[Window] = (), host: Host | None = None
) -> JobStatus:
    """Everything `status JOB` shows; `windows` are the registry's maintenance windows
    (when the caller could read the registry) so the next fires say which one holds them."""
    spec, sched = row.spec, schedule_of(row.spec)
    recent = store.runs(spec.id, until=now + timedelta(days=1), limit=STREAK_SCAN)
    recent = [r for r in recent if r.state != "pending" or r.fire_at <= now]
    win = next((r for r in recent if r.state == "succeeded"), None)
    win = win or next(iter(store.runs(spec.id, states=["succeeded"], limit=1)), None)
    last_at = (win.finished_at or win.scheduled_at) if win else None
    spans = store.known_spans([spec.id]).get(spec.id, [])
    all_pauses = pauses(store)
    now_held = paused(spec, all_pauses, now)
    quiet = history.silence(spec, last_at, now, known_since=history.known_since(spans) or row.updated_at)
    watched = [] if now_held is not None else [row]
    silent_now = history.silent_jobs(watched, {spec.id: last_at} if last_at else {}, now, {spec.id: spans})
    places = occurrence.placements(spec, node_names(store))
    mark = store.pruned([spec.id]).get(spec.id)

    def fires(place: occurrence.Placement, count: int) -> list[NextFire]:
        return [NextFire(o, held(spec, all_pauses, windows, o.fire_at)) for o in place.upcoming(sched, now, count)]

    streak = history.success_streak(recent)
    return JobStatus(
        row=row,
        schedule_words=sched.describe(),
        jitter_offset_s=places[0].offset_s if places else None,
        pause=now_held,
        registered_since=spans[-1][0] if spans and spans[-1][1] is None else None,
        next=fires(places[0], 3) if places else [],
        nodes=[NodeNext(p.node, p.offset_s, next(iter(fires(p, 1)), None)) for p in places if p.node],
        success_streak=streak,
        success_streak_capped=streak >= STREAK_SCAN,
        last_success_at=last_at,
        silence=quiet,
        silent=bool(silent_now),
        pruned_through=mark.through if mark else None,
        runs=recent[:LAST_RUNS],
        backfills=backfills_shown(store, now, spec.id),
        health=job_health(store, row, now, host),
        waiting=[
            (r, h) for r in recent if (h := history.hold_of(r, None, (), now)) is not None and h.kind == "resource"
        ],
    )


# --- the agenda ---------------------------------------------------------------------------


def agenda(
    store: Store | None,
    specs: Mapping[str, JobSpec],
    start: datetime,
    end: datetime,
    *,
    windows: Sequence[Window] = (),
    tag: str | None = None,
    owner: str | None = None,
) -> agenda_core.Agenda:
    """What fires in [start, end): `specs` (the registry's jobs; the store's registered jobs
    are added) with the store's pauses and node names; without a store, no pause is known."""
    jobs = dict(specs)
    all_pauses: list[Pause] = []
    nodes: list[str] = []
    if store is not None:
        for row in store.jobs():
            jobs.setdefault(row.job_id, row.spec)
        all_pauses = pauses(store)
        nodes = node_names(store)
    chosen = [s for s in jobs.values() if agenda_core.selected(s, tag, owner)]
    schedules = {s.id: schedule_of(s) for s in chosen}
    return agenda_core.agenda(chosen, schedules, start, end, pauses=all_pauses, windows=windows, nodes=nodes)
