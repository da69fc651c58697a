"""MemoryStore: the store interface (chronod.store.api) in plain Python, for the simulation.

NOT A PRODUCTION STORE. It keeps everything in this process's memory (dicts, lists and
sets), so nothing survives the process and no second process sees it: `chronod
--database` and `chronoctl --database` do not accept it, and `open_store` never returns
it. It exists so that the simulation (chronod.sim) can run months of a fleet with store
calls that cost microseconds instead of an SQLite transaction each.

It keeps the same semantics as chronod.store.sql.SqlStore, and the same contract suite
(tests/contract) runs on SQLite, PostgreSQL and this store:

- Time comes from the `now` clock it is given (the simulation's fake clock), as the
  SQLite store's does; leases compare with it too.
- Fencing tokens come from one counter that only grows. Every daemon write about a run
  is conditional on the writer's token being the current token of a live lease, as in
  SQL's WHERE clause; a refused write changes nothing and counts `stale_rejections`
  exactly where the SQL store counts it.
- Nodes behave as a fleet's (PostgreSQL's rule): distinct node names share the store,
  a live holder of the same name in another process is refused. `dialect` is "memory".
- Every answer is a copy (or an immutable value) and every argument stored is copied:
  a caller cannot change the store's state by mutating what it got or gave.
- One lock serializes every call, like SQLite's single writer.

`MemoryOutbox` is the notifier's store (chronod.store.outbox.Outbox) over it.
"""

from __future__ import annotations

import bisect
import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from chronod.core import policy
from chronod.core.history import Mark
from chronod.core.model import NOTICED_STATES, TERMINAL_STATES, JobSpec, RunState, Trigger
from chronod.fsutil import same_process
from chronod.store.api import (
    Attempt,
    Ending,
    FellDue,
    JobRow,
    Node,
    NodeConflict,
    PauseRow,
    Pruned,
    Request,
    Run,
)

if TYPE_CHECKING:
    from chronod.store.api import Store
from chronod.store.backfills import Backfill
from chronod.store.nodeinfo import NodeInfos
from chronod.store.outbox import Outgoing
from chronod.store.sqldb import fenced_node

_UTC = timezone.utc
_WAITING = frozenset((RunState.PENDING.value, RunState.RETRY_WAIT.value))
_TERMINAL = frozenset(TERMINAL_STATES)
_NOTICED = frozenset(NOTICED_STATES)
_RUNNING = RunState.RUNNING.value
_PENDING = RunState.PENDING.value
_RETRY_WAIT = RunState.RETRY_WAIT.value
_SUCCEEDED = RunState.SUCCEEDED.value
_ALIVE = frozenset((_PENDING, _RUNNING, _RETRY_WAIT))
_NEVER = datetime.min.replace(tzinfo=_UTC)
HEAD = "memory"  # the schema revision a memory store reports: it has no migrations


def _utcnow() -> datetime:
    return datetime.now(_UTC)


def _utc(value: datetime | None) -> datetime | None:
    """An aware datetime as UTC (naive ones are refused, as the SQL store's column type does)."""
    if value is None or value.tzinfo is _UTC:
        return value
    if value.tzinfo is None:
        raise ValueError(f"the store takes aware datetimes only, got naive {value.isoformat()}")
    return value.astimezone(_UTC)


def _terminal(state: str) -> None:
    if state not in _TERMINAL:
        raise ValueError(f"{state!r} is not a terminal run state (one of {', '.join(TERMINAL_STATES)})")


def _rescued(r: Run) -> bool:
    """Whether a pending run is one `late` answers: a scheduled occurrence of an `any` job."""
    return r.trigger == Trigger.SCHEDULE and r.job_key == r.job_id


def _fire_at(entry: tuple[datetime, str]) -> datetime:
    return entry[0]


def _later(r: Run, until: datetime) -> bool:
    """A pending scheduled occurrence that fires after `until` (read after READY)."""
    return r.state == _PENDING and r.trigger == Trigger.SCHEDULE and r.fire_at > until


def _cancelled_by_removal_after(r: Run, started_at: datetime | None) -> bool:
    """A row the job's removal cancelled after `started_at`, when its run had in fact
    started while the database was unreachable (`Store.claim_offline`)."""
    return (
        r.state == RunState.CANCELLED
        and r.error == policy.REMOVED_FROM_REGISTRY
        and started_at is not None
        and r.finished_at is not None
        and r.finished_at >= _utc(started_at)  # type: ignore[operator]
    )


def _copy(r: Run) -> Run:
    return Run(
        r.run_id,
        r.job_id,
        r.job_key,
        r.scheduled_at,
        r.fire_at,
        r.state,
        r.attempts,
        r.node,
        r.pid,
        r.supervisor_pid,
        r.started_at,
        r.finished_at,
        r.exit_code,
        r.signal,
        r.output_tail,
        r.output_bytes,
        r.error,
        r.token,
        r.trigger,
        r.next_attempt_at,
        r.updated_at,
    )


def _copy_attempt(a: Attempt) -> Attempt:
    return Attempt(
        a.run_id,
        a.attempt,
        a.node,
        a.token,
        a.state,
        a.pid,
        a.supervisor_pid,
        a.started_at,
        a.finished_at,
        a.exit_code,
        a.signal,
        a.error,
        a.output_tail,
        a.output_bytes,
    )


@dataclass
class _Job:
    spec: JobSpec  # frozen: handed out as is
    spec_hash: str
    node: str
    paused: bool = False
    paused_reason: str | None = None
    paused_at: datetime | None = None
    paused_by: str | None = None
    paused_until: datetime | None = None
    removed_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass
class _Node:
    name: str
    token: int
    pid: int
    hostname: str
    boot_id: str
    started_at: datetime
    heartbeat_at: datetime
    lease_expires_at: datetime
    stopped_at: datetime | None
    info_json: str
    pid_start: int | None


@dataclass
class _Notice:
    id: int
    job_id: str
    event: str
    state: str
    run_id: str | None
    dedupe_key: str
    route_json: str
    payload_json: str
    created_at: datetime
    attempts: int = 0
    sent_at: datetime | None = None
    last_error: str | None = None
    claimed_by: str | None = None
    claimed_until: datetime | None = None
    next_try_at: datetime | None = None


@dataclass
class _Backfill:
    id: int
    job_id: str
    from_at: datetime
    to_at: datetime
    only: str
    max_concurrency: int
    allow_unsafe: bool
    reason: str | None
    requested_by: str | None
    items: tuple[tuple[str, str, datetime, datetime], ...]
    started: int
    state: str
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None

    def public(self) -> Backfill:
        return Backfill(
            self.id,
            self.job_id,
            self.from_at,
            self.to_at,
            self.only,
            self.max_concurrency,
            self.allow_unsafe,
            self.reason,
            self.requested_by,
            list(self.items),
            self.started,
            self.state,
            self.error,
            self.created_at,
            self.updated_at,
            self.finished_at,
        )


@dataclass
class _Request:
    id: int
    kind: str
    job_id: str | None
    payload_json: str
    created_at: datetime
    taken_by: str | None = None


