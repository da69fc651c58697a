"""The store interface: every piece of durable state chrono keeps, behind one class.

INTERFACE — implemented by chronod.store.sql.SqlStore for SQLite and PostgreSQL alike.
The database enforces the bookkeeping: run ids are primary keys (a second insert of the
same occurrence does nothing), and every write about a run made by a daemon is
conditional, in its WHERE clause, on the writer's fencing token still being the current
token of a live lease for that node. A write that fails that condition changes nothing,
returns False, and increments `stale_rejections`.

All datetimes in and out are aware UTC. Times used for leases come from the database
(`now()` on PostgreSQL; on SQLite the single node's clock is the database clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from chronod.core.model import JobSpec, RunState

if TYPE_CHECKING:
    from chronod.core.history import Mark
    from chronod.store.outbox import Outgoing


class StoreError(Exception):
    """The database could not be reached or answered with an error; `url` has no password."""


class SchemaTooNew(StoreError):
    """The database schema is newer than this chrono knows: upgrade chrono on this host."""


class SchemaTooOld(StoreError):
    """The database schema is older than this chrono: run `chronoctl db upgrade`."""


class NodeConflict(StoreError):
    """Another live chronod holds this database (SQLite allows one node only)."""


@dataclass(slots=True)
class Run:
    """One occurrence of a job and what happened to it (docs/reference.md, Run states)."""

    run_id: str
    job_id: str
    job_key: str
    scheduled_at: datetime
    fire_at: datetime
    state: str = RunState.PENDING
    attempts: int = 0
    node: str | None = None
    pid: int | None = None  # the job's process, also its process group id
    supervisor_pid: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    output_tail: str | None = None
    output_bytes: int = 0
    error: str | None = None  # why it failed, or why it was skipped / lost
    token: int | None = None  # fencing token of the node that wrote it last
    trigger: str = "schedule"  # schedule | manual | catchup
    next_attempt_at: datetime | None = None  # for retry_wait
    updated_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """Every field by name (a shallow copy; runs keep their fields in slots, no __dict__)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class Ending:
    """The outcome of one running attempt, as `Store.finish_many` records it."""

    run_id: str
    attempt: int
    state: str
    exit_code: int | None = None
    signal: int | None = None
    output_tail: str | None = None
    output_bytes: int = 0
    error: str | None = None
    finished_at: datetime | None = None


@dataclass
class Attempt:
    """One attempt of a run, on one node, under one fencing token."""

    run_id: str
    attempt: int
    node: str
    token: int | None
    state: str
    pid: int | None = None
    supervisor_pid: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    error: str | None = None
    output_tail: str | None = None  # this attempt's own tail (bounded like the run's)
    output_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class PauseRow:
    """A pause as stored: on a job, a tag or a resource; by whom, why, since and until when."""

    kind: str  # job | tag | resource
    target: str
    reason: str
    by: str | None
    since: datetime | None
    until: datetime | None


@dataclass(slots=True)
class JobRow:
    """A registered job definition as stored, with its operator state."""

    job_id: str
    spec: JobSpec
    spec_hash: str
    node: str  # the node that last wrote this definition
    paused: bool = False  # the job's own pause holds now, as `paused_jobs` says (one past its `paused_until` is over)
    paused_reason: str | None = None
    paused_at: datetime | None = None
    paused_by: str | None = None
    paused_until: datetime | None = None
    removed_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True)
class Pruned:
    """What retention removed from one job's history: runs scheduled at or before `through`
    may be gone (deleted under a retention of `kept_s` seconds, last at `at`)."""

    job_id: str
    through: datetime
    kept_s: int
    at: datetime


@dataclass
class Node:
    """A chronod process known to the database."""

    name: str
    token: int
    pid: int
    hostname: str
    boot_id: str
    started_at: datetime
    heartbeat_at: datetime
    lease_expires_at: datetime
    stopped_at: datetime | None = None
    info: dict[str, Any] = field(default_factory=dict)
    pid_start: int | None = None  # the process's start in ticks since boot (fsutil.process_start)


