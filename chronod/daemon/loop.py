"""The daemon loop: keep every carried job's next occurrence stored, start what falls due,
record how each run ends. Decisions come from chronod.core.policy; time only from the
injected clock; the loop sleeps until the next fire (or a signal, a child's exit, a
registry change, a heartbeat) and never polls.

On PostgreSQL the node is one of a fleet (docs/fleet.md): it renews its lease every
ttl/3, takes over the running runs of nodes whose lease expired, stops launching and
terminates what it no longer owns when it finds its own lease gone, runs only the
fleet's version of a job the registries disagree about, and outlives database outages
(`each` jobs keep running and spool their records; `any` jobs wait for catch-up).
"""

from __future__ import annotations

import fnmatch
import heapq
import os
import random
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from chronod.core import identity, policy
from chronod.core.clock import Clock
from chronod.core.model import JobSpec
from chronod.core.schedule import Schedule, compile_schedule
from chronod.daemon.quarantine import Quarantine
from chronod.daemon.waker import Wakeups
from chronod.fleet import placement
from chronod.fleet.spool import Spool
from chronod.store.api import Ending, Run, Store, StoreError

SQLITE_LEASE_TTL_S = 600.0
RECONCILE_EVERY_S = 300.0
VERSION_CHECK_EVERY_S = 10.0
OUTAGE_BACKOFF_S = (0.5, 30.0)  # first retry, longest wait between retries
GROUP_FULL_RETRY_S = 1.0
CLAIM_CHUNK = 50  # runs claimed per transaction: the first ones start before the rest are claimed
LAUNCH_SLICE_S = 0.5  # a wake-up starts runs for at most this long, then collects children again
RESCUE_AFTER_S = 2.0  # an `any` occurrence still unclaimed this long after its fire time: any node takes it


@dataclass
class Job:
    """A carried job: its spec, compiled schedule and identity on this node."""

    spec: JobSpec
    schedule: Schedule
    key: str
    offset: int


@dataclass
class Active:
    """A run this daemon is watching (launched here or adopted)."""

    run: Run
    handle: Any
    job: Job
    disowned: bool = False  # another node took the run over; the process is being terminated
    offline: bool = False  # started while the database was unreachable; spooled


@dataclass
class Batch:
    """What one wake-up writes together (`Store.commit_wakeup`): occurrences to store,
    waiting runs to settle (run_id, state, error), runs to claim and start."""

    inserts: list[Run] = field(default_factory=list)
    settles: list[tuple[str, str, str | None]] = field(default_factory=list)
    claims: list[tuple[Job, Run]] = field(default_factory=list)


class ActiveRuns(dict):
    """run_id -> Active, with an index by job so that overlap checks stay O(1) per launch
    when a thousand runs are in flight."""

    def __init__(self) -> None:
        super().__init__()
        self._by_job: dict[str, dict[str, Active]] = {}

    def __setitem__(self, run_id: str, active: Active) -> None:
        if run_id in self:
            del self[run_id]
        super().__setitem__(run_id, active)
        self._by_job.setdefault(active.job.spec.id, {})[run_id] = active

    def __delitem__(self, run_id: str) -> None:
        active = self[run_id]
        super().__delitem__(run_id)
        runs = self._by_job.get(active.job.spec.id, {})
        runs.pop(run_id, None)
        if not runs:
            self._by_job.pop(active.job.spec.id, None)

    def pop(self, run_id: str, *default: Any) -> Any:
        if run_id not in self:
            if default:
                return default[0]
            raise KeyError(run_id)
        active = self[run_id]
        del self[run_id]
        return active

    def for_job(self, job_id: str) -> list[Active]:
        """The runs of one job in flight here."""
        return list(self._by_job.get(job_id, {}).values())


def carries(spec: JobSpec, node: str) -> bool:
    """Whether this node runs the job at all (`run_on: {nodes: [globs]}` restricts)."""
    if spec.run_on.each or not spec.run_on.nodes:
        return True
    return any(fnmatch.fnmatchcase(node, g) for g in spec.run_on.nodes)