@dataclass
class _Tables:
    """Everything the store holds; the outbox's tables live here too (one database)."""

    nodes: dict[str, _Node] = field(default_factory=dict)
    jobs: dict[str, _Job] = field(default_factory=dict)
    paused: dict[str, None] = field(default_factory=dict)  # jobs whose own pause flag is set (in job id order)
    known: dict[str, list[list[datetime | None]]] = field(default_factory=dict)  # job_id -> [[from, until]]
    group_pauses: dict[tuple[str, str], PauseRow] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)
    by_job: dict[str, dict[str, None]] = field(default_factory=dict)  # job_id -> run ids (ordered set)
    # job_id -> (scheduled_at, run_id) of its runs, sorted: a job's runs over a span without
    # a walk over its whole history (a job every 20 s has thousands a day)
    by_job_at: dict[str, list[tuple[datetime, str]]] = field(default_factory=dict)
    waiting: dict[str, None] = field(default_factory=dict)  # pending / retry_wait run ids
    # (fire_at, run_id) of the pending scheduled runs of `any` jobs (job_key == job_id), sorted:
    # `late` reads the first of them, as the SQL stores read their partial index (0011)
    late: list[tuple[datetime, str]] = field(default_factory=list)
    # ... and of those of `each` jobs: with `late`, every pending scheduled run in fire order,
    # which `pending_later` pages through without a walk over every waiting run
    late_each: list[tuple[datetime, str]] = field(default_factory=list)
    running: dict[str, None] = field(default_factory=dict)
    # retry_wait run ids (of `waiting`): a node's heartbeat reads a dead node's retries
    retrying: dict[str, None] = field(default_factory=dict)
    by_state: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, dict[int, Attempt]] = field(default_factory=dict)
    pruned: dict[str, Pruned] = field(default_factory=dict)
    backfills: dict[int, _Backfill] = field(default_factory=dict)
    requests: list[_Request] = field(default_factory=list)
    job_state: dict[str, str] = field(default_factory=dict)
    registry_errors: list[dict[str, Any]] = field(default_factory=list)
    registry_files: dict[str, dict[str, tuple[str, bytes]]] = field(default_factory=dict)  # node -> path -> ...
    notify_state: dict[str, str] = field(default_factory=dict)
    notices: dict[int, _Notice] = field(default_factory=dict)
    dedupe: dict[str, int] = field(default_factory=dict)