@dataclass
class Request:
    """Something chronoctl asked the daemon to do (trigger, reload)."""

    id: int
    kind: str  # "trigger" | "reload"
    job_id: str | None
    payload: dict[str, Any]
    created_at: datetime


# --- the store by role (docs/architecture.md, "Store by role") ---------------------------


class Schema(Protocol):
    """The database itself: its schema revision, migrations, and its connections."""

    url_safe: str  # the URL with any password masked
    dialect: str  # "sqlite" | "postgresql"

    def schema_revision(self) -> str | None:
        """The alembic revision the database is at (None: empty database)."""

    def check_schema(self) -> None:
        """Raise SchemaTooOld / SchemaTooNew unless the database is at this chrono's head."""

    def upgrade(self) -> None:
        """Apply pending migrations, under a lock (PostgreSQL advisory lock / SQLite write lock)."""

    def close(self) -> None:
        """Release every connection."""


class Leases(Protocol):
    """Nodes, their leases and fencing tokens: who may write, and how many writes were refused."""

    stale_rejections: int  # fenced writes this process had refused (its token was no live lease)

    def acquire_node(
        self, name: str, *, pid: int, hostname: str, boot_id: str, ttl_s: float, pid_start: int | None = None
    ) -> int:
        """Register `name` with a new lease and return its new fencing token (a sequence,
        growing on every acquisition). SQLite: raise NodeConflict if another node's lease on
        this database is live."""

    def renew_lease(self, name: str, token: int, ttl_s: float) -> bool:
        """Extend the lease if `token` is still current and unexpired; False means it is gone."""

    def release_node(self, name: str, token: int) -> None:
        """Mark the node stopped (clean shutdown); its lease ends now."""

    def set_node_info(self, name: str, token: int, info: dict[str, Any] | str) -> None:
        """Replace the node's `info` (the daemon publishes registry_loaded_at, jobs, spec_hashes),
        given as a mapping or as its JSON text already encoded (sorted keys)."""

    def nodes(self) -> list[Node]:
        """Every node ever seen, newest heartbeat first."""

    def live_nodes(self) -> list[tuple[str, int]]:
        """(name, token) of every node whose lease (database time) is unexpired, by name:
        cheap enough for every heartbeat."""

    def expired_nodes(self) -> list[Node]:
        """Nodes whose lease has expired (by database time) and that were not stopped cleanly."""


FellDue = Callable[[JobSpec, datetime, datetime], list[Run]]


class Definitions(Protocol):
    """Job definitions as registered: specs, their version, and when each was known."""

    def sync_jobs(self, node: str, specs: Iterable[JobSpec], fell_due: FellDue | None = None) -> None:
        """Upsert these definitions (spec JSON + hash); jobs this node wrote before and no
        longer has get `removed_at` set and their pending occurrences cancelled. For each
        such job whose stored scheduled occurrence had fallen due, `fell_due` (its spec, that
        occurrence's scheduled time, the removal's time) gives the settled runs of those
        after it, never stored, that fell due too; they are inserted in the same
        transaction, so a removal is never stored without them (a start that removes a
        job while the database comes and goes would not see it removed again)."""

    def jobs_version(self) -> tuple[int, datetime | None]:
        """(count, newest updated_at) of the jobs table: changes whenever another writer
        changes a definition, a removal or a pause."""

    def jobs(self, include_removed: bool = False, known: Mapping[str, JobSpec] | None = None) -> list[JobRow]:
        """Every registered job. `known`: specs the caller already holds, by id; a row whose
        stored hash is a known spec's `spec_hash()` gets that object instead of one parsed
        from its JSON (a process keeps one copy of each spec; only `source_file` and
        `source_line`, outside the hash, may then differ from the stored ones)."""

    def known_spans(self, job_ids: Iterable[str] | None = None) -> dict[str, list[tuple[datetime, datetime | None]]]:
        """When each job definition was known, per job id (all jobs when `job_ids` is None):
        the spans from a registration (`sync_jobs` first carrying it) to its removal (None
        while registered), oldest first. The history expects occurrences only inside them."""
        ...

    def get_job(self, job_id: str) -> JobRow | None:
        """One job, removed or not; None if never registered."""

    def registry_files(self, node: str) -> dict[str, tuple[str, bytes]]:
        """The validated job files `node` stored: path -> (file key, result), as given to
        `set_registry_files` (the store keeps both opaque)."""
        ...

    def set_registry_files(self, node: str, files: Mapping[str, tuple[str, bytes] | None]) -> None:
        """Store `node`'s validated job files: path -> (file key, result) replaces what was
        stored for that path, path -> None forgets it. Other nodes' files are untouched."""


