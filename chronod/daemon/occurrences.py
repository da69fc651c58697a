"""Every carried job's next occurrence, stored and tracked: read the stored ones (at
start-up, after a reload changed jobs, after an outage), store the first ones of new jobs
(those that fire soon before READY, the rest a slice per wake-up), and repair that
invariant when it breaks (`reconcile`).

`Occurrences` alone holds the first occurrences left to store after READY, the stored ones
left to read after it and when the reconciler runs next; the occurrences it reads or makes
go to the `Timeline`.

A warm start (its stored occurrences trusted as stored: `Registry.prepare`'s `checked`)
reads before READY every waiting run but the pending scheduled occurrences that fire more
than STORE_AHEAD_S ahead, and the job keys of those (`Store.pending_soon`); it reads them
after READY, READ_SLICE a wake-up in fire order (`read_some`, `Store.pending_later`), by
the rule of the first occurrences' slices (none within STORE_CLEAR_S of a tracked fire; a
loop that fell behind reads on until what fires within STORE_AHEAD_S / 10 is read). What
depends on "every stored occurrence is known" stays right meanwhile:

- A job with an unread occurrence gets no second one: the start counts it as having its
  next stored (the keys), and its next occurrence is that one (checked against these very
  definitions; none is edited at a start), so the start computes none for it. Nothing
  else stores a job's next occurrence but the firing of its tracked one, the reconciler
  and a reload that changed the job, and those two read the store, not the timeline.
- A reload that changed a few jobs reads their stored occurrences from the store at once
  (`load(only)`): cancelled ones are no longer waiting, and a slice does not track again
  what is tracked already (by run id). A slice tracks only the runs of carried jobs under
  their current key: a job removed or set aside is skipped (a removed job's rows were
  cancelled with its definition). A full load (a reload that changed most jobs, the end
  of an outage) reads everything and leaves nothing to read.
- The reconciler reads the store, and first reads what is left (as it first stores the
  first occurrences left). The retries, backfills, manual runs and held occurrences are
  all read before READY: only plain future occurrences wait, which nothing asks about but
  their own firing. Their fire times are stored as computed with these definitions.
- The notifier and `chronoctl status` read the store, never the timeline.
- One gap: a database lost in the second or so of the slices leaves the occurrences not
  read yet unknown while it is down, so those that fall due then (more than STORE_AHEAD_S
  after the start) are not started offline; the reconnect reads them and they go through
  the catch-up like those of any outage's `any` jobs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from chronod.core import policy
from chronod.core.clock import Clock
from chronod.core.model import RunState, Trigger
from chronod.core.occurrence import First
from chronod.daemon.gate import Gate
from chronod.daemon.ledger import retry_given_up
from chronod.daemon.quarantine import Quarantine
from chronod.daemon.registry import Registry
from chronod.daemon.runs import Job, new_run
from chronod.daemon.seams import Log, Metrics
from chronod.daemon.startlimit import StartLimit
from chronod.daemon.timeline import Timeline
from chronod.fleet.lease import Lease
from chronod.store.api import Run, Store

RECONCILE_EVERY_S = 300.0
# First occurrences are stored before READY only when they fire this soon; the others are
# stored after it, earliest first, STORE_SLICE a wake-up (100,000 new jobs no longer hold
# the start-up for their inserts, and no wake-up holds firing for long: an occurrence due
# while a slice is stored waits for it, and slices of 1,000 took 0.3-0.8 s beside the
# notifier's first round on a loaded machine).
STORE_AHEAD_S = 60.0
STORE_SLICE = 200
# ...and no slice starts this close before a tracked occurrence's fire time: it waits until
# that one has started (on a loaded machine a slice takes 0.1-0.3 s)
STORE_CLEAR_S = 0.25
# A warm start (its stored occurrences trusted as stored) reads before READY those that fire
# within STORE_AHEAD_S, the others after it, READ_SLICE a wake-up, by the same rule (a slice
# of 2,000 took 20-30 ms of CPU and up to 0.3-0.4 s on a machine at load 10: the
# `@every 1s` job of bench_startup.py started that late; 500 kept it within 15 ms)
READ_SLICE = 500
# The reconciler's check, every RECONCILE_EVERY_S, reads the stored occurrences READ_SLICE a
# wake-up too, by the same rule: read at once, the 100,000 of as many jobs held the loop
# 2.7 s (1.3 s of CPU at load 10), and the `@every 1s` job beside them was skipped twice.
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # (before every stored fire time)
RECONCILE_RETRY_S = 1.0  # a check due while the slices after READY go on waits this long


class Occurrences:
    """The stored next occurrences of the carried jobs."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: Store,
        node: str,
        lease: Lease,
        log: Log,
        metrics: Metrics,
        quarantine: Quarantine,
        registry: Registry,
        timeline: Timeline,
        gate: Gate,
        limit: StartLimit,
    ) -> None:
        self.clock, self.store, self.node, self.lease, self.log = clock, store, node, lease, log
        self.metrics, self.quarantine, self.registry = metrics, quarantine, registry
        self.timeline, self.gate, self.limit = timeline, gate, limit
        self._unstored: list[Run] = []  # first occurrences left to store after READY, earliest first
        # the stored occurrences left to read after READY: the pending scheduled ones that
        # fire after `[0]`, from the one after `[1]` (fire time, run id; None: from the first)
        self._unread: tuple[datetime, tuple[datetime, str] | None] | None = None
        self._next_reconcile = 0.0  # monotonic
        # a check in progress (`reconcile_some`): the keys of the jobs whose stored next
        # occurrence it has not read yet, and where its read goes on (None: from the first)
        self._unseen: set[str] | None = None
        self._seen_to: tuple[datetime, str] | None = None

    @property
    def unstored(self) -> list[Run]:
        """The first occurrences left to store (a copy)."""
        return list(self._unstored)

    def reconcile_at(self) -> float:
        """When (monotonic) the reconciler runs next (0: not scheduled yet)."""
        return self._next_reconcile

    def reconcile_later(self) -> None:
        """The invariant was just made true: the first check comes RECONCILE_EVERY_S later."""
        self._next_reconcile = self.clock.monotonic() + RECONCILE_EVERY_S

    def forget(self, job_ids: frozenset[str] | list[str]) -> None:
        """Jobs removed or set aside: their tracked occurrences go (the rows stay)."""
        self.timeline.drop(job_ids)

    def cancel_removed(self, job_ids: frozenset[str]) -> None:
        """Jobs removed from the registry. Storing the definitions (a reload's preparation,
        off the loop's thread) cancelled their waiting rows, but the loop may have stored
        one since, before the swap (the next occurrence, written with a start): cancel
        what is still tracked, then forget them. A row cancelled already is left as it is;
        so is a job the store still carries (another node of a fleet defines it). A run
        waiting for its retry keeps its last attempt's outcome, as the store's own cancel."""
        removed = {j for j in job_ids if (row := self.store.get_job(j)) is None or row.removed_at is not None}
        why = policy.REMOVED_FROM_REGISTRY
        for run in [r for r in self.timeline.runs() if r.job_id in removed]:
            state, error = (
                retry_given_up(self.store, run, None, why)
                if run.state == RunState.RETRY_WAIT
                else (RunState.CANCELLED, why)
            )
            self.store.settle(run.run_id, state, error=error, next_run=None, node=self.node, token=self.lease.token)
        self.forget(job_ids)

    def load(self, only: list[Job] | None = None, edited: set[str] | None = None, checked: bool = False) -> None:
        """Read stored pending occurrences of carried jobs (or of the jobs in `only`, whose
        definitions changed); drop ones whose schedule changed. `edited`: the job ids whose
        definitions this reload changed, when `only` is not given. `checked`: the stored
        occurrences were checked against these very definitions before (and none was
        written since), so none is checked again (`Registry.prepare`)."""
        if only is None:
            keys = {j.key: j for j in self.registry.jobs.values()}
            self.timeline.reset()
            self.limit.drop()
            self._unstored = []
            self._unread = None
        else:
            keys = {j.key: j for j in only}
            ids = {j.spec.id for j in only}
            self.timeline.drop(ids, entries=True)
            self.limit.drop(ids)
            self._unstored = [r for r in self._unstored if r.job_id not in ids]
        have: dict[str, datetime] = {}  # job key -> its earliest stored scheduled occurrence
        ahead: dict[str, datetime] = {}  # ... of those yet to fall due
        if only is None and checked and not edited:
            # trusted as stored: those firing soon now, the others after READY (`read_some`)
            until = self.clock.now() + timedelta(seconds=STORE_AHEAD_S)
            stored, unread = self.store.pending_soon(until)
            self._unread = (until, None) if unread else None
            have = dict.fromkeys(unread, until)  # (a later one's time is never compared: nothing is edited)
        else:
            stored = self.store.pending(list(keys))
        tracked: list[Run] = []
        now = self.clock.now()
        for run in stored:
            job = keys.get(run.job_key)
            if job is None:
                continue
            if (
                not checked
                and run.state == RunState.PENDING
                and run.trigger == Trigger.SCHEDULE
                and not self.still_scheduled(job, run)
            ):
                held = self.was_held(job, run)  # it fell due and a window held it
                self.store.settle(
                    run.run_id,
                    RunState.SKIPPED_BLACKOUT if held else RunState.CANCELLED,
                    error="deferred by a maintenance window; the schedule changed before the window ended"
                    if held
                    else "schedule changed before it fell due",
                    next_run=None,
                    node=self.node,
                    token=self.lease.token,
                )
                continue
            if run.state == RunState.PENDING and run.trigger != Trigger.BACKFILL:
                run.fire_at = run.scheduled_at + timedelta(seconds=job.offset)  # a backfill's is when it started
                if run.trigger == Trigger.SCHEDULE:
                    at = have.get(run.job_key)
                    if at is None or run.scheduled_at < at:
                        have[run.job_key] = run.scheduled_at
                    # the job's next stored occurrence: not one that fell due already (a
                    # window holds it, or it waits in a line), which an edit's next never follows
                    at = ahead.get(run.job_key)
                    if run.fire_at > now and (at is None or run.scheduled_at < at):
                        ahead[run.job_key] = run.scheduled_at
            tracked.append(run)
        self.timeline.track_all(tracked)
        fresh: list[Run] = []
        edited = {j.spec.id for j in only} if only is not None else (edited or set())
        for job in keys.values():
            first = job.take_first()  # what the load computed, taken or let go of
            if job.key in have and job.spec.id not in edited:
                continue  # (asked first: at a start, of 100,000 jobs with their next stored)
            if job.reboot or not job.spec.enabled:
                continue
            nxt = self.first_run(job, first, now)
            # an edited schedule may keep a stored occurrence beyond its own next one (at :30
            # hourly edited at :10 to every 15 minutes): the :15 must not be skipped
            if nxt is not None and (job.key not in ahead or nxt.scheduled_at < ahead[job.key]):
                fresh.append(nxt)
        if fresh:
            later = self.clock.now() + timedelta(seconds=STORE_AHEAD_S)
            soon = [r for r in fresh if r.fire_at <= later]
            self._unstored = sorted(self._unstored + [r for r in fresh if r.fire_at > later], key=_fire_order)
            self.store_fresh(soon)
        self.timeline.rehold()

    def was_held(self, job: Job, run: Run) -> bool:
        """Whether a stored pending occurrence is one a window holds (or held before a
        restart): its time has come and a window of the job covered it."""
        if self.timeline.was_held(run.run_id):
            return True
        if job.spec.blackout != "defer" or run.fire_at > self.clock.now():
            return False
        return self.gate.window_at(job.spec, run.fire_at) is not None

    def store_fresh(self, runs: list[Run]) -> None:
        """Store and track new first occurrences."""
        if runs and self.store.insert_runs(runs) < len(runs):
            # a job removed and added back before its next occurrence: that occurrence
            # was cancelled with the removal and must not be lost
            self.store.revive(r.run_id for r in runs)
        for r in runs:
            self.timeline.track(r)

    def store_at(self, now: datetime) -> datetime | None:
        """When the loop stores the next slice (None: nothing left to store): now, unless
        a tracked occurrence fires within STORE_CLEAR_S; then at its fire time, after it."""
        return self._clear(now) if self._unstored else None

    def _clear(self, now: datetime) -> datetime:
        """When a slice may run: now, unless a tracked occurrence fires within
        STORE_CLEAR_S; then at its fire time, after it."""
        due = self.timeline.earliest()
        if due is not None and now < due <= now + timedelta(seconds=STORE_CLEAR_S):
            return due
        return now

    def store_some(self, everything: bool = False) -> None:
        """Store the next slice of the first occurrences left for after READY (earliest
        first), when its time has come (`store_at`); the loop wakes again for the next one
        while some are left (`waiting`)."""
        now = self.clock.now()
        if not everything and self.store_at(now) != now:
            return
        soon = now + timedelta(seconds=STORE_AHEAD_S / 10)
        jobs = self.registry.jobs
        while self._unstored:
            n = len(self._unstored) if everything else STORE_SLICE
            while n < len(self._unstored) and self._unstored[n].fire_at <= soon:
                n += 1  # a loop that fell behind stores at least what fires next
            part, self._unstored = self._unstored[:n], self._unstored[n:]
            self.store_fresh([r for r in part if r.job_id in jobs and jobs[r.job_id].key == r.job_key])
            if not everything:
                return

    def waiting(self) -> bool:
        """Whether first occurrences are left to store."""
        return bool(self._unstored)

    def reading(self) -> bool:
        """Whether stored occurrences are left to read (a warm start's, after READY)."""
        return self._unread is not None

    def read_at(self, now: datetime) -> datetime | None:
        """When the loop reads the next slice of stored occurrences (None: all are read),
        by the rule of `store_at`."""
        return self._clear(now) if self._unread is not None else None

    def read_some(self, everything: bool = False) -> None:
        """Read the next READ_SLICE stored occurrences left for after READY (in fire order)
        and track those of carried jobs not tracked yet, when its time has come (`read_at`);
        a loop that fell behind reads on until what fires soon is read."""
        now = self.clock.now()
        if self._unread is None or (not everything and self.read_at(now) != now):
            return
        soon = now + timedelta(seconds=STORE_AHEAD_S / 10)
        jobs, timeline = self.registry.jobs, self.timeline
        until, after = self._unread
        while True:
            page = self.store.pending_later(until, after, READ_SLICE + 1)  # (one more: is this the last?)
            more, page = len(page) > READ_SLICE, page[:READ_SLICE]
            for run in page:
                job = jobs.get(run.job_id)
                # (a reload that changed the job read its stored occurrences already)
                if job is not None and job.key == run.job_key and run.run_id not in timeline:
                    timeline.track(run)
            if not more:
                self._unread = None
                return
            after = (page[-1].fire_at, page[-1].run_id)
            self._unread = (until, after)
            if not everything and page[-1].fire_at > soon:
                return

    def still_scheduled(self, job: Job, run: Run) -> bool:
        if not job.spec.enabled or job.reboot:
            return False
        with self.quarantine.guard(job.spec, "stored occurrences"):
            return job.schedule.next_after(run.scheduled_at - timedelta(seconds=1)) == run.scheduled_at
        return True  # the job is set aside; its stored rows stay as they are

    def first_run(self, job: Job, first: First | None, now: datetime) -> Run | None:
        """The first occurrence whose fire time is after `now`: the one the load computed
        where the job's file was validated (`Job.take_first`) when it holds at `now`, else
        computed here."""
        if first is None or not first.holds_at(self.node, now):
            return self.next_run(job, now)
        return None if first.scheduled_at is None else new_run(job, first.scheduled_at, rid=first.run_id)

    def next_run(self, job: Job, after: datetime) -> Run | None:
        """The first occurrence whose fire time is after `after`, as a pending Run."""
        return self.quarantine.call(job.spec, "next occurrence", _next_run, job, after)

    def reconcile(self) -> None:
        """Check the invariant 'every enabled job has its next occurrence stored'; repair.
        At once, start to end (the end of an outage, tests); the loop's periodic check
        goes a slice a wake-up (`reconcile_some`)."""
        self.reconcile_later()
        self.store_some(everything=True)  # what is left for after READY is not missing
        self.read_some(everything=True)
        self._unseen = self._seen_to = None
        self.repair(list(self.registry.jobs.values()))

    def reconciling(self) -> bool:
        """Whether a check is in progress (`reconcile_some`)."""
        return self._unseen is not None

    def reconcile_slice_at(self, now: datetime) -> datetime | None:
        """When the loop reads the check's next slice (None: no check in progress), by the
        rule of `store_at`."""
        return self._clear(now) if self._unseen is not None else None

    def reconcile_some(self) -> None:
        """The periodic check, a slice a wake-up: the first call starts it, once the slices
        after READY are done (`reconcile` stores and reads what they left first); each reads the
        next READ_SLICE stored scheduled occurrences in fire order, from the check's start on,
        when its time has come (`reconcile_slice_at`), and crosses their jobs off, until none
        is left to cross off. A job's occurrence that fires meanwhile leaves its next one after
        it in that order, so a job crossed off by none had none stored when the read passed,
        or only occurrences that fired before the check began (they wait in a line or a
        window: a month-long backlog holds thousands, which the read no longer passes over);
        those few are read again and repaired at the end (`repair`) if nothing is stored
        for them at all, on this thread, as a check at once would."""
        now = self.clock.now()
        if self._unseen is None:
            if self._unstored or self._unread is not None:
                # the slices after READY are not over (a slow machine): they keep the
                # invariant meanwhile, and storing or reading all that is left at once
                # held the loop for seconds; the check starts once they are done
                self._next_reconcile = self.clock.monotonic() + RECONCILE_RETRY_S
                return
            self.reconcile_later()
            # (a disabled or @reboot job has no next occurrence to store: `repair`)
            self._unseen = {j.key for j in self.registry.jobs.values() if j.spec.enabled and not j.reboot}
            self._seen_to = (now, "")  # from the occurrences that fire now on
        if self._clear(now) != now:
            return
        page = self.store.pending_later(EPOCH, self._seen_to, READ_SLICE + 1)  # (one more: is this the last?)
        more, page = len(page) > READ_SLICE, page[:READ_SLICE]
        self._unseen.difference_update(r.job_key for r in page)
        if more and self._unseen:  # (every job crossed off: the rest of the read changes nothing)
            self._seen_to = (page[-1].fire_at, page[-1].run_id)
            return
        unseen, self._unseen, self._seen_to = self._unseen, None, None
        self.repair([j for j in self.registry.jobs.values() if j.key in unseen])

    def repair(self, jobs: list[Job]) -> None:
        """Store the next occurrence of those of `jobs` (enabled, not @reboot) that have
        none stored, read from the store now."""
        jobs = [j for j in jobs if j.spec.enabled and not j.reboot]
        stored = {
            r.job_key
            for r in (self.store.pending([j.key for j in jobs]) if jobs else [])
            if r.state == RunState.PENDING and r.trigger == Trigger.SCHEDULE
        }
        missing = [j for j in jobs if j.key not in stored]
        self.metrics.without_next.set(len(missing))
        if not missing:
            return
        runs = [r for r in (self.next_run(j, self.clock.now()) for j in missing) if r is not None]
        self.store.insert_runs(runs)
        for r in runs:
            self.timeline.track(r)
        self.metrics.repairs.inc(len(runs))
        self.log(
            "reconcile.repaired",
            "warning",
            definitions_without_next_timer=len(missing),
            jobs=",".join(j.spec.id for j in missing[:20]),
        )


def _next_run(job: Job, after: datetime) -> Run | None:
    at = job.schedule.next_after(after - timedelta(seconds=job.offset))
    return None if at is None else new_run(job, at)


def _fire_order(run: Run) -> tuple[datetime, str]:
    return (run.fire_at, run.run_id)