class MemoryStore:
    """The `Store` protocol over Python dicts (see the module docstring: simulation only).

    `now` is the clock of leases and timestamps; it must return aware UTC datetimes.
    `dialect` is what the daemon is told it runs on: "memory", or the dialect of the store
    this one stands in for (the simulation of one node says "sqlite", so the daemon takes
    the code paths it takes on SQLite). The store's own rules do not change with it."""

    def __init__(self, *, now: Callable[[], datetime] | None = None, name: str = "memory", dialect: str = "memory"):
        self.url_safe = f"memory://{name}"
        self.dialect = dialect
        self._now = now or _utcnow
        self.stale_rejections = 0
        self._lock = threading.RLock()
        self._t = _Tables()
        self._token = 0
        self._holders: dict[int, str] = {}  # fencing token -> the node name it was issued to
        self._ids = {"backfill": 0, "request": 0, "error": 0, "notice": 0}
        self._jobs_version: tuple[int, datetime | None] | None = None
        self._infos = NodeInfos()  # each node's info decoded once per text

    # --- plumbing ---------------------------------------------------------------------
    def _next_id(self, kind: str) -> int:
        self._ids[kind] += 1
        return self._ids[kind]

    def _live(self, token: int | None, node: str | None = None) -> bool:
        """A node holding `token` (named `node` when given) with an unexpired lease: the
        fencing predicate, the SQL store's `_lease_live`."""
        name = self._holders.get(token) if token is not None else None
        if name is None or (node is not None and name != node):
            return False
        n = self._t.nodes[name]
        return n.token == token and n.stopped_at is None and n.lease_expires_at > self._now()

    def _rejected(self, token: int | None, refused: int = 1) -> None:
        if token is not None and refused > 0 and not self._live(token):
            self.stale_rejections += refused

    def _set_state(self, r: Run, state: str) -> None:
        """Every state change goes through here: it keeps the indexes."""
        old = r.state
        if old == state:
            return
        late = self._scheduled(r) if old == _PENDING or state == _PENDING else None
        if late is not None:
            if old == _PENDING:
                del late[bisect.bisect_left(late, (r.fire_at, r.run_id))]
            else:
                bisect.insort(late, (r.fire_at, r.run_id))
        counts = self._t.by_state
        counts[old] -= 1
        if not counts[old]:
            del counts[old]
        counts[state] = counts.get(state, 0) + 1
        if old in _WAITING and state not in _WAITING:
            del self._t.waiting[r.run_id]
        elif state in _WAITING and old not in _WAITING:
            self._t.waiting[r.run_id] = None
        if old == _RUNNING:
            del self._t.running[r.run_id]
        elif state == _RUNNING:
            self._t.running[r.run_id] = None
        if old == _RETRY_WAIT:
            del self._t.retrying[r.run_id]
        elif state == _RETRY_WAIT:
            self._t.retrying[r.run_id] = None
        r.state = state

    def _store_run(self, run: Run, now: datetime) -> bool:
        """Insert a copy of `run` unless its id exists (ON CONFLICT DO NOTHING)."""
        t = self._t
        if run.run_id in t.runs:
            return False
        r = _copy(run)
        r.scheduled_at = _utc(r.scheduled_at)  # type: ignore[assignment]
        r.fire_at = _utc(r.fire_at)  # type: ignore[assignment]
        r.started_at = _utc(r.started_at)
        r.finished_at = _utc(r.finished_at)
        r.next_attempt_at = _utc(r.next_attempt_at)
        r.updated_at = _utc(r.updated_at) or now
        if r.scheduled_at is None or r.fire_at is None:
            raise ValueError("a run needs scheduled_at and fire_at")
        t.runs[r.run_id] = r
        t.by_job.setdefault(r.job_id, {})[r.run_id] = None
        bisect.insort(t.by_job_at.setdefault(r.job_id, []), (r.scheduled_at, r.run_id))
        t.by_state[r.state] = t.by_state.get(r.state, 0) + 1
        if r.state in _WAITING:
            t.waiting[r.run_id] = None
            if r.state == _RETRY_WAIT:
                t.retrying[r.run_id] = None
            late = self._scheduled(r) if r.state == _PENDING else None
            if late is not None:
                bisect.insort(late, (r.fire_at, r.run_id))
        elif r.state == _RUNNING:
            t.running[r.run_id] = None
        return True

    def _drop_run(self, run_id: str) -> None:
        t = self._t
        r = t.runs.pop(run_id)
        job = t.by_job[r.job_id]
        del job[run_id]
        if not job:
            del t.by_job[r.job_id]
        timed = t.by_job_at[r.job_id]
        del timed[bisect.bisect_left(timed, (r.scheduled_at, run_id))]
        if not timed:
            del t.by_job_at[r.job_id]
        t.by_state[r.state] -= 1
        if not t.by_state[r.state]:
            del t.by_state[r.state]
        t.waiting.pop(run_id, None)
        late = self._scheduled(r) if r.state == _PENDING else None
        if late is not None:
            del late[bisect.bisect_left(late, (r.fire_at, run_id))]
        t.running.pop(run_id, None)
        t.retrying.pop(run_id, None)
        t.attempts.pop(run_id, None)

    def _scheduled(self, r: Run) -> list[tuple[datetime, str]] | None:
        """The index a pending run is kept in by fire time: `late` (a scheduled occurrence
        of an `any` job), `late_each` (one of an `each` job), None (not a scheduled one)."""
        if r.trigger != Trigger.SCHEDULE:
            return None
        return self._t.late if _rescued(r) else self._t.late_each

    def _sorted(self, ids: Iterable[str], key: Callable[[Run], Any]) -> list[Run]:
        runs = self._t.runs
        return [_copy(r) for r in sorted((runs[i] for i in ids), key=key)]

    # --- schema -----------------------------------------------------------------------
    def schema_revision(self) -> str | None:
        return HEAD

    def check_schema(self) -> None:
        return None

    def upgrade(self) -> None:
        return None

    def close(self) -> None:
        return None

    # --- nodes and leases -------------------------------------------------------------
    def acquire_node(
        self, name: str, *, pid: int, hostname: str, boot_id: str, ttl_s: float, pid_start: int | None = None
    ) -> int:
        with self._lock:
            now = self._now()
            held = self._t.nodes.get(name)
            if held is not None and held.lease_expires_at > now and held.stopped_at is None:
                same = held.hostname == hostname and held.pid == pid
                gone = held.hostname == hostname and (
                    held.boot_id != boot_id or not same_process(held.pid, held.pid_start)
                )
                if not same and not gone:
                    raise NodeConflict(
                        f"another chronod (pid {held.pid} on host {held.hostname}) holds node name {name!r} "
                        f"since {held.started_at.isoformat()}, lease until {held.lease_expires_at.isoformat()}: "
                        "stop it, or give this one another --node name"
                    )
            self._token += 1
            self._holders[self._token] = name
            info = held.info_json if held is not None else "{}"
            self._t.nodes[name] = _Node(
                name,
                self._token,
                pid,
                hostname,
                boot_id,
                now,
                now,
                now + timedelta(seconds=ttl_s),
                None,
                info,
                pid_start,
            )
            return self._token

    def renew_lease(self, name: str, token: int, ttl_s: float) -> bool:
        with self._lock:
            n = self._t.nodes.get(name)
            now = self._now()
            if n is None or n.token != token or n.lease_expires_at <= now or n.stopped_at is not None:
                return False
            n.heartbeat_at, n.lease_expires_at = now, now + timedelta(seconds=ttl_s)
            return True

    def release_node(self, name: str, token: int) -> None:
        with self._lock:
            n = self._t.nodes.get(name)
            if n is not None and n.token == token:
                n.stopped_at = n.lease_expires_at = self._now()

    def set_node_info(self, name: str, token: int, info: dict[str, Any] | str) -> None:
        with self._lock:
            n = self._t.nodes.get(name)
            if n is not None and n.token == token:
                n.info_json = info if isinstance(info, str) else json.dumps(info, sort_keys=True, default=str)

    def _public_node(self, n: _Node) -> Node:
        return Node(
            n.name,
            n.token,
            n.pid,
            n.hostname,
            n.boot_id,
            n.started_at,
            n.heartbeat_at,
            n.lease_expires_at,
            n.stopped_at,
            self._infos.decode(n.name, n.info_json),
            n.pid_start,
        )

    def nodes(self) -> list[Node]:
        with self._lock:
            found = sorted(self._t.nodes.values(), key=lambda n: n.heartbeat_at, reverse=True)
            return [self._public_node(n) for n in found]

    def live_nodes(self) -> list[tuple[str, int]]:
        with self._lock:
            now = self._now()
            return sorted(
                (n.name, n.token) for n in self._t.nodes.values() if n.lease_expires_at > now and n.stopped_at is None
            )

    def expired_nodes(self) -> list[Node]:
        with self._lock:
            now = self._now()
            found = [n for n in self._t.nodes.values() if n.lease_expires_at <= now and n.stopped_at is None]
            return [self._public_node(n) for n in sorted(found, key=lambda n: n.name)]

    def _expire(self, name: str, at: datetime) -> None:
        """Tests: end `name`'s lease at `at` (what a clock past the lease would do)."""
        with self._lock:
            self._t.nodes[name].lease_expires_at = at

    # --- job definitions ----------------------------------------------------------------
    def sync_jobs(self, node: str, specs: Iterable[JobSpec], fell_due: FellDue | None = None) -> None:
        with self._lock:
            t = self._t
            wanted = {spec.id: spec for spec in specs}
            gone = [j for j, r in t.jobs.items() if r.node == node and r.removed_at is None and j not in wanted]
            changed = [
                (job_id, spec)
                for job_id, spec in wanted.items()
                if (old := t.jobs.get(job_id)) is None
                or old.removed_at is not None
                or old.node != node
                or old.spec_hash != spec.spec_hash()
            ]
            if not changed and not gone:
                return
            now = self._now()
            # asked before anything is written, as the SQL store's one transaction: a
            # `fell_due` that fails leaves the definitions as they were
            due = [run for job_id in gone for run in self._fell_due(job_id, now, fell_due)] if fell_due else []
            self._jobs_version = None
            for job_id, spec in changed:
                old = t.jobs.get(job_id)
                if old is None or old.removed_at is not None:
                    spans = t.known.setdefault(job_id, [])
                    same = next((s for s in spans if s[0] == now), None)
                    if same is not None:  # ON CONFLICT (job_id, known_from): open it again
                        same[1] = None
                    else:
                        spans.append([now, None])
                        spans.sort(key=lambda s: s[0] or _NEVER)
                if old is None:
                    t.jobs[job_id] = _Job(spec, spec.spec_hash(), node, updated_at=now)
                else:
                    old.spec, old.spec_hash, old.node, old.updated_at, old.removed_at = (
                        spec,
                        spec.spec_hash(),
                        node,
                        now,
                        None,
                    )
            for job_id in gone:
                row = t.jobs[job_id]
                row.removed_at = row.updated_at = now
                for span in t.known.get(job_id, []):
                    if span[1] is None:
                        span[1] = now
                self._end_waiting_of_removed(t.by_job.get(job_id, {}), now)
            for run in sorted(due, key=lambda r: r.run_id):
                self._store_run(run, now)

    def _fell_due(self, job_id: str, now: datetime, fell_due: FellDue) -> list[Run]:
        """What `fell_due` gives for a removed job whose latest pending scheduled occurrence
        had fallen due by `now` (`DefinitionsSql._fell_due`)."""
        t = self._t
        due = [
            r.scheduled_at
            for r in map(t.runs.__getitem__, t.by_job.get(job_id, {}))
            if r.state == _PENDING and r.trigger == Trigger.SCHEDULE and r.fire_at <= now
        ]
        return fell_due(t.jobs[job_id].spec, max(due), now) if due else []

    def jobs_version(self) -> tuple[int, datetime | None]:
        with self._lock:
            if self._jobs_version is None:
                stamps = [j.updated_at for j in self._t.jobs.values() if j.updated_at is not None]
                self._jobs_version = (len(self._t.jobs), max(stamps) if stamps else None)
            return self._jobs_version

    def known_spans(self, job_ids: Iterable[str] | None = None) -> dict[str, list[tuple[datetime, datetime | None]]]:
        with self._lock:
            known = self._t.known
            ids = sorted(known) if job_ids is None else sorted(set(job_ids) & known.keys())
            return {j: [(s[0], s[1]) for s in known[j]] for j in ids if known[j]}  # type: ignore[misc]

    def _job_row(self, job_id: str, r: _Job, known: Mapping[str, JobSpec] | None = None) -> JobRow:
        spec = known.get(job_id) if known else None
        if spec is None or spec.spec_hash() != r.spec_hash:
            spec = r.spec
        until = r.paused_until
        return JobRow(
            job_id=job_id,
            spec=spec,
            spec_hash=r.spec_hash,
            node=r.node,
            paused=r.paused and self._pause_live(until),  # one clock with the pause queries
            paused_reason=r.paused_reason,
            paused_at=r.paused_at,
            paused_by=r.paused_by,
            paused_until=until,
            removed_at=r.removed_at,
            updated_at=r.updated_at,
        )

    def jobs(self, include_removed: bool = False, known: Mapping[str, JobSpec] | None = None) -> list[JobRow]:
        with self._lock:
            return [
                self._job_row(j, r, known)
                for j, r in sorted(self._t.jobs.items())
                if include_removed or r.removed_at is None
            ]

    def registry_files(self, node: str) -> dict[str, tuple[str, bytes]]:
        with self._lock:
            return dict(self._t.registry_files.get(node, {}))

    def set_registry_files(self, node: str, files: Mapping[str, tuple[str, bytes] | None]) -> None:
        with self._lock:
            mine = self._t.registry_files.setdefault(node, {})
            for path, value in files.items():
                if value is None:
                    mine.pop(path, None)
                else:
                    mine[path] = (str(value[0]), bytes(value[1]))

    def get_job(self, job_id: str) -> JobRow | None:
        with self._lock:
            r = self._t.jobs.get(job_id)
            return self._job_row(job_id, r) if r is not None else None

    def set_paused(
        self,
        job_id: str,
        paused: bool,
        reason: str | None,
        *,
        by: str | None = None,
        until: datetime | None = None,
    ) -> bool:
        with self._lock:
            r = self._t.jobs.get(job_id)
            if r is None:
                return False
            now = self._now()
            r.paused = paused
            r.paused_reason = reason if paused else None
            r.paused_at = now if paused else None
            r.paused_by = by if paused else None
            r.paused_until = _utc(until) if paused else None
            r.updated_at = now
            if paused:
                self._t.paused = dict.fromkeys(sorted({**self._t.paused, job_id: None}))
            else:
                self._t.paused.pop(job_id, None)
            self._jobs_version = None
            return True

    def _pause_live(self, until: datetime | None) -> bool:
        return until is None or until > self._now()

    def paused_jobs(self) -> dict[str, str | None]:
        with self._lock:
            jobs = self._t.jobs
            return {
                j: jobs[j].paused_reason
                for j in self._t.paused
                if jobs[j].removed_at is None and self._pause_live(jobs[j].paused_until)
            }

    def set_group_pause(
        self, kind: str, target: str, reason: str, *, by: str | None = None, until: datetime | None = None
    ) -> None:
        with self._lock:
            self._t.group_pauses.pop((kind, target), None)
            self._t.group_pauses[kind, target] = PauseRow(kind, target, reason, by, self._now(), _utc(until))

    def clear_group_pause(self, kind: str, target: str) -> bool:
        with self._lock:
            return self._t.group_pauses.pop((kind, target), None) is not None

    def pauses(self, include_removed: bool = False) -> list[PauseRow]:
        with self._lock:
            jobs = self._t.jobs
            own = [
                PauseRow("job", j, r.paused_reason or "", r.paused_by, r.paused_at, r.paused_until)
                for j, r in ((j, jobs[j]) for j in self._t.paused)
                if self._pause_live(r.paused_until) and (include_removed or r.removed_at is None)
            ]
            return own + [p for p in self._t.group_pauses.values() if self._pause_live(p.until)]

    # --- occurrences and runs -------------------------------------------------------------
    def insert_runs(self, runs: Iterable[Run]) -> int:
        with self._lock:
            now = self._now()
            return sum(self._store_run(r, now) for r in sorted(runs, key=lambda r: r.run_id))

    def revive(self, run_ids: Iterable[str]) -> int:
        with self._lock:
            now, done = self._now(), 0
            for rid in set(run_ids):
                r = self._t.runs.get(rid)
                if r is not None and r.state == RunState.CANCELLED and r.attempts == 0:
                    self._set_state(r, _PENDING)
                    r.error = r.finished_at = None
                    r.updated_at = now
                    done += 1
            return done

    def pending(self, job_keys: Iterable[str] | None = None) -> list[Run]:
        with self._lock:
            ids: Iterable[str] = self._t.waiting
            if job_keys is not None:
                keys, runs = set(job_keys), self._t.runs
                ids = [i for i in ids if runs[i].job_key in keys]
            return self._sorted(ids, lambda r: (r.fire_at, r.run_id))

    def pending_soon(self, until: datetime) -> tuple[list[Run], set[str]]:
        with self._lock:
            runs, soon, later = self._t.runs, [], set()
            for i in self._t.waiting:
                r = runs[i]
                if _later(r, until):
                    later.add(r.job_key)
                else:
                    soon.append(i)
            return self._sorted(soon, lambda r: (r.fire_at, r.run_id)), later

    def pending_later(self, until: datetime, after: tuple[datetime, str] | None, limit: int) -> list[Run]:
        with self._lock:
            # the first `limit` after `until` (and `after`) of each fire-time index, merged
            page: list[tuple[datetime, str]] = []
            for index in (self._t.late, self._t.late_each):
                k = bisect.bisect_right(index, until, key=_fire_at)
                if after is not None:
                    k = max(k, bisect.bisect_right(index, after))
                page += index[k : k + limit]
            return [_copy(self._t.runs[i]) for _, i in sorted(page)[:limit]]

    def late(self, before: datetime, limit: int) -> tuple[list[Run], datetime | None]:
        with self._lock:
            runs, index = self._t.runs, self._t.late
            late: list[Run] = []
            end = bisect.bisect_right(index, before, key=_fire_at)
            for k in range(end):
                if len(late) >= limit:
                    break
                r = runs[index[k][1]]
                if r.next_attempt_at is None or r.next_attempt_at <= before:
                    late.append(_copy(r))
            return late, index[end][0] if end < len(index) else None

    def _claim(
        self,
        run_ids: list[str],
        node: str,
        token: int,
        *,
        started_at: datetime | None = None,
        attempts: int | None = None,
    ) -> list[Run]:
        """Waiting runs -> running under `token`, each with a new attempt row (fenced)."""
        runs, out = self._t.runs, []
        if self._live(token, node):
            now = self._now()
            start = _utc(started_at) or now
            for rid in dict.fromkeys(run_ids):
                r = runs.get(rid)
                if r is None or r.state not in _WAITING:
                    continue
                self._set_state(r, _RUNNING)
                r.attempts = attempts if attempts is not None else r.attempts + 1
                r.node, r.token, r.started_at, r.updated_at = node, token, start, now
                r.finished_at = r.pid = r.supervisor_pid = r.exit_code = r.signal = None
                r.output_tail = r.error = r.next_attempt_at = None
                r.output_bytes = 0
                self._t.attempts.setdefault(rid, {})[r.attempts] = Attempt(
                    rid, r.attempts, node, token, _RUNNING, started_at=start
                )
                out.append(_copy(r))
        if not out:
            self._rejected(token)
        return out

    def dispatch(self, run_id: str, node: str, token: int, next_run: Run | None) -> Run | None:
        with self._lock:
            claimed = self._claim([run_id], node, token)
            if claimed and next_run is not None:
                self._store_run(next_run, self._now())
            return claimed[0] if claimed else None

    def dispatch_in_group(
        self, run_id: str, node: str, token: int, next_run: Run | None, *, resource: str, limit: int
    ) -> tuple[Run | None, bool]:
        claimed, full = self.dispatch_group([run_id], node, token, [next_run], resource=resource, limit=limit)
        return (claimed[0] if claimed else None), full

    def _running_in_group(self, resource: str) -> int:
        runs, jobs = self._t.runs, self._t.jobs
        n = 0
        for rid in self._t.running:
            job = jobs.get(runs[rid].job_id)
            if job is not None and job.spec.resource == resource:
                n += 1
        return n

    def dispatch_group(
        self, run_ids: list[str], node: str, token: int, next_runs: list[Run | None], *, resource: str, limit: int
    ) -> tuple[list[Run], bool]:
        with self._lock:
            free = max(limit - self._running_in_group(resource), 0)
            claimed = self._claim(run_ids[:free], node, token) if free else []
            now = self._now()
            for r in sorted((r for r in next_runs if r is not None), key=lambda r: r.run_id):
                self._store_run(r, now)
            return claimed, free < len(run_ids)

    def claim_offline(self, run: Run, node: str, token: int) -> Run | None:
        with self._lock:
            r = self._t.runs.get(run.run_id)
            if r is not None and _cancelled_by_removal_after(r, run.started_at) and self._live(token, node):
                self._set_state(r, _PENDING)  # (`OccurrencesSql.claim_offline`)
                r.error = r.finished_at = None
            waiting = _copy(run)
            waiting.state, waiting.attempts = _PENDING, run.attempts - 1
            waiting.node = waiting.token = waiting.started_at = waiting.pid = waiting.supervisor_pid = None
            self._store_run(waiting, self._now())
            claimed = self._claim([run.run_id], node, token, started_at=run.started_at, attempts=run.attempts)
            return claimed[0] if claimed else None

    def waiting_retries(self, node: str) -> list[Run]:
        with self._lock:
            runs = self._t.runs
            ids = [i for i in self._t.retrying if runs[i].node == node]
            return self._sorted(ids, lambda r: (r.next_attempt_at or _NEVER, r.run_id))  # NULLS FIRST, as SQL

    def _settle_one(
        self, run_id: str, state: str, error: str | None, node: str | None, token: int | None, now: datetime
    ) -> bool:
        r = self._t.runs.get(run_id)
        if r is None or r.state not in _WAITING:
            return False
        self._set_state(r, state)
        r.error, r.finished_at, r.updated_at, r.next_attempt_at = error, now, now, None
        if token is not None:
            r.token, r.node = token, node
        return True

    def settle(
        self,
        run_id: str,
        state: str,
        *,
        error: str | None,
        next_run: Run | None,
        node: str | None = None,
        token: int | None = None,
    ) -> bool:
        _terminal(state)
        fenced_node(node, token)
        with self._lock:
            now = self._now()
            if (token is not None and not self._live(token, node)) or not self._settle_one(
                run_id, state, error, node, token, now
            ):
                self._rejected(token)
                return False
            if next_run is not None:
                self._store_run(next_run, now)
            return True

    def commit_wakeup(
        self, inserts: list[Run], settles: list[tuple[str, str, str | None]], claims: list[str], node: str, token: int
    ) -> list[Run]:
        for _, state, _ in settles:
            _terminal(state)
        with self._lock:
            now = self._now()
            for r in sorted(inserts, key=lambda r: r.run_id):
                self._store_run(r, now)
            if settles:
                done = 0
                if self._live(token, node):
                    for run_id, state, error in settles:
                        done += self._settle_one(run_id, state, error, node, token, now)
                if done < len(settles):
                    self._rejected(token, len(settles) - done)
            return self._claim(claims, node, token) if claims else []

    def _held_many(self, keys: list[tuple[str, int]], token: int | None) -> dict[str, int]:
        if token is not None and not self._live(token):
            return {}
        runs, held = self._t.runs, {}
        for run_id, attempt in dict(keys).items():
            r = runs.get(run_id)
            if r is not None and r.state == _RUNNING and (token is None or r.token == token) and r.attempts == attempt:
                held[run_id] = attempt
        return held

    def set_processes(self, started: list[tuple[str, int, int, int]], token: int) -> set[str]:
        if not started:
            return set()
        with self._lock:
            held = self._held_many([(rid, attempt) for rid, attempt, _, _ in started], token)
            done: set[str] = set()
            now = self._now()
            for rid, attempt, pid, sup in started:
                if held.get(rid) != attempt:
                    continue
                r = self._t.runs[rid]
                r.pid, r.supervisor_pid, r.updated_at = pid, sup, now
                a = self._t.attempts.get(rid, {}).get(attempt)
                if a is not None:
                    a.pid, a.supervisor_pid = pid, sup
                done.add(rid)
            refused = sum(1 for rid, attempt, _, _ in started if held.get(rid) != attempt)
            self._rejected(token, refused)
            return done

    def finish(
        self,
        run_id: str,
        attempt: int,
        state: str,
        *,
        exit_code: int | None,
        signal: int | None,
        output_tail: str | None,
        output_bytes: int,
        error: str | None,
        token: int | None,
        finished_at: datetime | None = None,
    ) -> bool:
        ending = Ending(run_id, attempt, state, exit_code, signal, output_tail, output_bytes, error, finished_at)
        return run_id in self.finish_many([ending], token)

    def finish_many(self, endings: list[Ending], token: int | None) -> set[str]:
        for e in endings:
            _terminal(e.state)
        if not endings:
            return set()
        with self._lock:
            held = self._held_many([(e.run_id, e.attempt) for e in endings], token)
            now = self._now()
            done: set[str] = set()
            for e in {e.run_id: e for e in endings}.values():
                if held.get(e.run_id) != e.attempt:
                    continue
                end = _utc(e.finished_at) or now
                r = self._t.runs[e.run_id]
                self._set_state(r, e.state)
                r.exit_code, r.signal, r.output_tail, r.output_bytes, r.error = (
                    e.exit_code,
                    e.signal,
                    e.output_tail,
                    e.output_bytes,
                    e.error,
                )
                r.finished_at, r.next_attempt_at, r.updated_at = end, None, now
                a = self._t.attempts.get(e.run_id, {}).get(e.attempt)
                if a is not None:
                    a.state, a.exit_code, a.signal, a.output_tail, a.output_bytes, a.error = (
                        e.state,
                        e.exit_code,
                        e.signal,
                        e.output_tail,
                        e.output_bytes,
                        e.error,
                    )
                    a.finished_at = end
                done.add(e.run_id)
            self._rejected(token, len(endings) - len(done))
            return done

    def _held(self, run_id: str, attempt: int, token: int | None) -> Run | None:
        r = self._t.runs.get(run_id)
        if r is None or r.state != _RUNNING or r.attempts != attempt:
            return None
        if token is not None and (r.token != token or not self._live(token)):
            return None
        return r

    def schedule_retry(
        self,
        run_id: str,
        attempt: int,
        next_attempt_at: datetime,
        *,
        exit_code: int | None,
        signal: int | None,
        error: str | None,
        token: int,
        attempt_state: str = RunState.FAILED,
        output_tail: str | None = None,
        output_bytes: int = 0,
    ) -> bool:
        with self._lock:
            r = self._held(run_id, attempt, token)
            if r is None:
                self._rejected(token)
                return False
            now = self._now()
            self._set_state(r, _RETRY_WAIT)
            r.next_attempt_at = _utc(next_attempt_at)
            r.exit_code, r.signal, r.error, r.updated_at = exit_code, signal, error, now
            r.output_tail, r.output_bytes = output_tail, output_bytes
            a = self._t.attempts.get(run_id, {}).get(attempt)
            if a is not None:
                a.state, a.finished_at, a.exit_code, a.signal, a.error = attempt_state, now, exit_code, signal, error
                a.output_tail, a.output_bytes = output_tail, output_bytes
            return True

    def adopt(self, run_id: str, attempt: int, *, node: str, token: int) -> bool:
        with self._lock:
            r = self._held(run_id, attempt, None)
            if (
                r is None
                or not (r.token == token or r.token is None or not self._live(r.token))
                or not self._live(token, node)
            ):
                self._rejected(token)
                return False
            r.node, r.token, r.updated_at = node, token, self._now()
            a = self._t.attempts.get(run_id, {}).get(attempt)
            if a is not None:
                a.node, a.token = node, token
            return True

    def reclaim(
        self,
        run_id: str,
        attempt: int,
        *,
        node: str,
        token: int,
        state: str,
        error: str,
        next_attempt_at: datetime | None = None,
    ) -> bool:
        if state != RunState.RETRY_WAIT:
            _terminal(state)
        with self._lock:
            r = self._held(run_id, attempt, None)
            if r is None or not (r.token is None or not self._live(r.token)) or not self._live(token, node):
                self._rejected(token)
                return False
            now = self._now()
            self._set_state(r, state)
            r.error, r.node, r.token, r.updated_at = error, node, token, now
            if state == RunState.RETRY_WAIT:
                r.next_attempt_at = _utc(next_attempt_at) or now
            else:
                r.finished_at, r.next_attempt_at = now, None
            a = self._t.attempts.get(run_id, {}).get(attempt)
            if a is not None:
                a.state, a.finished_at, a.error = RunState.LOST.value, now, error
            return True

    def running(self, node: str | None = None) -> list[Run]:
        with self._lock:
            runs = self._t.runs
            ids = [i for i in self._t.running if node is None or runs[i].node == node]
            return self._sorted(ids, lambda r: (r.started_at or _NEVER, r.run_id))

    def run_states(self, run_ids: Iterable[str]) -> dict[str, str]:
        with self._lock:
            runs = self._t.runs
            return {i: runs[i].state for i in run_ids if i in runs}

    def get_run(self, run_id: str) -> Run | None:
        with self._lock:
            r = self._t.runs.get(run_id)
            return _copy(r) if r is not None else None

    def runs_by_prefix(self, prefix: str, limit: int = 10) -> list[Run]:
        with self._lock:
            return [_copy(self._t.runs[i]) for i in sorted(i for i in self._t.runs if i.startswith(prefix))[:limit]]

    def runs(
        self,
        job_id: str | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        states: Iterable[str] | None = None,
        limit: int | None = None,
        newest_first: bool = True,
    ) -> list[Run]:
        with self._lock:
            runs = self._t.runs
            ids: Iterable[str] = runs if job_id is None else self._t.by_job.get(job_id, {})
            wanted = None if states is None else set(states)
            if job_id is None and wanted is not None and wanted <= _ALIVE:
                # the runs not yet ended are indexed: no scan of the whole history
                ids = [*self._t.waiting, *self._t.running]
            lo, hi = _utc(since), _utc(until)
            if job_id is not None and (lo is not None or hi is not None):
                timed = self._t.by_job_at.get(job_id, [])  # by scheduled_at: the span's alone
                first = 0 if lo is None else bisect.bisect_left(timed, (lo, ""))
                last = len(timed) if hi is None else bisect.bisect_left(timed, (hi, ""))
                ids = [i for _, i in timed[first:last]]
            found = [
                r
                for r in (runs[i] for i in ids)
                if (lo is None or r.scheduled_at >= lo)
                and (hi is None or r.scheduled_at < hi)
                and (wanted is None or r.state in wanted)
            ]
            found.sort(key=lambda r: (r.scheduled_at, r.run_id), reverse=newest_first)
            return [_copy(r) for r in (found if limit is None else found[:limit])]

    def note_held(self, run_ids: Iterable[str], why: str, until: datetime, *, node: str, token: int) -> int:
        with self._lock:
            ids = set(run_ids)
            if not self._live(token, node):
                self._rejected(token, len(ids))
                return 0
            done = 0
            for rid in ids:
                r = self._t.runs.get(rid)
                if r is not None and r.state == _PENDING:
                    r.error, r.next_attempt_at = why, _utc(until)
                    done += 1
            return done

    def run_marks(self, *, since: datetime, until: datetime) -> list[Mark]:
        with self._lock:
            lo, hi = _utc(since), _utc(until)
            assert lo is not None and hi is not None
            return [
                Mark(r.run_id, r.job_id, r.job_key, r.scheduled_at, r.state, r.trigger)
                for r in self._t.runs.values()
                if lo <= r.scheduled_at < hi
            ]

    def attempts(self, run_id: str) -> list[Attempt]:
        with self._lock:
            rows = self._t.attempts.get(run_id, {})
            return [_copy_attempt(rows[n]) for n in sorted(rows)]

    def note_late_outcome(self, run_id: str, attempt: int, text: str) -> bool:
        with self._lock:
            a = self._t.attempts.get(run_id, {}).get(attempt)
            if a is None or a.state != RunState.LOST or text in (a.error or ""):
                return False
            a.error = f"{a.error}; {text}" if a.error else text
            r = self._t.runs.get(run_id)
            if r is not None and r.attempts == attempt and r.state == RunState.LOST:
                r.error, r.updated_at = a.error, self._now()
            return True

    def _end_waiting_of_removed(self, run_ids: Iterable[str], now: datetime) -> None:
        """As `DefinitionsSql._end_waiting_of_removed`: pending runs cancelled, a run waiting
        for its retry settled with its last attempt's outcome."""
        runs, why = self._t.runs, policy.REMOVED_FROM_REGISTRY
        for rid in list(run_ids):
            r = runs[rid]
            if r.state == RunState.RETRY_WAIT:
                last = self._t.attempts.get(rid, {}).get(r.attempts)
                state, error = policy.retry_given_up(last.state if last else None, r.error, r.attempts + 1, None, why)
            elif r.state == RunState.PENDING:
                state, error = RunState.CANCELLED, why
            else:
                continue
            self._set_state(r, state.value)
            r.error, r.finished_at, r.updated_at, r.next_attempt_at = error, now, now, None

    def delete_run(self, run_id: str) -> bool:
        with self._lock:
            if run_id not in self._t.runs:
                return False
            self._drop_run(run_id)
            return True

    def metrics(self) -> dict[str, Any]:
        with self._lock:
            jobs = [r for r in self._t.jobs.values() if r.removed_at is None]
            return {
                "runs_by_state": dict(self._t.by_state),
                "jobs": len(jobs),
                "paused_jobs": sum(1 for r in jobs if r.paused and self._pause_live(r.paused_until)),
                "stale_rejections": self.stale_rejections,
                "database_bytes": None,
            }

    # --- retention ------------------------------------------------------------------------
    def _prunable(self, job_id: str, before: datetime) -> list[Run]:
        """The runs `prune_runs` may delete, oldest first: terminal, scheduled before
        `before`, and not the job's latest success."""
        runs = [self._t.runs[i] for i in self._t.by_job.get(job_id, {})]
        wins = [r for r in runs if r.state == _SUCCEEDED]
        keep = max(wins, key=lambda r: (r.scheduled_at, r.run_id)).run_id if wins else None
        cut = _utc(before)
        assert cut is not None
        found = [r for r in runs if r.scheduled_at < cut and r.state in _TERMINAL and r.run_id != keep]
        return sorted(found, key=lambda r: (r.scheduled_at, r.run_id))

    def prune_runs(self, job_id: str, before: datetime, *, kept_s: int, limit: int) -> int:
        with self._lock:
            rows = self._prunable(job_id, before)[:limit]
            if not rows:
                return 0
            through = max(r.scheduled_at for r in rows)
            for r in rows:
                self._drop_run(r.run_id)
            old = self._t.pruned.get(job_id)
            self._t.pruned[job_id] = Pruned(job_id, max(through, old.through) if old else through, kept_s, self._now())
            return len(rows)

    def prunable(self, cutoffs: dict[str, datetime]) -> dict[str, int]:
        with self._lock:
            counts = {job_id: len(self._prunable(job_id, before)) for job_id, before in cutoffs.items()}
            return {j: n for j, n in counts.items() if n}

    def job_ids_with_runs_before(self, before: datetime) -> list[str]:
        with self._lock:
            cut = _utc(before)
            assert cut is not None
            runs = self._t.runs
            return sorted(j for j, ids in self._t.by_job.items() if any(runs[i].scheduled_at < cut for i in ids))

    def pruned(self, job_ids: Iterable[str] | None = None) -> dict[str, Pruned]:
        with self._lock:
            marks = self._t.pruned
            if job_ids is None:
                return dict(marks)
            return {j: marks[j] for j in job_ids if j in marks}

    def _latest(self, job_id: str, until: datetime, keep: Callable[[Run], bool]) -> Run | None:
        runs = self._t.runs
        best: Run | None = None
        for i in self._t.by_job.get(job_id, {}):
            r = runs[i]
            if (
                r.scheduled_at < until
                and keep(r)
                and (best is None or (r.scheduled_at, r.run_id) > (best.scheduled_at, best.run_id))
            ):
                best = r
        return best

    def last_successes(self, job_ids: Iterable[str], until: datetime) -> dict[str, Run]:
        with self._lock:
            cut = _utc(until)
            assert cut is not None
            out = {}
            for j in sorted(set(job_ids)):
                r = self._latest(j, cut, lambda r: r.state == _SUCCEEDED)
                if r is not None:
                    out[j] = _copy(r)
            return out

    def last_runs(self, job_ids: Iterable[str], until: datetime, skip: Iterable[str] = ()) -> dict[str, Run]:
        with self._lock:
            cut, skipped = _utc(until), set(skip)
            assert cut is not None
            out = {}
            for j in sorted(set(job_ids)):
                r = self._latest(j, cut, lambda r: r.state not in skipped)
                if r is not None:
                    out[j] = _copy(r)
            return out

    def last_states(self, job_ids: Iterable[str], until: datetime, skip: Iterable[str] = ()) -> dict[str, str]:
        return {j: r.state for j, r in self.last_runs(job_ids, until, skip).items()}

    def database_bytes(self) -> int | None:
        return None  # no database on disk

    # --- backfills --------------------------------------------------------------------------
    def add_backfill(
        self,
        job_id: str,
        *,
        from_at: datetime,
        to_at: datetime,
        only: str,
        max_concurrency: int,
        allow_unsafe: bool,
        reason: str | None,
        requested_by: str | None,
        items: list[tuple[str, str, datetime, datetime]],
    ) -> int:
        with self._lock:
            now = self._now()
            bf = _Backfill(
                self._next_id("backfill"),
                job_id,
                from_at,
                to_at,
                only,
                max_concurrency,
                allow_unsafe,
                reason,
                requested_by,
                tuple((rid, key, at, fire) for rid, key, at, fire in items),
                0,
                "running" if items else "done",
                None,
                now,
                now,
                None if items else now,
            )
            self._t.backfills[bf.id] = bf
            return bf.id

    def backfills(self, *, active_only: bool = False, job_id: str | None = None, limit: int = 50) -> list[Backfill]:
        with self._lock:
            found = [
                bf
                for _, bf in sorted(self._t.backfills.items(), reverse=True)
                if (not active_only or bf.state == "running") and (job_id is None or bf.job_id == job_id)
            ]
            return [bf.public() for bf in found[:limit]]

    def get_backfill(self, backfill_id: int) -> Backfill | None:
        with self._lock:
            bf = self._t.backfills.get(backfill_id)
            return bf.public() if bf is not None else None

    def open_backfill_run(self, backfill_id: int, index: int, run: Run) -> Run | None:
        with self._lock:
            bf = self._t.backfills.get(backfill_id)
            if bf is None or bf.started != index or bf.state != "running":
                return None
            now = self._now()
            bf.started, bf.updated_at = index + 1, now
            opening = _copy(run)  # the caller's run is left as it was
            opening.trigger, opening.state = "backfill", _PENDING
            if not self._store_run(opening, now):
                r = self._t.runs[run.run_id]
                if r.state not in _TERMINAL:
                    return None
                r.trigger, r.fire_at = "backfill", _utc(run.fire_at)  # type: ignore[assignment]
                self._set_state(r, _PENDING)  # (after the trigger: `late`'s index reads it)
                r.error = r.exit_code = r.signal = r.finished_at = r.next_attempt_at = None
                r.updated_at = now
            return _copy(self._t.runs[run.run_id])

    def end_backfill(self, backfill_id: int, state: str, error: str | None = None) -> bool:
        with self._lock:
            bf = self._t.backfills.get(backfill_id)
            if bf is None or bf.state != "running":
                return False
            now = self._now()
            bf.state, bf.error, bf.finished_at, bf.updated_at = state, error, now, now
            return True

    def cancel_backfill(self, backfill_id: int, why: str) -> tuple[bool, list[str]]:
        with self._lock:
            bf = self._t.backfills.get(backfill_id)
            if bf is None or bf.state != "running":
                return False, []
            now = self._now()
            bf.state, bf.error, bf.finished_at, bf.updated_at = "cancelled", why, now, now
            ids = []
            for rid, *_ in bf.items[: bf.started]:
                r = self._t.runs.get(rid)
                if r is not None and r.state == _PENDING and r.trigger == "backfill":
                    self._set_state(r, RunState.CANCELLED.value)
                    r.error, r.finished_at, r.updated_at, r.next_attempt_at = why, now, now, None
                    ids.append(rid)
            return True, ids

    # --- requests -----------------------------------------------------------------------
    def add_request(self, kind: str, job_id: str | None, payload: dict[str, Any]) -> int:
        with self._lock:
            req = _Request(self._next_id("request"), kind, job_id, json.dumps(payload, sort_keys=True), self._now())
            self._t.requests.append(req)
            return req.id

    def take_requests(self, node: str) -> list[Request]:
        with self._lock:
            taken = [req for req in self._t.requests if req.taken_by is None]
            for req in taken:
                req.taken_by = node
            return [Request(r.id, r.kind, r.job_id, json.loads(r.payload_json), r.created_at) for r in taken]

    # --- per job-key state ----------------------------------------------------------------
    def get_job_state(self, job_key: str) -> dict[str, Any]:
        with self._lock:
            text = self._t.job_state.get(job_key)
        return json.loads(text) if text else {}

    def set_job_state(self, job_key: str, state: dict[str, Any]) -> None:
        text = json.dumps(state, sort_keys=True, default=str)
        with self._lock:
            self._t.job_state[job_key] = text

    # --- registry errors ----------------------------------------------------------------
    def set_registry_errors(self, node: str, errors: list[dict[str, Any]]) -> None:
        with self._lock:
            now = self._now()
            kept = [e for e in self._t.registry_errors if e["node"] != node]
            for err in errors:
                kept.append(
                    dict(
                        id=self._next_id("error"),
                        node=node,
                        file=str(err.get("file", "")),
                        line=err.get("line"),
                        message=str(err.get("message", "")),
                        at=now,
                    )
                )
            self._t.registry_errors = kept

    def registry_errors(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = sorted(
                self._t.registry_errors,
                key=lambda e: (e["node"], e["file"], e["line"] is not None, e["line"] or 0, e["id"]),  # NULLS FIRST
            )
            return [{k: e[k] for k in ("node", "file", "line", "message", "at")} for e in rows]


class MemoryOutbox:
    """The notifier's store (chronod.store.outbox.Outbox, method for method) over a
    MemoryStore: its tables live in the store, so every MemoryOutbox of one store shares them."""

    def __init__(self, store: MemoryStore):
        self.store = store
        self._t = store._t
        self._lock = store._lock

    # --- job definitions, cheaply ----------------------------------------------------------
    def jobs_version(self) -> tuple[int, datetime | None]:
        return self.store.jobs_version()

    # --- notifier state -----------------------------------------------------------------
    def get_state(self, name: str) -> dict[str, Any]:
        with self._lock:
            text = self._t.notify_state.get(name)
        return json.loads(text) if text else {}

    def get_states(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        with self._lock:
            state = self._t.notify_state
            texts = {n: state[n] for n in names if n in state}
        return {n: json.loads(t) for n, t in texts.items()}

    def set_states(self, states: dict[str, dict[str, Any]], now: datetime) -> None:
        texts = {k: json.dumps(v, sort_keys=True, default=str) for k, v in states.items()}
        with self._lock:
            self._t.notify_state.update(texts)

    # --- what changed -------------------------------------------------------------------
    def changed_run_keys(self, since: datetime, until: datetime) -> list[tuple[str, datetime]]:
        with self._lock:
            lo, hi = _utc(since), _utc(until)
            assert lo is not None and hi is not None
            keys = [
                (r.run_id, r.updated_at)
                for r in self._t.runs.values()
                if r.state in _NOTICED and r.updated_at is not None and lo <= r.updated_at < hi
            ]
        return sorted(keys, key=lambda k: (k[1], k[0]))

    def terminal_runs(self, run_ids: Iterable[str]) -> list[Run]:
        with self._lock:
            runs = self._t.runs
            found = [_copy(runs[i]) for i in set(run_ids) if i in runs and runs[i].state in _TERMINAL]
        return sorted(found, key=lambda r: (r.updated_at or _NEVER, r.run_id))

    def waiting_keys(self) -> set[str]:
        with self._lock:
            runs = self._t.runs
            return {runs[i].job_key for i in self._t.waiting} | {runs[i].job_key for i in self._t.running}

    def latest_runs(self) -> dict[str, tuple[str, datetime]]:
        with self._lock:
            runs, out = self._t.runs, {}
            for job_id, ids in self._t.by_job.items():
                r = max((runs[i] for i in ids), key=lambda r: (r.scheduled_at, r.run_id))
                out[job_id] = (r.run_id, r.scheduled_at)
            return out

    def first_seen(self) -> dict[str, datetime]:
        with self._lock:
            runs = self._t.runs
            return {j: min(runs[i].scheduled_at for i in ids) for j, ids in self._t.by_job.items()}

    def last_successes(self, job_ids: Iterable[str]) -> dict[str, datetime]:
        with self._lock:
            runs, out = self._t.runs, {}
            for j in set(job_ids):
                ends = [
                    runs[i].finished_at or runs[i].scheduled_at
                    for i in self._t.by_job.get(j, {})
                    if runs[i].state == _SUCCEEDED
                ]
                if ends:
                    out[j] = max(ends)
            return out

    # --- the outbox -----------------------------------------------------------------------
    def add(self, rows: Iterable[dict[str, Any]], now: datetime) -> int:
        new = 0
        with self._lock:
            for row in rows:
                if row["dedupe_key"] in self._t.dedupe:
                    continue
                n = _Notice(
                    self.store._next_id("notice"),
                    row["job_id"],
                    row["event"],
                    row["state"],
                    row.get("run_id"),
                    row["dedupe_key"],
                    json.dumps(row["route"], sort_keys=True),
                    json.dumps(row["payload"], sort_keys=True, default=str),
                    now,
                )
                self._t.notices[n.id] = n
                self._t.dedupe[n.dedupe_key] = n.id
                new += 1
        return new

    @staticmethod
    def _free(n: _Notice, now: datetime) -> bool:
        return (
            n.sent_at is None
            and (n.claimed_until is None or n.claimed_until < now)
            and (n.next_try_at is None or n.next_try_at <= now)
        )

    def claim(
        self, node: str, now: datetime, *, limit: int = 20, hold_s: float = 300, skip_jobs: Iterable[str] = ()
    ) -> list[Outgoing]:
        skip = set(skip_jobs)
        with self._lock:
            picked = [n for n in self._t.notices.values() if self._free(n, now) and n.job_id not in skip][:limit]
            for n in picked:
                n.claimed_by, n.claimed_until = node, now + timedelta(seconds=hold_s)
            return [_outgoing(n) for n in picked]

    def release_claims(self, node: str) -> int:
        with self._lock:
            done = 0
            for n in self._t.notices.values():
                if n.claimed_by == node and n.sent_at is None:
                    n.claimed_by = n.claimed_until = None
                    done += 1
            return done

    def release(self, notice_ids: Iterable[int], node: str) -> None:
        with self._lock:
            for i in notice_ids:
                n = self._t.notices.get(i)
                if n is not None and n.claimed_by == node and n.sent_at is None:
                    n.claimed_by = n.claimed_until = None

    def mark_sent(self, notice_id: int, node: str, now: datetime) -> bool:
        with self._lock:
            n = self._t.notices.get(notice_id)
            if n is None or n.claimed_by != node or n.sent_at is not None:
                return False
            n.sent_at, n.attempts, n.last_error, n.claimed_until = now, n.attempts + 1, None, None
            return True

    def mark_failed(self, notice_id: int, node: str, error: str, retry_at: datetime) -> None:
        with self._lock:
            n = self._t.notices.get(notice_id)
            if n is None or n.claimed_by != node or n.sent_at is not None:
                return
            n.attempts, n.last_error = n.attempts + 1, error[:2000]
            n.claimed_by = n.claimed_until = None
            n.next_try_at = retry_at

    def notices(self, job_id: str | None = None) -> list[Outgoing]:
        with self._lock:
            return [_outgoing(n) for n in self._t.notices.values() if job_id is None or n.job_id == job_id]


def _outgoing(n: _Notice) -> Outgoing:
    return Outgoing(
        id=n.id,
        job_id=n.job_id,
        event=n.event,
        state=n.state,
        run_id=n.run_id,
        dedupe_key=n.dedupe_key,
        route=json.loads(n.route_json),
        payload=json.loads(n.payload_json),
        created_at=n.created_at,
        attempts=n.attempts,
        sent_at=n.sent_at,
        last_error=n.last_error,
        claimed_by=n.claimed_by,
    )


if TYPE_CHECKING:

    def _implements(store: MemoryStore) -> Store:
        return store  # mypy --strict checks the memory store against the Store protocol here