class Occurrences(Protocol):
    """The run ledger's occurrences: stored, claimed for a node (fenced), settled, held, revived."""

    def insert_runs(self, runs: Iterable[Run]) -> int:
        """Insert many runs in one transaction, each in the state it carries (pending, or a
        terminal skipped_* record), ignoring run ids that exist; returns how many were new."""

    def revive(self, run_ids: Iterable[str]) -> int:
        """Cancelled-before-start occurrences become pending again (a job back in the registry)."""

    def pending(self, job_keys: Iterable[str] | None = None) -> list[Run]:
        """Runs in state pending or retry_wait (optionally only for these job keys)."""

    def pending_soon(self, until: datetime) -> tuple[list[Run], set[str]]:
        """What a start reads before READY, in one read: the runs `pending` gives, in fire
        order, but the pending scheduled occurrences that fire after `until`; and the job
        keys of those left out (`pending_later` reads them)."""

    def pending_later(self, until: datetime, after: tuple[datetime, str] | None, limit: int) -> list[Run]:
        """The pending scheduled occurrences that fire after `until` and come after `after`
        (fire time, run id) in fire order, at most `limit`, in that order: `pending_soon`'s
        rows and these, page after page, are `pending()`."""

    def late(self, before: datetime, limit: int) -> tuple[list[Run], datetime | None]:
        """A fleet's late occurrences, for a rescue: the pending scheduled runs of `any`
        jobs (job_key = job_id) whose fire time is at or before `before` and that nothing
        holds past it (`next_attempt_at`), oldest first, at most `limit`; and the earliest
        fire time after `before` of such a run (None: none stored). One read."""

    def dispatch(self, run_id: str, node: str, token: int, next_run: Run | None) -> Run | None:
        """Claim a pending/retry_wait run for `node` in ONE transaction: state running,
        attempts + 1, node, token, started_at = now; a new Attempt row; insert `next_run`
        as pending (ON CONFLICT DO NOTHING). PostgreSQL uses FOR UPDATE SKIP LOCKED.
        Return the claimed run, or None if someone else has it or the token is stale."""

    def dispatch_in_group(
        self, run_id: str, node: str, token: int, next_run: Run | None, *, resource: str, limit: int
    ) -> tuple[Run | None, bool]:
        """`dispatch`, refused while `limit` runs of `resource` run on any node (a fleet-wide
        concurrency group). Returns (claimed run or None, group_full); `next_run` is stored
        either way."""

    def dispatch_group(
        self, run_ids: list[str], node: str, token: int, next_runs: list[Run | None], *, resource: str, limit: int
    ) -> tuple[list[Run], bool]:
        """`dispatch_in_group` for several runs of `resource` in ONE transaction: the first
        `limit - running` of `run_ids` are claimed. Returns (claimed runs, group_full: some
        were refused for want of a slot); every one of `next_runs` is stored either way."""

    def claim_offline(self, run: Run, node: str, token: int) -> Run | None:
        """Store (if missing) and claim a run started while the database was unreachable, at
        the attempt and start time it really had. None if settled meanwhile or stale token;
        a row cancelled by its job's removal (`policy.REMOVED_FROM_REGISTRY`) after the run
        had started is not settled: it ran."""

    def waiting_retries(self, node: str) -> list[Run]:
        """Runs in retry_wait last held by `node` (a dead node's pending retries), by
        `next_attempt_at` (one without it first), then run id."""

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
        """Move a pending run straight to a terminal skipped_* state (with why) and insert
        `next_run` as pending, in one transaction. False if it was not pending any more.
        With `token` the write is fenced on it being live for `node`, and the run records
        both: a `token` without its `node` raises ValueError (without `token`, an operator's
        write, neither is checked nor recorded)."""

    def commit_wakeup(
        self, inserts: list[Run], settles: list[tuple[str, str, str | None]], claims: list[str], node: str, token: int
    ) -> list[Run]:
        """Everything one wake-up writes, in one transaction: store `inserts` (existing run
        ids left alone), settle the waiting runs in `settles` (run_id, state, error), then
        claim the waiting runs in `claims` that no other node holds (skip locked: never
        waits). Settles and claims are fenced on `token`. Returns the claimed runs."""

    def note_held(self, run_ids: Iterable[str], why: str, until: datetime, *, node: str, token: int) -> int:
        """Record on pending rows that a maintenance window holds them (`why`) until `until`
        (kept in `error` and `next_attempt_at` until the row is claimed or settled).
        Fenced on `token` for `node`; returns how many rows changed (under a stale token
        none, each refused one counted in `stale_rejections`)."""


