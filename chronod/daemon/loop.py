"""The daemon loop: keep every carried job's next occurrence stored, start what falls due,
record how each run ends. Decisions come from chronod.core.policy; time only from the
injected clock; the loop sleeps until the next fire (or a signal, a child's exit, a
registry change, a heartbeat) and never polls.

`Daemon` drives objects that each own their state (wired by chronod.daemon.parts;
docs/architecture.md has the ownership table); none holds a reference to `Daemon`, and
each hands the others values, not its state:

- `Registry` (registry.py): the carried jobs, the files' last good versions, resource
  limits; a reload returns `Changes`, which the loop hands to the parts below;
- `Occurrences` (occurrences.py): the stored next occurrence of every job, the first
  ones left to store after READY, the reconciler;
- `Timeline` (timeline.py): the wake-up heap and the tracked, deferred and held runs;
- `Gate` (gate.py): pauses and maintenance windows, answering `admit` with a verdict;
- `Lines` (waits.py): catch-up queues and resource lines;
- `StartLimit` (startlimit.py): the start budget and the runs waiting for it;
- `Ledger` (ledger.py): one wake-up's writes;
- `Starter` (starter.py): the runs in flight, claims and launches;
- `Admission` (admission.py) and `Dispatch` (dispatch.py): stateless, what falls due and
  a run's way to its start;
- `Endings` (endings.py), `Recovery` (recovery.py): stateless, outcomes and retries;
  adopt, rejoin, take over;
- `Connectivity` (outage.py): database outages and the spool;
- `FleetView` (fleetview.py): placement and the fleet's versions;
- `Backfills` (backfills.py): stored backfills as their turn comes;
- `Heartbeat` (heartbeat.py): the lease (chronod.fleet.lease) and clock steps.

Their seams to the outside are Protocols in chronod.daemon.seams (runner, waker,
notifier, metrics, reloads). On PostgreSQL the node is one of a fleet (docs/fleet.md).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Callable, Mapping

from chronod.core import occurrence, policy
from chronod.core.clock import Clock
from chronod.daemon.parts import assemble
from chronod.daemon.registry import Changes
from chronod.daemon.runs import Active, Job
from chronod.daemon.seams import Accounts, Log, Metrics, Notifier, NotifyService, Reloads, Runner, Waker
from chronod.daemon.waker import Wakeups
from chronod.fleet.lease import Lease
from chronod.runner.api import Handle
from chronod.specfile import RegistryResult
from chronod.store.api import Run, Store, StoreError
from chronod.store.dbwatch import DbWatch

SQLITE_LEASE_TTL_S = 600.0


class Daemon:
    """One chronod. Built by chronod.daemon.main (the composition root)."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: Store,
        runner: Runner,
        load_registry: Callable[[], RegistryResult],
        node: str,
        metrics: Metrics,
        notifier: Notifier,
        log: Log,
        waker: Waker,
        boot_id: str,
        boot_time: float,
        lease_ttl_s: float = SQLITE_LEASE_TTL_S,
        rng: random.Random | None = None,
        reloads: Reloads | None = None,
        max_starts_per_s: float | None = None,
        notify_service: NotifyService | None = None,
        accounts: Accounts | None = None,
    ):
        self.clock, self.store, self.node, self.log = clock, store, node, log
        self.metrics, self.notifier, self.waker, self.runner = metrics, notifier, waker, runner
        self.boot_id, self.boot_time = boot_id, boot_time
        fleet = store.dialect == "postgresql"
        lease = self.lease = Lease(store=store, clock=clock, node=node, boot_id=boot_id, ttl_s=lease_ttl_s, fleet=fleet)
        parts = assemble(
            clock=clock,
            store=store,
            runner=runner,
            load_registry=load_registry,
            node=node,
            metrics=metrics,
            log=log,
            waker=waker,
            lease=lease,
            fleet=fleet,
            lease_ttl_s=lease_ttl_s,
            rng=rng or random.Random(),
            reloads=reloads,
            max_starts_per_s=max_starts_per_s,
            notify_service=notify_service,
            accounts=accounts,
        )
        self.registry, self.occurrences, self.timeline = parts.registry, parts.occurrences, parts.timeline
        self.gate, self.lines, self.limit, self.starter = parts.gate, parts.lines, parts.limit, parts.starter
        self.admission, self.dispatch, self.endings = parts.admission, parts.dispatch, parts.endings
        self.recovery, self.link, self.placement = parts.recovery, parts.link, parts.placement
        self.backfills, self.heartbeat = parts.backfills, parts.heartbeat
        self.notify_service = notify_service
        self.dbwatch = DbWatch.for_store(store, log, metrics.db_restored)
        self.stopping = False
        self.next_watchdog: float | None = None  # monotonic; None: no watchdog asked for
        self._stale_seen = 0  # the store's stale-token rejections already counted in metrics

    # ------------------------------------------------------------------ read-only views
    @property
    def jobs(self) -> Mapping[str, Job]:
        return self.registry.jobs

    @property
    def active(self) -> Mapping[str, Active]:
        return self.starter.view()

    @property
    def pending(self) -> Mapping[str, Run]:
        return self.timeline.view()

    @property
    def unstored(self) -> list[Run]:
        return self.occurrences.unstored

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        """Take the lease, load the registry, adopt orphaned runs, materialize, report READY."""
        self.recovery.acquire()
        self.log("node.acquired", node=self.node, token=self.lease.token)
        self.fence_launchers()
        if self.placement.fleet:
            self.lease.start_thread()
        self.reload(initial=True)
        # the pauses before anything may start: the backlog of a restart, a stored
        # backfill's next run and @reboot jobs meet them as every later wake-up's runs do
        self.gate.refresh()
        self.set_aside()
        if self.placement.fleet:
            self.placement.check_versions(self.jobs)
        self.link.replay_spool()
        self.recovery.adopt()
        self.occurrences.reconcile_later()  # the load has just made the invariant true
        self.dispatch.reboot_jobs(self.boot_id, self.boot_time)
        self.backfills.drive_backfills()  # a backfill stored before a restart goes on
        self.notifier.ready(self.status_line())
        self.next_watchdog = policy.watchdog_ping_at(self.notifier.watchdog_interval_s, None, self.clock.monotonic())
        self.log(
            "daemon.ready", node=self.node, jobs=len(self.jobs), pending=len(self.timeline), running=len(self.starter)
        )

    def fence_launchers(self) -> None:
        """Own the state directory under this daemon's token before settling any run: the
        launchers of an earlier chronod start nothing they still have queued (their runs
        are settled as lost or started again here), and one stuck in the middle of a start
        is killed (chronod.runner.fence)."""
        fence = getattr(self.runner, "fence", None)
        if fence is None:
            return
        killed = fence(self.lease.token)
        containment = getattr(self.runner, "containment", None)
        self.log(
            "runner.fenced",
            generation=self.lease.token,
            containment=containment.describe() if containment is not None else None,
            killed_launchers=killed or None,
        )

    def run_forever(self) -> None:
        """The loop: wait, then handle whatever woke us, until SIGTERM. A database error
        never ends it: the node goes offline and retries (see `offline_tick`)."""
        while not self.stopping:
            self.metrics.beat()
            self.on_wakeup(self.waker.wait(self.next_wake(), self.starter.handles()))
        self.shutdown()

    def on_wakeup(self, woke: Wakeups) -> None:
        """One wake-up, online or offline; a database error takes the node offline. (The
        simulation of a fleet calls this for each of its daemons in turn.)"""
        try:
            if self.link.offline:
                self.offline_tick(woke)
            else:
                self.tick(woke)
        except StoreError as e:
            self.link.went_offline(e)

    def shutdown(self) -> None:
        """Stop launching; leave running jobs to finish under their supervisors."""
        self.notifier.stopping()
        self.lease.release(self.log)
        note = "running jobs continue; the next chronod adopts them"
        self.log("daemon.stopped", running_left=len(self.starter), note=note)

    def tick(self, woke: Wakeups) -> None:
        """Handle one wake-up: the lease first (after a stall past its ttl the outcomes
        must be written under the renewed token), children next (frees slots), then
        control, then due work. In the middle of a burst of starts, children come after the
        starts owed, or wait for a later wake-up (`starts_owed`, `endings_wait`)."""
        if woke.stop:
            self.stopping = True
            return
        self.heartbeat.keep_lease()
        owed = self.limit.starts_owed()
        if not owed:
            self.children_exited(woke.children)
        if woke.reload:
            self.notifier.reloading()  # systemd shows "reloading" until READY=1 comes back
            self.registry.submit()  # off the loop's thread when threaded
        self.collect_reload()
        if woke.requests or woke.reload:
            self.take_requests()
        self.gate.refresh()
        self.dispatch.run_due()
        if owed and not self.limit.endings_wait():
            # the burst is started, or its endings waited their bound: recorded now, after
            # this wake-up's starts (before them, the last runs waited for every ending)
            self.children_exited(woke.children)  # (else still readable at the next wake-up)
        if self.occurrences.waiting():
            self.occurrences.store_some()
            if not self.occurrences.waiting():  # the first occurrences are all stored
                self.registry.reloads.tidy()
        if self.occurrences.reading() and not self.registry.reloads.busy:
            self.occurrences.read_some()
            if not self.occurrences.reading():  # what they read is kept out of collections
                self.registry.reloads.tidy()
                self.log("occurrences.read", pending=len(self.timeline))
        self.backfills.drive_backfills()
        self.housekeeping()
        self.set_aside()

    def offline_tick(self, woke: Wakeups) -> None:
        """One wake-up without the database: record endings in the spool, start due `each`
        runs, hold `any` runs back, and try to reconnect when the backoff says so."""
        if woke.stop:
            self.stopping = True
            return
        self.children_exited(woke.children)
        if woke.reload or woke.requests:
            self.link.want_reload()
        self.ping_watchdog()  # the process is healthy; the database is not
        if self.clock.monotonic() >= self.link.retry_at():
            self.reconnect()
            if not self.link.offline:
                return
        self.link.run_due_offline()

    def reconnect(self) -> None:
        """The database answers again: rejoin (renew or a new token), replay the spool,
        re-read what is stored (the runs held back fall due and go through catch-up)."""
        self.link.reconnecting()
        self.heartbeat.beat()
        self.link.store_offline_new()
        self.link.replay_spool()
        self.recovery.adopt()
        if self.link.reload_wanted(self.registry.reloads.busy):
            self.reload()
            self.link.record_removed_held()
            self.take_requests()
        self.occurrences.load()
        self.untrack_lined()
        self.occurrences.reconcile()
        self.link.reconnected()

    def children_exited(self, handles: list[Handle]) -> None:
        """Supervisors ended: record the outcomes (one transaction for the lot; in the spool
        while offline), maybe retry, then let waiting runs go. A result file is discarded
        only once recorded; a refused record keeps it for the next chronod to adopt."""
        ended = self.starter.ended(handles)
        if not ended:
            return
        if self.link.offline:
            kept = self.link.spool_outcomes(ended)
        else:
            kept = self.endings.record_outcomes([(a.job, a.run, outcome) for a, outcome in ended])
            if self.notify_service is not None:
                self.notify_service.wake()
        for active, _ in ended:
            if active.run.run_id in kept:
                self.runner.discard(active.run.run_id, active.run.attempts)
        if not self.link.offline:  # a line waits through an outage: its next start needs the store
            self.admission.admit_all()

    # ------------------------------------------------------------------ the registry
    def reload(self, initial: bool = False) -> None:
        """A reload on the loop's thread, start to end (start-up, the end of an outage)."""
        self.apply(self.registry.reload(initial))

    def collect_reload(self) -> None:
        """Swap in a reload prepared on its thread, if one finished (see `tick`)."""
        try:
            prep = self.registry.reloads.take()
        except Exception:
            self.link.want_reload()  # the end of the outage reloads again
            self.notifier.ready(self.status_line())
            raise
        if prep is None:
            return
        try:
            self.apply(self.registry.finish(prep))
        finally:
            self.notifier.ready(self.status_line())  # systemd's "reloading" ends here
        self.registry.reloads.resume()

    def apply(self, changes: Changes) -> None:
        """Hand a reload's changes to the parts that follow the jobs."""
        self.gate.set_windows(changes.windows)
        self.occurrences.cancel_removed(changes.gone)
        self.forget(changes.gone)
        for job_id in sorted(changes.gone):
            self.log("job.removed", job=job_id)
        if changes.everything:
            edited = set() if changes.initial else {j.spec.id for j in changes.changed}
            self.occurrences.load(edited=edited, checked=changes.checked)
        elif changes.changed:
            self.occurrences.load(list(changes.changed))
        self.untrack_lined()
        self.registry.mark_checked()  # every stored occurrence agrees with these definitions
        self.placement.recheck()
        if not changes.initial:
            self.log("registry.reloaded", jobs=len(self.jobs), errors=changes.errors)
            self.notifier.status(self.status_line())

    def untrack_lined(self) -> None:
        """The runs waiting in a line are the line's: a load that read them back from the
        store (a reconnect, a reload) must not track a second copy. One of a retry waiting
        for a slot stayed `retry_wait` after the line had started the retry, and under
        forbid the job's next occurrences were skipped behind it."""
        if self.lines.busy():
            for run_id in self.lines.held():
                self.timeline.take(run_id)

    def set_aside(self) -> None:
        """Quarantined jobs leave the schedule (their history and stored rows stay)."""
        self.forget(self.registry.set_aside())

    def forget(self, job_ids: frozenset[str] | list[str]) -> None:
        """Jobs removed or set aside: their tracked occurrences and their places in line go."""
        self.occurrences.forget(job_ids)
        for job_id in job_ids:
            self.lines.forget(job_id)

    def reconcile(self) -> None:
        self.occurrences.reconcile()

    # ------------------------------------------------------------------ control
    def take_requests(self) -> None:
        """Manual triggers, reloads and new backfills queued by chronoctl."""
        for req in self.store.take_requests(self.node):
            if req.kind == "reload":
                continue  # the reload already happened on this wake-up
            if req.kind == "backfill":
                self.backfills.look()  # stored by chronoctl; started by drive_backfills
                continue
            job = self.jobs.get(req.job_id or "")
            if req.kind != "trigger" or job is None:
                self.log("request.ignored", "warning", kind=req.kind, job=req.job_id)
                continue
            at = self.clock.now().replace(microsecond=0)
            asked = _instant(req.payload.get("requested_at")) or at
            rid = req.payload.get("run_id") or occurrence.manual_run_id(job.key, asked)
            self.dispatch.trigger(job, str(rid), at, force=bool(req.payload.get("force")))

    # ------------------------------------------------------------------ timers
    def next_wake(self) -> datetime | None:
        """The earliest time anything is due (None: nothing scheduled): the next fire or
        retry, a busy wake-up's leftovers, a waiting run's deadline, the heartbeat, the
        reconciler, the outage retry and the watchdog (`policy.next_wake`)."""
        now, mono = self.clock.now(), self.clock.monotonic()
        online = not self.link.offline
        timers = (
            (self.lease.next_heartbeat, self.occurrences.reconcile_at(), self.dbwatch.next_check)
            if online
            else (self.link.retry_at(),)
        )
        ticks = [*[t for t in timers if t > 0], self.next_watchdog]
        return policy.next_wake(
            [
                self.timeline.earliest(),
                self.limit.backlog_wake(now),
                self.occurrences.store_at(now) if online else None,
                self.occurrences.read_at(now) if online and not self.registry.reloads.busy else None,
                self.occurrences.reconcile_slice_at(now) if online else None,
                self.lines.deadline(self.jobs) if online else None,
                *(now + timedelta(seconds=max(t - mono, 0)) for t in ticks if t is not None),
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
        if mono >= self.occurrences.reconcile_at() or self.occurrences.reconciling():
            self.occurrences.reconcile_some()  # a slice a wake-up
        self.dbwatch.check(mono)
        self.metrics.running.set(len(self.starter))
        stale = self.store.stale_rejections
        if stale > self._stale_seen:
            self.metrics.stale.inc(stale - self._stale_seen)
            self._stale_seen = stale

    def status_line(self) -> str:
        return f"{len(self.jobs)} jobs, {len(self.starter)} running, node {self.node}"


def _instant(text: object) -> datetime | None:
    """An ISO-8601 time from a request's payload (None when absent or unreadable)."""
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None
