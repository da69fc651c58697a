"""The daemon loop: keep every carried job's next occurrence stored, start what falls due,
record how each run ends. Decisions come from chronod.core.policy; time only from the
injected clock; the loop sleeps until the next fire (or a signal, a child's exit, a
registry change, a heartbeat) and never polls.

`Daemon` is a thin shell over the parts named after what they do: chronod.daemon.registry
(reload, occurrences, reconcile), .dispatch (due work, launching), .endings (outcomes,
retries), .recovery (adopt, rejoin, takeover), .outage (database outages and the spool),
and the lease (chronod.fleet.lease).

On PostgreSQL the node is one of a fleet (docs/fleet.md): it renews its lease every
ttl/3, takes over the running runs of nodes whose lease expired, stops launching and
terminates what it no longer owns when it finds its own lease gone, runs only the
fleet's version of a job the registries disagree about, and outlives database outages
(`each` jobs keep running and spool their records; `any` jobs wait for catch-up).
"""

from __future__ import annotations

import random
from collections import deque
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

from chronod.core import occurrence, policy
from chronod.core.blackout import Pause, Window
from chronod.core.clock import Clock
from chronod.core.model import JobSpec
from chronod.daemon.backfills import Backfills
from chronod.daemon.dispatch import Dispatch
from chronod.daemon.endings import Endings
from chronod.daemon.holds import Holds
from chronod.daemon.outage import OUTAGE_BACKOFF_S, Outage
from chronod.daemon.quarantine import Quarantine
from chronod.daemon.recovery import Recovery
from chronod.daemon.registry import RECONCILE_EVERY_S, Registry
from chronod.daemon.reloads import InlineReloads
from chronod.daemon.runs import ActiveRuns, Batch, Job
from chronod.daemon.startlimit import StartLimit
from chronod.daemon.synced import Synced
from chronod.daemon.waits import Waits
from chronod.daemon.waker import Wakeups
from chronod.fleet.lease import Lease
from chronod.fleet.spool import Spool
from chronod.store.api import Run, Store, StoreError
from chronod.store.dbwatch import DbWatch

SQLITE_LEASE_TTL_S = 600.0
CLOCK_STEP_S = 5.0  # a change of wall minus monotonic time larger than this is a clock step