class Outcomes(Protocol):
    """The run ledger's outcomes: what became of a claimed attempt, and taking over a dead node's attempts (fenced)."""

    def set_processes(self, started: list[tuple[str, int, int, int]], token: int) -> set[str]:
        """Record the process ids of started attempts (run_id, attempt, pid, supervisor_pid)
        in one transaction, fenced; returns the run ids recorded."""

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
        """Record the outcome of a running attempt; fenced on `token` (None: operator/CLI
        write, not fenced). Only changes a run that is `running` at that attempt."""

    def finish_many(self, endings: list[Ending], token: int | None) -> set[str]:
        """`finish` for many attempts in one transaction (a busy node's wake-up); returns
        the run ids whose outcome was recorded. Each is fenced and conditional alone."""

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
        """running -> retry_wait after a failed attempt (fenced). `attempt_state` is what the
        attempt row records (failed or timed_out); the attempt's output tail is kept on its
        attempt row and, until the next attempt ends, on the run."""

    def adopt(self, run_id: str, attempt: int, *, node: str, token: int) -> bool:
        """A restarted daemon re-attaches to a still-running attempt: the run and its attempt
        row take `node` and `token`. Only when the holder's token is no longer a live lease
        (or already is `token`) and `token` is live for `node`; otherwise False (and counted
        when `token` is stale)."""

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
        """End a running attempt whose holder's lease is gone (the node died, or the process
        was not found after a restart): `retry_wait` (a new attempt of an idempotent/keyed
        job, due at `next_attempt_at`, default now) or a terminal state (`lost` for unsafe
        jobs, with finished_at now). The attempt row records `lost` and `error`. Fenced on
        `token` being live for `node`; False if the holder is still live or the run moved on."""

    def note_late_outcome(self, run_id: str, attempt: int, text: str) -> bool:
        """An attempt settled `lost` whose result arrived afterwards: `text` (what the
        result says) is added to its error, and to the run's while that attempt is the
        run's latest; its state stays `lost`. False when the attempt is not `lost`, or
        carries the note already."""