class Daemon:
    """One chronod. Built by chronod.daemon.main (the composition root)."""

    def __init__(self, *, clock: Clock, store: Store, runner: Any, load_registry: Callable[[], Any],
                 node: str, metrics: Any, notifier: Any, log: Callable[..., None],
                 waker: Any, boot_id: str, boot_time: float, lease_ttl_s: float = SQLITE_LEASE_TTL_S,
                 rng: random.Random | None = None):
        self.clock, self.store, self.runner, self.node = clock, store, runner, node
        self._load_registry = load_registry
        self.metrics, self.notifier, self.log, self.waker = metrics, notifier, log, waker
        self.boot_id, self.boot_time = boot_id, boot_time
        self.lease_ttl_s = lease_ttl_s
        self.rng = rng or random.Random()
        self.token = 0
        self.lease_deadline = 0.0  # monotonic
        self.jobs: dict[str, Job] = {}
        self.file_specs: dict[str, list[JobSpec]] = {}  # last good version of each file
        self.heap: list[tuple[datetime, int, str]] = []  # (wake at, seq, run_id)
        self.pending: dict[str, Run] = {}  # run_id -> stored pending / retry_wait run
        self.active = ActiveRuns()  # run_id -> running here (launched or adopted)
        self.queued: dict[str, deque[Run]] = {}  # job_id -> runs waiting for their turn
        self.paused: dict[str, str | None] = {}
        self.resources: dict[str, int] = {}
        self.seq = 0
        self.stopping = False
        self.next_reconcile = 0.0
        self.next_watchdog = 0.0
        self.fleet = store.dialect == "postgresql"
        # PostgreSQL: a timer wake-up every ttl/3; SQLite: renew when half the lease is used
        self.heartbeat_s = lease_ttl_s / 3 if self.fleet else lease_ttl_s * 0.5
        self.next_heartbeat = 0.0  # monotonic
        self.tokens: set[int] = set()  # every token this process held
        self.outvoted: dict[str, str] = {}  # job_id -> the fleet's spec hash, when ours lost
        self.carried: dict[str, dict[str, str]] = {}  # live node -> job_id -> spec hash (placement)
        self.live: list[tuple[str, int]] = []  # (name, token) of the live nodes at the last heartbeat
        self.owners: dict[str, str | None] = {}  # job_id -> the node that dispatches it (cache)
        self.deferred: set[str] = set()  # run ids left to their owner, checked at fire + RESCUE_AFTER_S
        self.next_version_check = 0.0
        self.outage: tuple[float, str] | None = None  # (monotonic start, first error)
        self.retry_at = 0.0
        self.backoff_s = OUTAGE_BACKOFF_S[0]
        self.offline_new: dict[str, Run] = {}  # occurrences materialized during an outage
        self.takeover_after = 0.0  # monotonic; no takeovers before (see reconnect)
        self.reload_wanted = False  # a reload or request arrived during an outage
        self.batch: Batch | None = None  # set while a wake-up collects its writes
        self.backlog: list[tuple[Job, Run]] = []  # due runs a busy wake-up left for the next one
        self.lease_gone = False  # set by the lease thread when a renewal found the lease gone
        self.notify_service: Any = None  # set by the composition root; woken after each outcome
        self.lease_thread_stop = __import__("threading").Event()
        self.spool = Spool(Path(getattr(runner, "state_dir", ".")) / "spool.jsonl")
        self.registry_problems: list[dict[str, Any]] = []  # the last reload's file errors
        self.quarantine = Quarantine(log, metrics.quarantined, (StoreError,), self.report_problems)

    # ------------------------------------------------------------------ start / stop
    def start(self) -> None:
        """Take the lease, load the registry, adopt orphaned runs, materialize, report READY."""
        self.acquire()
        self.log("node.acquired", node=self.node, token=self.token)
        if self.fleet:
            self.start_lease_thread()
        self.reload(initial=True)
        self.set_aside()
        if self.fleet:
            self.check_versions()
        self.replay_spool()
        self.adopt()
        # load_pending has just made the invariant true; the first check comes later
        self.next_reconcile = self.clock.monotonic() + RECONCILE_EVERY_S
        self.reboot_jobs()
        self.notifier.ready(self.status_line())
        self.log("daemon.ready", node=self.node, jobs=len(self.jobs), pending=len(self.pending),
                 running=len(self.active))

    def run_forever(self) -> None:
        """The loop: wait, then handle whatever woke us, until SIGTERM. A database error
        never ends it: the node goes offline and retries (see `offline_tick`)."""
        while not self.stopping:
            woke = self.waker.wait(self.next_wake(), [a.handle for a in self.active.values()])
            try:
                if self.outage is None:
                    self.tick(woke)
                else:
                    self.offline_tick(woke)
            except StoreError as e:
                self.went_offline(e)
        self.shutdown()

    def shutdown(self) -> None:
        """Stop launching; leave running jobs to finish under their supervisors."""
        self.notifier.stopping()
        self.lease_thread_stop.set()
        try:
            self.store.release_node(self.node, self.token)
        except StoreError as e:
            self.log("node.release_failed", "warning", node=self.node, message=str(e),
                     note="the lease expires by itself")
        self.log("daemon.stopped", running_left=len(self.active),
                 note="running jobs continue; the next chronod adopts them")

    # ------------------------------------------------------------------ one wake-up
    def tick(self, woke: Wakeups) -> None:
        """Handle one wake-up: children first (frees slots), then control, then due work."""
        if woke.stop:
            self.stopping = True
            return
        self.children_exited(woke.children)
        self.keep_lease()
        if woke.reload:
            self.notifier.reloading()  # systemd shows "reloading" until READY=1 comes back
            try:
                self.reload()
            finally:
                self.notifier.ready(self.status_line())
        if woke.requests or woke.reload:
            self.take_requests()
        self.refresh_paused()
        self.run_due()
        self.housekeeping()
        self.set_aside()

    def set_aside(self) -> None:
        """Quarantined jobs leave the schedule (their history and stored rows stay)."""
        for job_id in [j for j in self.jobs if j in self.quarantine]:
            del self.jobs[job_id]
            for rid in [r for r, run in self.pending.items() if run.job_id == job_id]:
                del self.pending[rid]
                self.deferred.discard(rid)
            self.queued.pop(job_id, None)

    def next_wake(self) -> datetime | None:
        """The earliest time anything is due (None: nothing scheduled)."""
        candidates = []
        if self.heap:
            candidates.append(self.heap[0][0])
        now = self.clock.now()
        if self.backlog:
            candidates.append(now)
        mono = self.clock.monotonic()
        if self.outage is None:
            deadlines = (self.next_heartbeat, self.next_reconcile, self.next_watchdog)
        else:
            deadlines = (self.retry_at, self.next_watchdog)
        for deadline in deadlines:
            if deadline > 0:
                candidates.append(now + timedelta(seconds=max(deadline - mono, 0)))
        return min(candidates) if candidates else None

    def housekeeping(self) -> None:
        mono = self.clock.monotonic()
        if self.notifier.watchdog_interval_s and mono >= self.next_watchdog:
            self.notifier.watchdog()
            self.next_watchdog = mono + self.notifier.watchdog_interval_s
        if mono >= self.next_reconcile:
            self.reconcile()
        self.metrics.running.set(len(self.active))
        stale = self.store.stale_rejections
        if stale > self._stale_seen:
            self.metrics.stale.inc(stale - self._stale_seen)
            self._stale_seen = stale

    _stale_seen = 0

    def acquire(self) -> None:
        """A new lease under a new fencing token."""
        mono = self.clock.monotonic()
        self.token = self.store.acquire_node(
            self.node, pid=os.getpid(), hostname=os.uname().nodename, boot_id=self.boot_id, ttl_s=self.lease_ttl_s)
        self.tokens.add(self.token)
        self.lease_deadline = mono + self.lease_ttl_s * 0.9
        self.next_heartbeat = mono + self.heartbeat_s
        self.metrics.lease_token.set(self.token)

    def start_lease_thread(self) -> None:
        """Fleet: renew the lease from a thread too, so that a loop busy starting hundreds
        of runs does not lose it (a false failover); a paused process still loses it."""
        import threading

        threading.Thread(target=self.lease_thread, name="chrono-lease", daemon=True).start()

    def lease_thread(self) -> None:
        while not self.lease_thread_stop.wait(self.heartbeat_s):
            token, mono = self.token, self.clock.monotonic()
            try:
                ok = self.store.renew_lease(self.node, token, self.lease_ttl_s)
            except StoreError:
                continue  # the loop sees the outage through its own calls
            if token != self.token:
                continue  # the loop rejoined meanwhile
            if ok:
                self.lease_deadline = max(self.lease_deadline, mono + self.lease_ttl_s * 0.9)
            else:
                self.lease_gone = True

    def keep_lease(self) -> None:
        """Heartbeat when it is due (every ttl/3 in a fleet)."""
        if self.clock.monotonic() >= self.next_heartbeat:
            self.heartbeat()

    def heartbeat(self) -> None:
        """Renew the lease (database time); a lost lease means rejoin. In a fleet, also take
        over the runs of expired nodes and check which version of each job the fleet runs."""
        mono = self.clock.monotonic()
        self.next_heartbeat = mono + self.heartbeat_s
        if self.lease_gone:
            self.lease_lost()
        elif self.store.renew_lease(self.node, self.token, self.lease_ttl_s):
            self.lease_deadline = mono + self.lease_ttl_s * 0.9
        else:
            self.lease_lost()
        if self.fleet:
            if mono >= self.takeover_after:
                self.take_over()
            live = self.store.live_nodes()
            if mono >= self.next_version_check or live != self.live:
                self.live = live
                self.check_versions()

    def lease_lost(self) -> None:
        """Our lease lapsed (a pause, a stall, an outage): rejoin with a new token, keep the
        runs nobody took over, terminate the ones another node now owns."""
        old = self.token
        self.lease_gone = False
        self.acquire()
        self.log("node.lease_lost", "warning", node=self.node, token=old, new_token=self.token)
        for rid, a in list(self.active.items()):
            if a.disowned or a.offline:
                continue  # offline runs are not stored yet: the spool replay claims them
            if self.store.adopt(rid, a.run.attempts, node=self.node, token=self.token):
                a.run.token = self.token
                continue
            a.disowned = True
            self.runner.cancel(a.handle)
            self.log("run.disowned", "warning", job=a.job.spec.id, run=rid, attempt=a.run.attempts,
                     why="taken over by another node while this node's lease had lapsed; terminating it here")

    def take_over(self) -> None:
        """Runs held by nodes whose lease expired: a new attempt here for idempotent/keyed
        jobs this node carries, `lost` for unsafe ones. Each reclaim is fenced, so one node
        wins it. `each` runs belong to their host and wait for it to come back."""
        for dead in self.store.expired_nodes():
            if dead.name == self.node:
                continue
            for run in self.store.running(dead.name):
                if run.job_key == run.job_id:
                    self.take_over_run(dead.name, run)
            self.take_over_retries(dead.name)

    def take_over_run(self, dead: str, run: Run) -> None:
        job = self.jobs.get(run.job_id) or self.job_from_store(run.job_id)
        if job is None:
            return
        why = f"node {dead} stopped renewing its lease while this ran (attempt {run.attempts})"
        if policy.on_unknown_outcome(job.spec) == "lost":
            if self.store.reclaim(run.run_id, run.attempts, node=self.node, token=self.token, state="lost",
                                  error=why + "; an unsafe job is never run twice: outcome unknown"):
                self.metrics.runs.labels("lost").inc()
                self.metrics.takeovers.labels("lost").inc()
                self.log("run.lost", "error", job=run.job_id, run=run.run_id, dead_node=dead, why=why,
                         notice="owner must check whether it ran")
            return
        if run.job_id not in self.jobs:
            return  # a node that carries the job takes it over
        now = self.clock.now()
        if self.store.reclaim(run.run_id, run.attempts, node=self.node, token=self.token, state="retry_wait",
                              error=why + "; re-dispatched", next_attempt_at=now):
            run.state, run.next_attempt_at = "retry_wait", now
            self.track(run)
            self.metrics.takeovers.labels("redispatched").inc()
            self.log("run.taken_over", "warning", job=run.job_id, run=run.run_id, dead_node=dead,
                     attempt=run.attempts + 1)

    def take_over_retries(self, dead: str) -> None:
        """Retries the dead node was waiting to start: nobody else tracks them."""
        from chronod.fleet.claims import waiting_retries

        for run in waiting_retries(self.store, dead):
            if run.job_id in self.jobs and run.run_id not in self.pending:
                self.track(run)

    def check_versions(self) -> None:
        """Which version of each disagreeing job the fleet runs, and which node dispatches
        each `any` job (chronod.fleet.placement)."""
        self.next_version_check = self.clock.monotonic() + VERSION_CHECK_EVERY_S
        local = {j.spec.id: j.spec.spec_hash() for j in self.jobs.values() if not j.spec.run_on.each}
        nodes, now = self.store.nodes(), self.clock.now()
        lost = placement.outvoted(local, nodes, now)
        carried = {n.name: (n.info or {}).get("spec_hashes") or {} for n in nodes if placement.node_live(n, now)}
        carried[self.node] = local
        if carried != self.carried:
            self.carried, self.owners = carried, {}
        for job_id, best in lost.items():
            if self.outvoted.get(job_id) != best:
                self.log("job.version_outvoted", "warning", job=job_id, local_hash=local[job_id], fleet_hash=best,
                         note="this node's definition differs from the fleet's; it leaves this job to the others")
        for job_id in self.outvoted.keys() - lost.keys():
            self.log("job.version_agreed", job=job_id)
        self.outvoted = lost

    def lease_ok(self) -> bool:
        """Launch only while the local monotonic deadline says the lease must still hold."""
        return self.clock.monotonic() < self.lease_deadline

    # ------------------------------------------------------------------ registry
    def reload(self, initial: bool = False) -> None:
        """Validate first, then swap: a file with errors keeps its last good version."""
        result = self._load_registry()
        specs: dict[str, JobSpec] = {}
        errors: list[dict[str, Any]] = []
        for path, fres in sorted(result.files.items()):
            bad = [p for p in fres.problems if p.severity == "error"]
            if bad:
                for p in bad:
                    errors.append({"file": p.file or path, "line": p.line, "message": p.format()})
                    self.log("registry.error", "error", file=p.file or path, line=p.line, message=p.format())
                keep = self.file_specs.get(path)
                if keep is not None:
                    self.log("registry.kept_last_good", "warning", file=path, jobs=len(keep))
                    fres_specs = keep
                else:
                    fres_specs = list(fres.specs)
            else:
                fres_specs = list(fres.specs)
                self.file_specs[path] = fres_specs
            for spec in fres_specs:
                if spec.id in specs:
                    continue  # the loader reports duplicates; the first file wins
                specs[spec.id] = spec
        for path in list(self.file_specs):
            if path not in result.files:
                del self.file_specs[path]
        self.resources = {}
        for fres in result.files.values():
            for name, res in (fres.resources or {}).items():
                self.resources.setdefault(name, res.max_concurrency)
        self.quarantine.keep_only(specs)
        self.registry_problems = errors
        self.report_problems()
        self.metrics.registry_errors.set(len({e["file"] for e in errors}))
        self.apply_specs(specs)
        self.next_version_check = 0.0
        self.store.set_node_info(self.node, self.token, {
            "registry_loaded_at": self.clock.now().isoformat(),
            "jobs": len(self.jobs),
            "spec_hashes": {j.spec.id: j.spec.spec_hash() for j in self.jobs.values()},
            "registry_errors": len(errors),
            "pid": os.getpid(),
        })
        if not initial:
            self.log("registry.reloaded", jobs=len(self.jobs), errors=len(errors))
            self.notifier.status(self.status_line())

    def report_problems(self) -> None:
        """The registry errors of the last reload and the quarantined jobs, for `status`."""
        self.store.set_registry_errors(self.node, self.registry_problems + self.quarantine.problems())

    def apply_specs(self, specs: dict[str, JobSpec]) -> None:
        """Swap in a new set of definitions and keep each job's next occurrence right."""
        carried = {i: s for i, s in specs.items() if carries(s, self.node)}
        self.store.sync_jobs(self.node, carried.values())
        old = self.jobs
        new: dict[str, Job] = {}
        for job_id, spec in carried.items():
            prev = old.get(job_id)
            if self.quarantine.holds(spec):
                continue
            if prev is not None and prev.spec == spec:
                new[job_id] = prev
                continue
            with self.quarantine.guard(spec, "schedule"):
                key = identity.job_key(spec.id, spec.run_on.each, self.node)
                schedule = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
                new[job_id] = Job(spec, schedule, key, identity.jitter_offset(key, spec.tolerance_s))
        self.jobs = new
        self.metrics.jobs.set(len(new))
        for job_id in old.keys() - new.keys():
            self.forget_job(job_id)
        self.load_pending()

    def forget_job(self, job_id: str) -> None:
        """A removed job: its pending occurrence is cancelled (the store did it); history stays."""
        for rid in [r for r, run in self.pending.items() if run.job_id == job_id]:
            del self.pending[rid]
            self.deferred.discard(rid)
        self.queued.pop(job_id, None)
        self.log("job.removed", job=job_id)

    def load_pending(self) -> None:
        """Read stored pending occurrences of carried jobs; drop ones whose schedule changed."""
        keys = {j.key: j for j in self.jobs.values()}
        stored = self.store.pending(list(keys))
        self.pending = {}
        self.heap = []
        self.deferred = set()
        self.backlog = []
        for run in stored:
            job = keys.get(run.job_key)
            if job is None:
                continue
            if run.state == "pending" and run.trigger == "schedule" and not self.still_scheduled(job, run):
                self.store.settle(run.run_id, "cancelled", error="schedule changed before it fell due",
                                  next_run=None, node=self.node, token=self.token)
                continue
            if run.state == "pending":
                run.fire_at = run.scheduled_at + timedelta(seconds=job.offset)
            self.track(run)
        have = {r.job_key for r in self.pending.values() if r.trigger == "schedule" and r.state == "pending"}
        fresh = [self.next_run(job, self.clock.now()) for job in self.jobs.values()
                 if job.key not in have and job.schedule.kind != "reboot" and job.spec.enabled]
        fresh = [r for r in fresh if r is not None]
        if fresh:
            if self.store.insert_runs(fresh) < len(fresh):
                # a job removed and added back before its next occurrence: that occurrence
                # was cancelled with the removal and must not be lost
                self.store.revive(r.run_id for r in fresh)
            for r in fresh:
                self.track(r)

    def still_scheduled(self, job: Job, run: Run) -> bool:
        if not job.spec.enabled or job.schedule.kind == "reboot":
            return False
        with self.quarantine.guard(job.spec, "stored occurrences"):
            return job.schedule.next_after(run.scheduled_at - timedelta(seconds=1)) == run.scheduled_at
        return True  # the job is set aside; its stored rows stay as they are

    def next_run(self, job: Job, after: datetime) -> Run | None:
        """The first occurrence whose fire time is after `after`, as a pending Run."""
        with self.quarantine.guard(job.spec, "next occurrence"):
            at = job.schedule.next_after(after - timedelta(seconds=job.offset))
            return None if at is None else self.make_run(job, at)
        return None

    def make_run(self, job: Job, scheduled_at: datetime, trigger: str = "schedule", rid: str | None = None) -> Run:
        return Run(run_id=rid or identity.run_id(job.key, scheduled_at), job_id=job.spec.id, job_key=job.key,
                   scheduled_at=scheduled_at, fire_at=scheduled_at + timedelta(seconds=job.offset),
                   state="pending", trigger=trigger)

    def track(self, run: Run) -> None:
        self.pending[run.run_id] = run
        wake = run.next_attempt_at if run.state == "retry_wait" and run.next_attempt_at else run.fire_at
        self.seq += 1
        heapq.heappush(self.heap, (wake, self.seq, run.run_id))

    # ------------------------------------------------------------------ due work
    def run_due(self) -> None:
        """Pop everything due, decide per job with the catch-up policy, then act. In a
        fleet the runs to start are claimed together at the end (one transaction)."""
        self.batch = Batch(claims=self.backlog)  # one transaction per wake-up, on SQLite too
        self.backlog = []
        try:
            self.run_due_now()
            self.flush_batch()
        finally:
            self.batch = None

    def run_due_now(self) -> None:
        now = self.clock.now()
        by_job: dict[str, list[Run]] = {}
        rescue: list[Run] = []
        while self.heap and self.heap[0][0] <= now:
            _, _, rid = heapq.heappop(self.heap)
            run = self.pending.get(rid)
            if run is None:
                continue
            if rid in self.deferred:
                self.deferred.discard(rid)
                rescue.append(run)
                continue
            by_job.setdefault(run.job_id, []).append(run)
        for job_id, runs in by_job.items():
            if getattr(self.waker, "stop_requested", False):
                return  # SIGTERM: stored occurrences stay pending for the other nodes or the next start
            job = self.jobs.get(job_id)
            if job is None or job_id in self.quarantine:
                continue
            with self.quarantine.guard(job.spec, "due occurrences"):
                self.due_now(job, runs, now)
        if rescue:
            self.rescue(rescue, now)
        for job_id in list(self.queued):
            self.drain_queue(job_id)

    def due_now(self, job: Job, runs: list[Run], now: datetime) -> None:
        for run in runs:
            if run.state == "retry_wait" or run.trigger != "schedule":
                self.pending.pop(run.run_id, None)
                self.start_or_queue(job, run)
        scheduled = [r for r in runs if r.state == "pending" and r.trigger == "schedule"]
        if scheduled and not self.owns(job):
            self.defer(job, scheduled)
        elif scheduled:
            self.fall_due(job, scheduled, now)

    def fall_due(self, job: Job, stored: list[Run], now: datetime) -> None:
        """The stored occurrence(s) fell due: add any later ones that fell due unseen (an
        outage, a stall, a clock jump), store the next one, then run or skip each."""
        for r in stored:
            self.pending.pop(r.run_id, None)
        last = max(r.scheduled_at for r in stored)
        extra, nxt = self.due_since(job, last, now)
        due = sorted(stored + extra, key=lambda r: r.scheduled_at)
        decision = policy.catchup(job.spec, [policy.Due(r.scheduled_at, r.fire_at) for r in due], now)
        by_at = {r.scheduled_at: r for r in due}
        to_store = list(extra)
        if nxt is not None:
            to_store.append(nxt)
        skips = []
        for d, reason in decision.skip:
            r = by_at[d.scheduled_at]
            r.state, r.error = "skipped_outage", reason
            skips.append(r)
        stored_ids = {r.run_id for r in stored}
        # later occurrences (skipped ones in their terminal state) and the next one
        self.store_runs(to_store)
        for r in skips:
            if r.run_id in stored_ids:
                self.settle_quietly(r.run_id, "skipped_outage", r.error, nxt)
            self.metrics.runs.labels("skipped_outage").inc()
        if skips:
            self.log("runs.skipped_outage", job=job.spec.id, count=len(skips),
                     first=skips[0].scheduled_at, last=skips[-1].scheduled_at)
        if nxt is not None:
            self.track(nxt)
        for d in decision.run:
            run = by_at[d.scheduled_at]
            run.state = "pending"
            if job.spec.catchup == "all" and len(decision.run) > 1:
                self.queued.setdefault(job.spec.id, deque()).append(run)
            else:
                self.start_or_queue(job, run, next_run=nxt)

    def owns(self, job: Job) -> bool:
        """Whether this node dispatches the job's scheduled occurrences: always for `each`
        jobs and on one host; in a fleet, the `any` job's owner (chronod.fleet.placement)."""
        if not self.fleet or job.spec.run_on.each:
            return True
        job_id = job.spec.id
        if job_id not in self.owners:
            self.owners[job_id] = placement.owner(job_id, self.carried)
        return self.owners[job_id] in (None, self.node)

    def defer(self, job: Job, runs: list[Run]) -> None:
        """Another node owns the job: look again at RESCUE_AFTER_S past the fire time, and
        follow the schedule meanwhile (the owner stores the next occurrence when it claims)."""
        for r in runs:
            self.deferred.add(r.run_id)
            self.seq += 1
            heapq.heappush(self.heap, (r.fire_at + timedelta(seconds=RESCUE_AFTER_S), self.seq, r.run_id))
        at = job.schedule.next_after(max(r.scheduled_at for r in runs))
        if at is not None:
            nxt = self.make_run(job, at)
            if nxt.run_id not in self.pending:
                self.track(nxt)

    def rescue(self, runs: list[Run], now: datetime) -> None:
        """Deferred occurrences whose owner has not claimed them (dead, paused, behind): this
        node takes them, through the catch-up policy, competing for the claim like any other.
        Those claimed or settled meanwhile are dropped. A node that is behind itself looks
        again later: taking more work would only spread the overload."""
        if self.backlog:
            for r in runs:
                self.deferred.add(r.run_id)
                self.seq += 1
                heapq.heappush(self.heap, (now + timedelta(seconds=RESCUE_AFTER_S), self.seq, r.run_id))
            return
        states = self.store.run_states([r.run_id for r in runs])
        taken: Counter[str] = Counter()
        for r in runs:
            self.pending.pop(r.run_id, None)
            job = self.jobs.get(r.job_id)
            # a retry the owner scheduled is its to start (a dead owner's: take_over_retries)
            if job is None or states.get(r.run_id, "pending") != "pending":
                continue
            taken[str(self.owners.get(r.job_id))] += 1
            if r.run_id not in states:
                self.store_runs([r])  # its owner never stored it
            at = job.schedule.next_after(r.scheduled_at)
            nxt = self.make_run(job, at) if at is not None else None
            decision = policy.catchup(job.spec, [policy.Due(r.scheduled_at, r.fire_at)], now)
            if decision.run:
                self.start_or_queue(job, r, next_run=nxt)
            else:
                for _, reason in decision.skip:
                    self.settle(r, "skipped_outage", reason, nxt)
        if taken:
            self.metrics.rescued.inc(sum(taken.values()))
            self.log("runs.rescued", "warning", count=sum(taken.values()),
                     owners=",".join(f"{o}:{n}" for o, n in sorted(taken.items())),
                     oldest_late_s=round(max((now - r.fire_at).total_seconds() for r in runs), 1))

    def due_since(self, job: Job, last: datetime, now: datetime) -> tuple[list[Run], Run | None]:
        """Occurrences after `last` whose fire time has passed, and the first that has not."""
        extra: list[Run] = []
        at = last
        while True:
            at = job.schedule.next_after(at)
            if at is None:
                return extra, None
            run = self.make_run(job, at)
            if run.fire_at > now:
                return extra, run
            extra.append(run)
            if len(extra) > policy.MAX_BACKLOG_RECORDS:
                # a very long outage of a very frequent job: keep the newest records only
                extra = extra[-policy.MAX_BACKLOG_RECORDS:]
                skip_to = now - timedelta(seconds=job.offset + policy.ON_TIME_GRACE_S + 1)
                at = max(at, skip_to - timedelta(seconds=1))

    def start_or_queue(self, job: Job, run: Run, next_run: Run | None = None) -> None:
        """Apply pause, overlap and resource limits, then dispatch and launch."""
        spec = job.spec
        if spec.id in self.paused and run.trigger == "schedule":
            self.settle(run, "skipped_paused", f"job paused: {self.paused[spec.id] or 'no reason given'}", next_run)
            return
        running = [a for a in self.active.for_job(spec.id) if not a.disowned]
        forced = run.trigger == "manual-force"
        action = "start" if forced or run.state == "retry_wait" else policy.overlap_action(spec, len(running))
        if action == "skip":
            prev = running[0].run
            self.settle(run, "skipped_overlap", f"previous run {prev.run_id} (since {prev.started_at or prev.fire_at:%Y-%m-%dT%H:%M:%SZ}) still running; overlap: forbid", next_run)
            return
        if action == "replace":
            for a in running:
                self.log("run.replacing", job=spec.id, run=a.run.run_id, by=run.run_id)
                self.runner.cancel(a.handle)
        if not self.resource_free(spec):
            self.store_runs([next_run])  # the chain must not wait for the queue
            self.queued.setdefault(spec.id, deque()).append(run)
            return
        self.launch(job, run, next_run)

    def drain_queue(self, job_id: str) -> None:
        """Start queued runs of a job whose turn has come (catch-up `all`, resource limits)."""
        q = self.queued.get(job_id)
        job = self.jobs.get(job_id)
        if not q or job is None:
            self.queued.pop(job_id, None)
            return
        while q:
            busy = bool(self.active.for_job(job_id))
            if busy and job.spec.catchup == "all" and q[0].trigger == "schedule" and job.spec.overlap != "allow":
                return  # catch-up runs go one after another
            if not self.resource_free(job.spec):
                return
            self.launch(job, q.popleft(), None)
        self.queued.pop(job_id, None)

    def resource_free(self, spec: JobSpec) -> bool:
        if not spec.resource:
            return True
        limit = self.resource_limit(spec)
        used = sum(1 for a in self.active.values() if a.job.spec.resource == spec.resource and not a.disowned)
        return used < limit

    def resource_limit(self, spec: JobSpec) -> int:
        return self.resources.get(spec.resource, 1)

    def settle(self, run: Run, state: str, why: str, next_run: Run | None) -> None:
        """Record a terminal state for an occurrence that will not start."""
        self.settle_quietly(run.run_id, state, why, next_run)
        self.metrics.runs.labels(state).inc()
        self.log("run.settled", job=run.job_id, run=run.run_id, state=state, why=why)

    def settle_quietly(self, run_id: str, state: str, why: str | None, next_run: Run | None) -> None:
        """`settle` without the log line: with this wake-up's writes, or now."""
        if self.batch is None:
            self.store.settle(run_id, state, error=why, next_run=next_run, node=self.node, token=self.token)
            return
        self.batch.settles.append((run_id, state, why))
        self.store_runs([next_run])

    def store_runs(self, runs: list[Run | None]) -> None:
        """Store occurrences (existing run ids are left alone): with this wake-up's writes, or now."""
        runs = [r for r in runs if r is not None]
        if not runs:
            return
        if self.batch is not None:
            self.batch.inserts.extend(runs)
        else:
            self.store.insert_runs(runs)

    # ------------------------------------------------------------------ launching
    def launch(self, job: Job, run: Run, next_run: Run | None) -> None:
        """Claim the run in the store (with the next occurrence), then start its process."""
        if not self.lease_ok():
            self.heartbeat()
            if not self.lease_ok():
                self.log("launch.refused", "warning", job=job.spec.id, run=run.run_id, why="lease may have lapsed")
                self.store_runs([next_run])
                self.track(run)
                return
        if job.spec.id in self.outvoted and not job.spec.run_on.each:
            self.store_runs([next_run])
            return  # the nodes with the fleet's version of this job dispatch it
        if self.batch is not None and not job.spec.resource:
            self.batch.claims.append((job, run))
            self.store_runs([next_run])
            return
        claimed = self.claim(job, run, next_run)
        if claimed is not None:
            self.start_process(job, claimed)

    def flush_batch(self) -> None:
        """Write what this wake-up collected in one transaction with the first claims, then
        start the claimed runs, a chunk at a time: a node busy forking leaves the rest of
        a burst to the other nodes instead of holding all of it."""
        batch, self.batch = self.batch, None
        if batch is None:
            return
        inserts = list({r.run_id: r for r in batch.inserts}.values())
        settles, claims = batch.settles, batch.claims
        jobs = {run.run_id: job for job, run in claims}
        until = self.clock.monotonic() + LAUNCH_SLICE_S
        i = 0
        while inserts or settles or i < len(claims):
            if i and self.clock.monotonic() > until:
                # a node that cannot start them all in time collects its children first;
                # the rest wait one wake-up (or another node rescues them)
                self.backlog = claims[i:]
                return
            if not self.lease_ok():
                self.heartbeat()
            if getattr(self.waker, "stop_requested", False) or not self.lease_ok():
                # SIGTERM or a doubtful lease: store what must be stored, start nothing;
                # what is not claimed stays pending for the other nodes or the next start
                self.store.commit_wakeup(inserts, settles, [], self.node, self.token)
                for _, run in claims[i:]:
                    self.track(run)
                return
            chunk = [run.run_id for _, run in claims[i:i + CLAIM_CHUNK]]
            claimed = self.store.commit_wakeup(inserts, settles, chunk, self.node, self.token)
            inserts, settles, i = [], [], i + CLAIM_CHUNK
            started = [self.start_process(jobs[c.run_id], c, record=False) for c in claimed]
            self.store.set_processes([p for p in started if p is not None], self.token)

    def start_process(self, job: Job, claimed: Run, record: bool = True) -> tuple[str, int, int, int] | None:
        """Start the process of a claimed attempt and watch it; store its process ids now,
        or (`record=False`) return them for the caller to store with others."""
        from chronod.runner.api import LaunchRequest

        env = {
            "CHRONO_JOB_ID": job.spec.id,
            "CHRONO_RUN_ID": claimed.run_id,
            "CHRONO_SCHEDULED_AT": identity.utc_stamp(claimed.scheduled_at),
            "CHRONO_FIRE_AT": identity.utc_stamp(claimed.fire_at),
            "CHRONO_ATTEMPT": str(claimed.attempts),
            "CHRONO_OWNER": job.spec.owner,
            "CHRONO_NODE": self.node,
        }
        handle = self.runner.launch(LaunchRequest(claimed.run_id, claimed.attempts, job.spec, env))
        now = self.clock.now()
        lag = (now - claimed.fire_at).total_seconds()
        if claimed.attempts == 1 and claimed.trigger == "schedule":
            self.metrics.fire_lag.observe(max(lag, 0.0))
        self.active[claimed.run_id] = Active(claimed, handle, job)
        self.log("run.started", job=job.spec.id, run=claimed.run_id, attempt=claimed.attempts,
                 supervisor=handle.supervisor_pid, lag_ms=round(lag * 1000, 1))
        if not handle.pid:
            return None
        pids = (claimed.run_id, claimed.attempts, handle.pid, handle.supervisor_pid)
        if record:
            self.store.set_processes([pids], self.token)
        return pids

    def claim(self, job: Job, run: Run, next_run: Run | None) -> Run | None:
        """Dispatch in the store; in a fleet, a `resource` limit holds across every node."""
        spec = job.spec
        if self.fleet and spec.resource:
            from chronod.fleet.claims import dispatch_in_group

            claimed, full = dispatch_in_group(self.store, run.run_id, self.node, self.token, next_run,
                                              resource=spec.resource, limit=self.resource_limit(spec))
            if full:
                run.fire_at = max(run.fire_at, self.clock.now())
                self.pending[run.run_id] = run
                self.seq += 1
                heapq.heappush(self.heap, (self.clock.now() + timedelta(seconds=GROUP_FULL_RETRY_S),
                                           self.seq, run.run_id))
                return None
            return claimed
        claimed = self.store.dispatch(run.run_id, self.node, self.token, next_run)
        if claimed is None and not self.fleet:
            self.log("dispatch.lost_race", "warning", job=spec.id, run=run.run_id)
        return claimed

    # ------------------------------------------------------------------ endings
    def children_exited(self, handles: list[Any]) -> None:
        """Supervisors ended: record the outcomes (one transaction for the lot), maybe
        retry, then let queued runs go. A result file is discarded only once recorded."""
        ended = []
        for handle in handles:
            active = self.active.get(handle.run_id)
            if active is not None and active.handle is not handle:
                active = None
            outcome = self.runner.collect(handle)
            if active is None or outcome is None:
                continue
            del self.active[active.run.run_id]
            ended.append((active, outcome))
        if not ended:
            return
        if self.outage is not None:
            for active, outcome in ended:
                self.spool_outcome(active, outcome)
        else:
            self.record_outcomes([(active.job, active.run, outcome) for active, outcome in ended])
            if self.notify_service is not None:
                self.notify_service.wake()
        for active, _ in ended:
            self.runner.discard(active.run.run_id, active.run.attempts)
        jobs = {active.job.spec.id for active, _ in ended}
        if any(active.job.spec.resource for active, _ in ended):
            jobs |= set(self.queued)
        for job_id in jobs:
            self.drain_queue(job_id)

    def record_outcomes(self, ended: list[tuple[Job, Run, Any]]) -> None:
        """Retries and unknown outcomes one by one; every final outcome in one transaction."""
        final = []
        for job, run, outcome in ended:
            state = outcome.state
            if state == "lost" and policy.on_unknown_outcome(job.spec) == "redispatch":
                self.retry_now(job, run, outcome.error or "outcome unknown")
            elif policy.may_retry(job.spec, run.attempts, state):
                self.schedule_retry(job, run, outcome)
            else:
                final.append((job, run, outcome))
        if not final:
            return
        done = self.store.finish_many([
            Ending(run.run_id, run.attempts, outcome.state, exit_code=outcome.exit_code, signal=outcome.signal,
                   output_tail=outcome.output_tail, output_bytes=outcome.output_bytes, error=outcome.error,
                   finished_at=outcome.finished_at) for _, run, outcome in final], self.token)
        for job, run, outcome in final:
            self.recorded(job, run, outcome, run.run_id in done)

    def schedule_retry(self, job: Job, run: Run, outcome: Any) -> None:
        delay = policy.retry_delay_s(job.spec, run.attempts, self.rng)
        at = self.clock.now() + timedelta(seconds=delay)
        if self.store.schedule_retry(run.run_id, run.attempts, at, exit_code=outcome.exit_code,
                                     signal=outcome.signal, error=outcome.error, token=self.token):
            run.state, run.next_attempt_at = "retry_wait", at
            self.track(run)
            self.log("run.retry_wait", job=job.spec.id, run=run.run_id, attempt=run.attempts,
                     exit_code=outcome.exit_code, retry_in_s=round(delay, 1))

    def recorded(self, job: Job, run: Run, outcome: Any, ok: bool) -> None:
        spec, state = job.spec, outcome.state
        if not ok:
            self.log("run.finish_rejected", "warning", job=spec.id, run=run.run_id, why="stale token or state")
            return
        self.metrics.runs.labels(state).inc()
        if state == "succeeded":
            self.metrics.last_success.labels(spec.id).set((outcome.finished_at or self.clock.now()).timestamp())
        self.log("run.finished", job=spec.id, run=run.run_id, attempt=run.attempts, state=state,
                 exit_code=outcome.exit_code, signal=outcome.signal, output_bytes=outcome.output_bytes,
                 error=outcome.error)

    def retry_now(self, job: Job, run: Run, why: str) -> None:
        """Idempotent/keyed run whose outcome is unknown: a new attempt, same run id."""
        at = self.clock.now()
        if self.store.schedule_retry(run.run_id, run.attempts, at, exit_code=None, signal=None,
                                     error=f"{why}; re-dispatched", token=self.token):
            run.state, run.next_attempt_at = "retry_wait", at
            self.track(run)
            self.log("run.redispatch", "warning", job=job.spec.id, run=run.run_id, why=why)

    # ------------------------------------------------------------------ restart safety
    def adopt(self) -> None:
        """Runs left `running` by a previous chronod: adopt live supervisors, record the
        results of those that ended meanwhile, and settle the truly unknown."""
        for run in self.store.running(self.node if self.store.dialect != "sqlite" else None):
            if run.run_id in self.active:
                continue
            job = self.jobs.get(run.job_id) or self.job_from_store(run.job_id)
            if job is None:
                continue
            found = self.runner.adopt(run.run_id, run.attempts)
            if found is None and run.token in self.tokens:
                self.never_started(job, run)
                continue
            if found is None:
                self.unknown_outcome(job, run)
                continue
            if not self.store.adopt(run.run_id, run.attempts, node=self.node, token=self.token):
                self.log("run.adopt_refused", "warning", job=run.job_id, run=run.run_id,
                         why="its holder still has a live lease")
                continue
            if hasattr(found, "fd"):
                self.active[run.run_id] = Active(run, found, job)
                self.log("run.adopted", job=run.job_id, run=run.run_id, attempt=run.attempts,
                         supervisor=found.supervisor_pid)
            else:
                self.log("run.ended_while_down", job=run.job_id, run=run.run_id, state=found.state)
                self.record_outcomes([(job, run, found)])
                self.runner.discard(run.run_id, run.attempts)
        for rid, attempt in self.runner.orphans(known=[(r, a.run.attempts) for r, a in self.active.items()]):
            run = self.store.get_run(rid)
            if run is None or run.state != "running" or run.attempts != attempt:
                self.runner.discard(rid, attempt)  # already recorded before a crash

    def job_from_store(self, job_id: str) -> Job | None:
        row = self.store.get_job(job_id)
        if row is None:
            return None
        spec = row.spec
        key = identity.job_key(spec.id, spec.run_on.each, self.node)
        schedule = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
        return Job(spec, schedule, key, identity.jitter_offset(key, spec.tolerance_s))

    def unknown_outcome(self, job: Job, run: Run) -> None:
        """No supervisor and no result: the machine rebooted, or chronod died between the
        claim and the fork. Unsafe runs are `lost`; others get a new attempt now."""
        why = "chronod stopped while it ran and no supervisor or result is left: outcome unknown"
        if policy.on_unknown_outcome(job.spec) == "lost":
            if self.store.reclaim(run.run_id, run.attempts, node=self.node, token=self.token, state="lost",
                                  error=why + "; an unsafe job is never run twice"):
                self.metrics.runs.labels("lost").inc()
                self.log("run.lost", "error", job=job.spec.id, run=run.run_id, why=why)
            return
        now = self.clock.now()
        if job.spec.id in self.jobs and self.store.reclaim(
                run.run_id, run.attempts, node=self.node, token=self.token, state="retry_wait",
                error=why + "; re-dispatched", next_attempt_at=now):
            run.state, run.next_attempt_at = "retry_wait", now
            self.track(run)
            self.log("run.redispatch", "warning", job=job.spec.id, run=run.run_id, why=why)

    def never_started(self, job: Job, run: Run) -> None:
        """A claim this very process made whose launch never happened (the database failed
        between the claim's commit and its answer): no process ever ran, so a new attempt
        is safe for every class, unsafe included."""
        why = "claimed, but the database connection failed before the job was started; started again"
        if run.token != self.token and not self.store.adopt(run.run_id, run.attempts, node=self.node,
                                                             token=self.token):
            return
        now = self.clock.now()
        if self.store.schedule_retry(run.run_id, run.attempts, now, exit_code=None, signal=None, error=why,
                                     token=self.token):
            run.state, run.next_attempt_at = "retry_wait", now
            if job.spec.id in self.jobs:
                self.track(run)
            self.log("run.redispatch", "warning", job=job.spec.id, run=run.run_id, why=why)

    # ------------------------------------------------------------------ database outages
    def went_offline(self, e: StoreError) -> None:
        """The database failed: log once per outage, then retry with backoff."""
        mono = self.clock.monotonic()
        if self.outage is None:
            self.outage = (mono, str(e))
            self.backoff_s = OUTAGE_BACKOFF_S[0]
            self.metrics.store_up.set(0)
            self.log("store.unreachable", "error", message=str(e),
                     note="each jobs keep running and are spooled; any jobs wait and catch up")
        else:
            # in a fleet, back within a third of a lease of the database: the others wait
            # one lease after their own return before they take this node's work over
            longest = min(OUTAGE_BACKOFF_S[1], self.lease_ttl_s / 3) if self.fleet else OUTAGE_BACKOFF_S[1]
            self.backoff_s = min(self.backoff_s * 2, max(longest, OUTAGE_BACKOFF_S[0]))
        self.retry_at = mono + self.backoff_s * self.rng.uniform(0.8, 1.2)

    def offline_tick(self, woke: Wakeups) -> None:
        """One wake-up without the database: record endings in the spool, start due `each`
        runs, hold `any` runs back, and try to reconnect when the backoff says so."""
        if woke.stop:
            self.stopping = True
            return
        self.children_exited(woke.children)
        self.reload_wanted |= woke.reload or woke.requests
        if self.notifier.watchdog_interval_s and self.clock.monotonic() >= self.next_watchdog:
            self.notifier.watchdog()  # the process is healthy; the database is not
            self.next_watchdog = self.clock.monotonic() + self.notifier.watchdog_interval_s
        if self.clock.monotonic() >= self.retry_at:
            self.reconnect()
            if self.outage is None:
                return
        self.run_due_offline()

    def reconnect(self) -> None:
        """The database answers again: rejoin (renew or a new token), replay the spool,
        re-read what is stored (the runs held back fall due and go through catch-up)."""
        started, first = self.outage
        # The other nodes lost the database too and may not have renewed yet: a lease that
        # lapsed during the outage says nothing about its node until it had a lease's time
        # to come back (a takeover now would re-run work that finished and is spooled).
        self.takeover_after = self.clock.monotonic() + self.lease_ttl_s
        self.heartbeat()
        if self.offline_new:
            self.store.insert_runs([r for r in self.offline_new.values() if r.state == "pending"])
        self.replay_spool()
        self.adopt()
        if self.reload_wanted:
            self.reload()
            self.take_requests()
        self.load_pending()
        self.reconcile()
        self.offline_new = {}
        self.reload_wanted = False
        self.outage = None
        self.metrics.store_up.set(1)
        self.log("store.reachable", outage_s=round(self.clock.monotonic() - started, 1), first_error=first)

    def run_due_offline(self) -> None:
        now = self.clock.now()
        held = []
        while self.heap and self.heap[0][0] <= now:
            entry = heapq.heappop(self.heap)
            run = self.pending.get(entry[2])
            job = self.jobs.get(run.job_id) if run is not None else None
            if job is None:
                continue
            if not job.spec.run_on.each:
                held.append(entry)  # a late fire beats a double fire: wait for the database
                continue
            self.pending.pop(run.run_id, None)
            self.launch_offline(job, run, now)
        # held `any` runs come back from the database at reconnect; keep them out of the heap
        # meanwhile so that the loop sleeps until the next `each` fire or retry
        for _, _, rid in held:
            self.pending.pop(rid, None)

    def launch_offline(self, job: Job, run: Run, now: datetime) -> None:
        """Start an `each` run with no database: the spool is its record until replay."""
        from chronod.runner.api import LaunchRequest

        nxt = self.next_run(job, now)
        if nxt is not None:
            self.offline_new[nxt.run_id] = nxt
            self.track(nxt)
        spec = job.spec
        if self.active.for_job(spec.id) and spec.overlap == "forbid":
            self.spool.append("skip", run=run.__dict__, state="skipped_overlap",
                              error="previous run still running; overlap: forbid (database unreachable)")
            return
        run.attempts += 1
        run.state, run.node, run.started_at = "running", self.node, now
        env = {"CHRONO_JOB_ID": spec.id, "CHRONO_RUN_ID": run.run_id,
               "CHRONO_SCHEDULED_AT": identity.utc_stamp(run.scheduled_at),
               "CHRONO_FIRE_AT": identity.utc_stamp(run.fire_at), "CHRONO_ATTEMPT": str(run.attempts),
               "CHRONO_OWNER": spec.owner, "CHRONO_NODE": self.node}
        self.spool.append("start", run=run.__dict__)
        handle = self.runner.launch(LaunchRequest(run.run_id, run.attempts, spec, env))
        self.active[run.run_id] = Active(run, handle, job, offline=True)
        self.log("run.started", job=spec.id, run=run.run_id, attempt=run.attempts, offline=True,
                 lag_ms=round((now - run.fire_at).total_seconds() * 1000, 1))

    def spool_outcome(self, active: Active, outcome: Any) -> None:
        run = active.run
        self.spool.append("finish", run_id=run.run_id, attempt=run.attempts, state=outcome.state,
                          exit_code=outcome.exit_code, signal=outcome.signal, output_tail=outcome.output_tail,
                          output_bytes=outcome.output_bytes, error=outcome.error,
                          finished_at=outcome.finished_at or self.clock.now())
        self.log("run.finished", job=run.job_id, run=run.run_id, attempt=run.attempts, state=outcome.state,
                 exit_code=outcome.exit_code, spooled=True)

    def replay_spool(self) -> None:
        """Write what happened while the database was unreachable, oldest first."""
        from chronod.fleet.claims import claim_offline

        records = self.spool.records()
        if not records:
            return
        written = 0
        for rec in records:
            kind = rec["kind"]
            if kind == "start":
                run = Run(**rec["run"])
                ok = claim_offline(self.store, run, self.node, self.token) is not None
                if ok and run.run_id in self.active:
                    self.active[run.run_id].run.token = self.token
                    self.active[run.run_id].offline = False
            elif kind == "finish":
                self.store.adopt(rec["run_id"], rec["attempt"], node=self.node, token=self.token)
                ok = self.store.finish(rec["run_id"], rec["attempt"], rec["state"], exit_code=rec["exit_code"],
                                       signal=rec["signal"], output_tail=rec["output_tail"],
                                       output_bytes=rec["output_bytes"], error=rec["error"], token=self.token,
                                       finished_at=rec["finished_at"])
                if ok:
                    self.metrics.runs.labels(rec["state"]).inc()
            else:
                run = Run(**rec["run"])
                self.store.insert_runs([run])
                ok = self.store.settle(run.run_id, rec["state"], error=rec["error"], next_run=None,
                                       node=self.node, token=self.token)
            written += bool(ok)
        self.spool.clear()
        self.log("spool.replayed", records=len(records), written=written)

    def reboot_jobs(self) -> None:
        """@reboot jobs run once per kernel boot (boot id), not once per chronod start."""
        for job in self.jobs.values():
            if job.schedule.kind != "reboot" or not job.spec.enabled:
                continue
            state = self.store.get_job_state(job.key)
            if state.get("boot_id") == self.boot_id:
                continue
            at = datetime.fromtimestamp(int(self.boot_time), timezone.utc)
            run = self.make_run(job, at, trigger="schedule")
            run.fire_at = self.clock.now()
            self.store.insert_runs([run])
            self.store.set_job_state(job.key, {**state, "boot_id": self.boot_id})
            self.start_or_queue(job, run)

    def reconcile(self) -> None:
        """Check the invariant 'every enabled job has its next occurrence stored'; repair."""
        self.next_reconcile = self.clock.monotonic() + RECONCILE_EVERY_S
        stored = {r.job_key for r in self.store.pending([j.key for j in self.jobs.values()])
                  if r.state == "pending" and r.trigger == "schedule"}
        missing = [j for j in self.jobs.values()
                   if j.spec.enabled and j.schedule.kind != "reboot" and j.key not in stored]
        self.metrics.without_next.set(len(missing))
        if not missing:
            return
        runs = [r for r in (self.next_run(j, self.clock.now()) for j in missing) if r is not None]
        self.store.insert_runs(runs)
        for r in runs:
            self.track(r)
        self.metrics.repairs.inc(len(runs))
        self.log("reconcile.repaired", "warning", definitions_without_next_timer=len(missing),
                 jobs=",".join(j.spec.id for j in missing[:20]))

    # ------------------------------------------------------------------ control
    def refresh_paused(self) -> None:
        self.paused = self.store.paused_jobs()

    def take_requests(self) -> None:
        """Manual triggers and reloads queued by chronoctl."""
        for req in self.store.take_requests(self.node):
            if req.kind == "reload":
                continue  # the reload already happened on this wake-up
            job = self.jobs.get(req.job_id or "")
            if req.kind != "trigger" or job is None:
                self.log("request.ignored", "warning", kind=req.kind, job=req.job_id)
                continue
            at = self.clock.now().replace(microsecond=0)
            rid = req.payload.get("run_id") or identity.run_id(f"{job.key}|manual|{req.id}", at)
            run = self.make_run(job, at, trigger="manual-force" if req.payload.get("force") else "manual", rid=rid)
            run.fire_at = at
            self.store.insert_runs([run])
            self.log("run.triggered", job=job.spec.id, run=rid, force=bool(req.payload.get("force")))
            self.start_or_queue(job, run)

    def status_line(self) -> str:
        return f"{len(self.jobs)} jobs, {len(self.active)} running, node {self.node}"