class Daemon(Registry, Dispatch, StartLimit, Holds, Waits, Endings, Recovery, Outage, Backfills):
    """One chronod. Built by chronod.daemon.main (the composition root)."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: Store,
        runner: Any,
        load_registry: Callable[[], Any],
        node: str,
        metrics: Any,
        notifier: Any,
        log: Callable[..., None],
        waker: Any,
        boot_id: str,
        boot_time: float,
        lease_ttl_s: float = SQLITE_LEASE_TTL_S,
        rng: random.Random | None = None,
        reloads: Any = None,
        max_starts_per_s: float | None = None,
    ):
        self.clock, self.store, self.runner, self.node = clock, store, runner, node
        self._load_registry = load_registry
        self.metrics, self.notifier, self.log, self.waker = metrics, notifier, log, waker
        self.boot_id, self.boot_time = boot_id, boot_time
        self.lease_ttl_s = lease_ttl_s
        self.rng = rng or random.Random()
        self.reloads = reloads or InlineReloads()  # ThreadReloads in chronod (chronod.daemon.reloads)
        self.jobs: dict[str, Job] = {}
        self.file_specs: dict[str, list[JobSpec]] = {}  # last good version of each file
        self.synced = Synced()  # what the last reload stored (an unchanged reload skips it)
        self.heap: list[tuple[datetime, int, str]] = []  # (wake at, seq, run_id)
        self.pending: dict[str, Run] = {}  # run_id -> stored pending / retry_wait run
        self.active = ActiveRuns()  # run_id -> running here (launched or adopted)
        self.queued: dict[str, deque[Run]] = {}  # job_id -> catch-up occurrences waiting for their turn
        self.catching_up: dict[str, set[str]] = {}  # job_id -> run ids started from its catch-up line
        self.waiting: dict[str, list[tuple[Job, Run]]] = {}  # resource -> runs waiting for a slot, in line
        self.group_retry_at: dict[str, datetime] = {}  # resource -> when to ask a full fleet again
        self.paused: dict[str, str | None] = {}  # job_id -> reason of the job's own pause
        self.pauses: list[Pause] = []  # every pause that holds (job, tag, resource)
        self.blackouts: list[Window] = []  # the registry's maintenance windows
        self.file_windows: dict[str, list[Window]] = {}  # last good windows of each file
        self.held_until: dict[str, datetime] = {}  # run_id -> end of the window holding it
        self.resources: dict[str, int] = {}
        self.seq = 0
        self.stopping = False
        self.next_reconcile = 0.0
        self.next_watchdog: float | None = None  # monotonic; None: no watchdog asked for
        self.fleet = store.dialect == "postgresql"
        self.lease = Lease(store=store, clock=clock, node=node, boot_id=boot_id, ttl_s=lease_ttl_s, fleet=self.fleet)
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
        self.backlog: list[tuple[Job, Run]] = []  # due runs waiting to start (start limit, busy wake-up)
        self.unstored: list[Run] = []  # first occurrences left to store after READY, earliest first
        self.init_start_limit(max_starts_per_s)
        self.notify_service: Any = None  # set by the composition root; woken after each outcome
        self._skew: float | None = None  # wall minus monotonic time at the last wake-up
        self._stale_seen = 0  # the store's stale-token rejections already counted in metrics
        self.spool = Spool(Path(getattr(runner, "state_dir", ".")) / "spool.jsonl")
        self.registry_problems: list[dict[str, Any]] = []  # the last reload's file errors
        self.quarantine = Quarantine(log, metrics.quarantined, (StoreError,), self.report_problems)
        self.dbwatch = DbWatch.for_store(store, log, metrics.db_restored)

    def start(self) -> None:
        """Take the lease, load the registry, adopt orphaned runs, materialize, report READY."""
        self.acquire()
        self.log("node.acquired", node=self.node, token=self.lease.token)
        if self.fleet:
            self.lease.start_thread()
        self.reload(initial=True)
        self.set_aside()
        if self.fleet:
            self.check_versions()
        self.replay_spool()
        self.adopt()
        # load_pending has just made the invariant true; the first check comes later
        self.next_reconcile = self.clock.monotonic() + RECONCILE_EVERY_S
        self.reboot_jobs()
        self.drive_backfills()  # a backfill stored before a restart goes on
        self.notifier.ready(self.status_line())
        self.next_watchdog = policy.watchdog_ping_at(self.notifier.watchdog_interval_s, None, self.clock.monotonic())
        self.log(
            "daemon.ready", node=self.node, jobs=len(self.jobs), pending=len(self.pending), running=len(self.active)
        )

    def run_forever(self) -> None:
        """The loop: wait, then handle whatever woke us, until SIGTERM. A database error
        never ends it: the node goes offline and retries (see `offline_tick`)."""
        while not self.stopping:
            self.metrics.beat()
            self.on_wakeup(self.waker.wait(self.next_wake(), [a.handle for a in self.active.values()]))
        self.shutdown()

    def on_wakeup(self, woke: Wakeups) -> None:
        """One wake-up, online or offline; a database error takes the node offline. (The
        simulation of a fleet calls this for each of its daemons in turn.)"""
        try:
            if self.outage is None:
                self.tick(woke)
            else:
                self.offline_tick(woke)
        except StoreError as e:
            self.went_offline(e)

    def shutdown(self) -> None:
        """Stop launching; leave running jobs to finish under their supervisors."""
        self.notifier.stopping()
        self.lease.release(self.log)
        self.log(
            "daemon.stopped", running_left=len(self.active), note="running jobs continue; the next chronod adopts them"
        )

    def tick(self, woke: Wakeups) -> None:
        """Handle one wake-up: the lease first (after a stall past its ttl the outcomes
        must be written under the renewed token), children next (frees slots), then
        control, then due work. In the middle of a burst of starts, children wait (`starts_owed`)."""
        if woke.stop:
            self.stopping = True
            return
        self.keep_lease()
        if not self.starts_owed():
            self.children_exited(woke.children)  # (still readable at the next wake-up if not)
        if woke.reload:
            self.notifier.reloading()  # systemd shows "reloading" until READY=1 comes back
            self.reloads.submit(self.prepare_reload)  # off the loop's thread when threaded
        self.collect_reload()
        if woke.requests or woke.reload:
            self.take_requests()
        self.refresh_paused()
        self.run_due()
        self.store_some()
        self.drive_backfills()
        self.housekeeping()
        self.set_aside()

    def next_wake(self) -> datetime | None:
        """The earliest time anything is due (None: nothing scheduled): the next fire or
        retry, a busy wake-up's leftovers, a waiting run's deadline, the heartbeat, the
        reconciler, the outage retry and the watchdog (`policy.next_wake`)."""
        now, mono = self.clock.now(), self.clock.monotonic()
        timers = (
            (self.lease.next_heartbeat, self.next_reconcile, self.dbwatch.next_check)
            if self.outage is None
            else (self.retry_at,)
        )
        timers = (*[t for t in timers if t > 0], self.next_watchdog)
        return policy.next_wake(
            [
                self.heap[0][0] if self.heap else None,
                self.backlog_wake(now),
                now if self.unstored and self.outage is None else None,
                self.wait_deadline() if self.outage is None else None,
                *(now + timedelta(seconds=max(t - mono, 0)) for t in timers if t is not None),
            ]
        )

    def ping_watchdog(self) -> None:
        """Tell systemd the loop lives, when it is time (from the first moment after READY)."""
        mono = self.clock.monotonic()
        if self.next_watchdog is not None and mono >= self.next_watchdog:
            self.notifier.watchdog()
            self.next_watchdog = policy.watchdog_ping_at(self.notifier.watchdog_interval_s, mono, mono)

    def housekeeping(self) -> None:
        self.ping_watchdog()
        mono = self.clock.monotonic()
        if mono >= self.next_reconcile:
            self.reconcile()
        self.dbwatch.check(mono)
        self.metrics.running.set(len(self.active))
        stale = self.store.stale_rejections
        if stale > self._stale_seen:
            self.metrics.stale.inc(stale - self._stale_seen)
            self._stale_seen = stale

    def acquire(self) -> None:
        """A new lease under a new fencing token."""
        self.metrics.lease_token.set(self.lease.acquire())

    def keep_lease(self) -> None:
        """Heartbeat when it is due (every ttl/3 in a fleet), and at once after the wall clock
        was stepped: the lease expires in database (wall) time, so a step forward past the
        ttl ends it while the monotonic deadline still says it holds."""
        skew = self.clock.now().timestamp() - self.clock.monotonic()
        stepped = self._skew is not None and abs(skew - self._skew) > CLOCK_STEP_S
        self._skew = skew
        if stepped or self.lease.due():
            self.heartbeat()

    def heartbeat(self) -> None:
        """Renew the lease (database time); a lost lease means rejoin. In a fleet, also take
        over the runs of expired nodes and check which version of each job the fleet runs."""
        mono = self.clock.monotonic()
        if not self.lease.renew():
            self.lease_lost()
        if self.fleet:
            self.backfilling = True  # a backfill announced to another node may be this node's to drive
            if mono >= self.takeover_after:
                self.take_over()
            live = self.store.live_nodes()
            if mono >= self.next_version_check or live != self.live:
                self.live = live
                self.check_versions()

    # ------------------------------------------------------------------ control
    def take_requests(self) -> None:
        """Manual triggers, reloads and new backfills queued by chronoctl."""
        for req in self.store.take_requests(self.node):
            if req.kind == "reload":
                continue  # the reload already happened on this wake-up
            if req.kind == "backfill":
                self.backfilling = True  # stored by chronoctl; started by drive_backfills
                continue
            job = self.jobs.get(req.job_id or "")
            if req.kind != "trigger" or job is None:
                self.log("request.ignored", "warning", kind=req.kind, job=req.job_id)
                continue
            at = self.clock.now().replace(microsecond=0)
            asked = _instant(req.payload.get("requested_at")) or at
            rid = req.payload.get("run_id") or occurrence.manual_run_id(job.key, asked)
            run = self.make_run(job, at, trigger="manual-force" if req.payload.get("force") else "manual", rid=rid)
            run.fire_at = at
            self.store.insert_runs([run])
            self.log("run.triggered", job=job.spec.id, run=rid, force=bool(req.payload.get("force")))
            self.start_or_queue(job, run)

    def status_line(self) -> str:
        return f"{len(self.jobs)} jobs, {len(self.active)} running, node {self.node}"


def _instant(text: object) -> datetime | None:
    """An ISO-8601 time from a request's payload (None when absent or unreadable)."""
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None