class RunHistory(Protocol):
    """The run ledger read back: runs, attempts, and each job's latest run."""

    def running(self, node: str | None = None) -> list[Run]:
        """Runs in state running (optionally only those held by `node`)."""

    def run_states(self, run_ids: Iterable[str]) -> dict[str, str]:
        """run_id -> state for those of `run_ids` that have a row."""

    def get_run(self, run_id: str) -> Run | None:
        """One run by id."""

    def runs_by_prefix(self, prefix: str, limit: int = 10) -> list[Run]:
        """Runs whose id starts with `prefix` (at most `limit`, by id): how a short id
        copied from a table is found."""

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
        """Runs filtered by job, scheduled_at window and state."""

    def run_marks(self, *, since: datetime, until: datetime) -> list[Mark]:
        """(run_id, job_id, job_key, scheduled_at, state, trigger) of every run scheduled in
        [since, until): the slim shape `chronoctl missed` needs to tell which occurrences
        have a row, without building a full Run for each."""

    def attempts(self, run_id: str) -> list[Attempt]:
        """Every attempt of a run, in order."""

    # `last_successes`, `last_runs` and `last_states` answer for any job id asked: one
    # registered now, one removed from the registry (a removed job's history is still its
    # history) or one never registered; what decides is the runs the id has, not a row in
    # the jobs table.

    def last_successes(self, job_ids: Iterable[str], until: datetime) -> dict[str, Run]:
        """job_id -> its latest succeeded run scheduled before `until`, for many jobs in one
        query (jobs that never succeeded are left out). Any job id, registered or not."""

    def last_runs(self, job_ids: Iterable[str], until: datetime, skip: Iterable[str] = ()) -> dict[str, Run]:
        """Each job's latest run scheduled before `until` whose state is not in `skip`
        (jobs without one are left out), for many jobs in one read. Any job id, registered
        or not (a removed job's history is still its history)."""

    def last_states(self, job_ids: Iterable[str], until: datetime, skip: Iterable[str] = ()) -> dict[str, str]:
        """The state of the run `last_runs` would give each job, without reading the runs
        (any job id, as `last_runs`)."""


class Retention(Protocol):
    """Removing history: pruning under a per-job watermark, and deleting a run outright."""

    def prune_runs(self, job_id: str, before: datetime, *, kept_s: int, limit: int) -> int:
        """Delete, oldest first, at most `limit` terminal runs of `job_id` (with their attempts)
        scheduled before `before`, never the job's latest success, and in the same transaction
        move the job's watermark (`pruned`) up to the newest run deleted, recording `kept_s`.
        Returns how many runs were deleted (0: nothing left to prune before `before`)."""

    def prunable(self, cutoffs: dict[str, datetime]) -> dict[str, int]:
        """job_id -> how many runs `prune_runs(job_id, cutoff)` would delete in all (jobs
        with none are left out): what `db prune --dry-run` shows."""

    def job_ids_with_runs_before(self, before: datetime) -> list[str]:
        """Every job id, registered or not, that has a run scheduled before `before`."""

    def pruned(self, job_ids: Iterable[str] | None = None) -> dict[str, Pruned]:
        """The pruning watermark of each job that was ever pruned (all when `job_ids` is None)."""

    def delete_run(self, run_id: str) -> bool:
        """Remove a run and its attempts (tests, operator repair); False if there was none."""


class Backfills(Protocol):
    """Backfills (chronod.store.backfills): the stored request, its occurrences, how far it got."""

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
        """Store a backfill with its chosen occurrences, `items`: (run_id, job_key,
        scheduled_at, fire_at), oldest first; nothing started yet. Returns its id."""

    def backfills(self, *, active_only: bool = False, job_id: str | None = None, limit: int = 50) -> list[Any]:
        """Stored backfills, newest first (`active_only`: those still running)."""

    def get_backfill(self, backfill_id: int) -> Any | None:
        """One stored backfill by id (None: no such backfill)."""

    def open_backfill_run(self, backfill_id: int, index: int, run: Run) -> Run | None:
        """Make the backfill's occurrence `index` wait to start (trigger backfill: inserted,
        or an ended run opened again with its attempts kept) and count it started, in one
        transaction; returns the waiting run as stored, a new value (the caller's `run` is
        left as it was). None when it is in flight already or the backfill moved on."""

    def cancel_backfill(self, backfill_id: int, why: str) -> tuple[bool, list[str]]:
        """Cancel a running backfill: none of its occurrences starts any more, those opened
        and not started end `cancelled` (with no `next_attempt_at` left, as any settled
        run). Returns whether it was running and the run ids it cancelled."""

    def end_backfill(self, backfill_id: int, state: str, error: str | None = None) -> bool:
        """A running backfill ends (`done` or `cancelled`); False if it was not running."""


class OperatorState(Protocol):
    """Requests and state: pauses, chronoctl's requests (run-now, reload), per job-key state, registry errors, and health figures."""

    def set_paused(
        self,
        job_id: str,
        paused: bool,
        reason: str | None,
        *,
        by: str | None = None,
        until: datetime | None = None,
    ) -> bool:
        """Pause (by a user, until a time or until resumed) or resume a job; False if no such job."""

    def paused_jobs(self) -> dict[str, str | None]:
        """job_id -> pause reason for every job whose own pause holds now (cheap: the
        daemon asks on each wake); a pause past its `until` is over."""

    def set_group_pause(
        self, kind: str, target: str, reason: str, *, by: str | None = None, until: datetime | None = None
    ) -> None:
        """Pause every job with a tag (`kind` "tag") or in a resource ("resource"), replacing
        an earlier pause of the same target."""

    def clear_group_pause(self, kind: str, target: str) -> bool:
        """Resume a tag or a resource; False if it was not paused."""

    def pauses(self, include_removed: bool = False) -> list[PauseRow]:
        """Every pause that holds now: jobs' own, then tags' and resources'. A removed job's
        own pause only with `include_removed` (the daemon's: a reload prepared beside its
        loop marks a job removed before the loop lets the job go)."""

    def add_request(self, kind: str, job_id: str | None, payload: dict[str, Any]) -> int:
        """Queue a request for the daemon(s); returns its id."""

    def take_requests(self, node: str) -> list[Request]:
        """Atomically take every queued request (each is taken by one node)."""

    def get_job_state(self, job_key: str) -> dict[str, Any]:
        """Small JSON state kept per job key ({} when none)."""

    def set_job_state(self, job_key: str, state: dict[str, Any]) -> None:
        """Replace the state kept for a job key."""

    def set_registry_errors(self, node: str, errors: list[dict[str, Any]]) -> None:
        """Replace this node's current registry errors (file, line, message)."""

    def registry_errors(self) -> list[dict[str, Any]]:
        """Current registry errors of every node, by node, file and line (an error
        without a line, the whole file's, first in its file)."""

    def metrics(self) -> dict[str, Any]:
        """A cheap summary: {"runs_by_state": {state: n}, "jobs": n, "paused_jobs": n (the
        jobs `paused_jobs` gives), "stale_rejections": n (this process), "database_bytes":
        n or None}."""

    def database_bytes(self) -> int | None:
        """The size of the database on disk (None when the database will not say)."""


class RunLedger(Occurrences, Outcomes, RunHistory, Protocol):
    """The run ledger: occurrences, runs, attempts and outcomes."""


class Store(Schema, Leases, Definitions, RunLedger, Retention, Backfills, OperatorState, Protocol):
    """What the daemon and chronoctl need from the database: every role at once. A part that
    needs only one or two roles may ask for those alone."""


#: The roles whose union is `Store`, each method in exactly one (the outbox is not among
#: them: `NoticeOutbox`, kept by `chronod.store.outbox.Outbox` beside the store).
STORE_ROLES: tuple[type, ...] = (
    Schema,
    Leases,
    Definitions,
    Occurrences,
    Outcomes,
    RunHistory,
    Retention,
    Backfills,
    OperatorState,
)


class NoticeOutbox(Protocol):
    """The outbox: notices to deliver, claimed and marked by the nodes, and the notifier's
    own state and cheap reads of the history (kept by `chronod.store.outbox.Outbox`)."""

    def jobs_version(self) -> tuple[int, datetime | None]:
        """(count, newest updated_at) of the jobs table: changes whenever a definition, a
        removal or a pause does, so the notifier re-reads definitions only then."""

    def get_state(self, name: str) -> dict[str, Any]:
        """The JSON state kept under `name` ({} when none)."""

    def get_states(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """State per name for many names at once (missing names are left out)."""

    def set_states(self, states: dict[str, dict[str, Any]], now: datetime) -> None:
        """Replace the state kept under each name, in one transaction."""

    def changed_run_keys(self, since: datetime, until: datetime) -> list[tuple[str, datetime]]:
        """(run id, updated_at) of the runs whose row changed in [since, until) that ended
        in a state the notifier reads (`model.NOTICED_STATES`: not the skips that tell
        nothing), oldest first: two narrow columns, so that a reader can tell what it has
        already read without reading whole rows again."""

    def terminal_runs(self, run_ids: Iterable[str]) -> list[Run]:
        """The runs among `run_ids` that are in a terminal state, in (updated_at, run id) order."""

    def waiting_keys(self) -> set[str]:
        """Job keys with a pending, running or retrying run (the chain is alive)."""

    def latest_runs(self) -> dict[str, tuple[str, datetime]]:
        """job_id -> (run id, scheduled_at) of its latest scheduled run."""

    def first_seen(self) -> dict[str, datetime]:
        """job_id -> scheduled_at of its earliest run (when the history starts)."""

    def last_successes(self, job_ids: Iterable[str]) -> dict[str, datetime]:
        """job_id -> finish time of its latest success."""

    def add(self, rows: Iterable[dict[str, Any]], now: datetime) -> int:
        """Insert notice rows (keys: job_id, event, state, run_id, dedupe_key, route,
        payload); rows whose dedupe key exists are ignored. Returns how many were new."""

    def claim(
        self, node: str, now: datetime, *, limit: int = 20, hold_s: float = 300, skip_jobs: Iterable[str] = ()
    ) -> list[Outgoing]:
        """Take up to `limit` unsent rows that are due and not held by a live claim, none
        of the jobs in `skip_jobs` (their delivery lane is full)."""

    def release_claims(self, node: str) -> int:
        """Free the rows a previous process of `node` claimed and did not finish (it is dead:
        its lease passed to us); they are sent again, at least once."""

    def release(self, notice_ids: Iterable[int], node: str) -> None:
        """Give back rows this node claimed and will not deliver now: they are free at once."""

    def mark_sent(self, notice_id: int, node: str, now: datetime) -> bool:
        """Record a delivery; False when the claim was lost meanwhile (someone else sends)."""

    def mark_failed(self, notice_id: int, node: str, error: str, retry_at: datetime) -> None:
        """Record a failed delivery and release the row for a new try at `retry_at`."""

    def notices(self, job_id: str | None = None) -> list[Outgoing]:
        """Every row (optionally of one job), oldest first: for status and tests."""


def open_store(url: str, *, cli: bool = False) -> Store:
    """Open the store at an SQLAlchemy URL or a plain SQLite file path (lazy imports).
    `cli`: chronoctl's, whose SQLite writes wait longer for the lock than the daemon's."""
    from chronod.store.sql import CLI_BUSY_TIMEOUT_S, DAEMON_BUSY_TIMEOUT_S, SqlStore

    return SqlStore(url, busy_timeout_s=CLI_BUSY_TIMEOUT_S if cli else DAEMON_BUSY_TIMEOUT_S)
