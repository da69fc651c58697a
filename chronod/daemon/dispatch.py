"""Due work: pop what fell due, apply catch-up, ownership (a fleet's `any` jobs) and the
window's holds, then hand each run to the admission (pause, overlap, resources, claim).
One wake-up's writes go to the store together (`Ledger`, `Store.commit_wakeup`).

`Dispatch` holds no state of its own: what is due comes from the `Timeline`, what to do
with it from chronod.core.policy, and what happened goes back as values to the parts
that own each piece."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

from chronod.core import blackout, policy, rescue
from chronod.core.clock import Clock
from chronod.core.model import RunState, Trigger
from chronod.daemon.admission import Admission
from chronod.daemon.fleetview import FleetView
from chronod.daemon.gate import Gate
from chronod.daemon.ledger import Ledger
from chronod.daemon.occurrences import Occurrences
from chronod.daemon.quarantine import Quarantine
from chronod.daemon.registry import Registry
from chronod.daemon.runs import Job, new_run
from chronod.daemon.seams import Log, Metrics, Waker
from chronod.daemon.starter import Starter
from chronod.daemon.startlimit import StartLimit
from chronod.daemon.timeline import Timeline
from chronod.daemon.waits import Lines, waited_in_line
from chronod.store.api import Run, Store

# an `any` occurrence still pending this long after its fire time: any node takes it
RESCUE_AFTER_S = rescue.RESCUE_AFTER_S


class Dispatch:
    """What falls due, decided per job, handed to the admission."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: Store,
        log: Log,
        metrics: Metrics,
        waker: Waker,
        quarantine: Quarantine,
        registry: Registry,
        occurrences: Occurrences,
        timeline: Timeline,
        gate: Gate,
        lines: Lines,
        ledger: Ledger,
        limit: StartLimit,
        starter: Starter,
        placement: FleetView,
        admission: Admission,
        started: float,
    ) -> None:
        self.clock, self.store, self.log, self.metrics, self.waker = clock, store, log, metrics, waker
        self.quarantine, self.registry, self.occurrences, self.timeline = quarantine, registry, occurrences, timeline
        self.gate, self.lines, self.ledger, self.limit, self.starter = gate, lines, ledger, limit, starter
        self.placement, self.admission = placement, admission
        self.started = started  # monotonic: when this chronod started (`up_since`)

    def up_since(self, now: datetime) -> datetime:
        """When this chronod started, on the wall clock as it reads now (a step of the clock
        moves it too): an occurrence due before it fell due while chronod was down, and
        meets its catch-up policy however recent it is."""
        return now - timedelta(seconds=self.clock.monotonic() - self.started)

    def run_due(self) -> None:
        """Pop everything due, decide per job with the catch-up policy, then act. The runs
        to start are claimed together at the end (one transaction per wake-up)."""
        carried = self.limit.take_backlog()
        self.ledger.open(carried)
        try:
            self.run_due_now(behind=bool(carried))
            batch = self.ledger.take()
            if batch is not None:
                self.starter.flush(batch)
            self.limit.wakeup_ended()
        finally:
            self.ledger.take()

    def run_due_now(self, behind: bool = False) -> None:
        """`behind`: this wake-up began with runs the last one could not start."""
        now = self.clock.now()
        jobs = self.registry.jobs
        by_job: dict[str, list[Run]] = {}
        held = self.lines.held() if self.lines.busy() else set()
        released: dict[str, list[Run]] = {}
        resumed: dict[str, list[Run]] = {}
        for run in self.timeline.due(now):
            rid = run.run_id
            if rid in held:
                continue
            window_over = self.timeline.take_held(rid, now)
            if window_over is None and self.held_before(run, now, jobs.get(run.job_id)):
                window_over = True
            if window_over is not None:
                if window_over:
                    released.setdefault(run.job_id, []).append(run)
                continue
            if self.waited_before(run, jobs.get(run.job_id)):
                resumed.setdefault(run.job_id, []).append(run)
                continue
            by_job.setdefault(run.job_id, []).append(run)
        # occurrences that waited in a line when the last chronod stopped: back in it, ahead
        # of what falls due now (their line's rule decides them, not the outage's catch-up),
        # and ahead of those a window held since, which fell due after them
        for job_id, runs in resumed.items():
            job = jobs.get(job_id)
            if job is not None and job_id not in self.quarantine:
                with self.quarantine.guard(job.spec, "waiting occurrences"):
                    self.admission.resume(job, sorted(runs, key=lambda r: r.scheduled_at))
        # then the occurrences a window held: the one due as the window ends queues behind
        # them (catch-up `all`) instead of starting before them
        for job_id, runs in released.items():
            job = jobs.get(job_id)
            if job is not None and job_id not in self.quarantine:
                with self.quarantine.guard(job.spec, "held occurrences"):
                    self.admission.release(job, runs, superseded=job_id in by_job)
        if self.placement.fleet and not self.waker.stop_requested and self.timeline.look_due(now):
            # older than what falls due now: a rescued occurrence starts first, and the one
            # due now meets the overlap rule behind it (never the other way round)
            self.look_for_late(now, behind)
        for job_id, runs in by_job.items():
            if self.waker.stop_requested:
                return  # SIGTERM: stored occurrences stay pending for the other nodes or the next start
            job = jobs.get(job_id)
            if job is None or job_id in self.quarantine:
                continue
            with self.quarantine.guard(job.spec, "due occurrences"):
                self.due_now(job, runs, now)
        self.admission.admit_all()

    def held_before(self, run: Run, now: datetime, job: Job | None) -> bool:
        """Whether a stored occurrence is one a window held (its row says so) and the window
        ended while no chronod could release it (it died, and this one read the row back),
        or is one this chronod does not carry (it started while the window's file was
        broken, or the window was taken out meanwhile): it fell due inside the window, not
        while chronod was down, so the window's release decides it (`Admission.release`),
        never the outage's catch-up. A window still open is found again when it falls due
        (`fall_due` holds it); an occurrence another node of a fleet owns is left to it,
        as ever."""
        if not (self.read_back_held(run, job) and (run.error or "").startswith(blackout.DEFERRED_BY)):
            return False
        assert job is not None and run.next_attempt_at is not None  # read_back_held
        return run.next_attempt_at <= now or self.gate.window_at(job.spec, now) is None

    def waited_before(self, run: Run, job: Job | None) -> bool:
        """Whether a stored occurrence is one that waited in a line (its row says so:
        `waits.waited_in_line`) that no line here holds: the chronod that put it there
        stopped, and this one read the row back. It fell due with chronod up, so its line's
        rule decides it (`Admission.resume`), never the outage's catch-up."""
        return self.read_back_held(run, job) and waited_in_line(run.error)

    def read_back_held(self, run: Run, job: Job | None) -> bool:
        """A scheduled occurrence of a job this node dispatches, still pending, whose row
        says until when something held it (`next_attempt_at`): what `held_before` and
        `waited_before` ask first."""
        return (
            job is not None
            and self.placement.owns(job)
            and run.state == RunState.PENDING
            and run.trigger == Trigger.SCHEDULE
            and run.next_attempt_at is not None
        )

    def due_now(self, job: Job, runs: list[Run], now: datetime) -> None:
        for run in runs:
            if run.state == RunState.RETRY_WAIT or run.trigger != Trigger.SCHEDULE:
                self.timeline.take(run.run_id)
                self.admission.start_or_queue(job, run)
        scheduled = [r for r in runs if r.state == RunState.PENDING and r.trigger == Trigger.SCHEDULE]
        if scheduled and not self.placement.owns(job):
            self.leave(scheduled)
        elif scheduled:
            self.fall_due(job, scheduled, now)

    def fall_due(self, job: Job, stored: list[Run], now: datetime) -> None:
        """The stored occurrence(s) fell due: add any later ones that fell due unseen (an
        outage, a stall, a clock jump), store the next one, then run or skip each."""
        for r in stored:
            self.timeline.take(r.run_id)
        extra, nxt = self.due_since(job, min(r.scheduled_at for r in stored), now)
        if len(stored) > 1:
            extra = self.between(stored, extra)
        if extra and self.lines.busy():
            # those read back waiting in a line (`resume`) are in it again: its rule decides them
            waiting = self.lines.held()
            extra = [r for r in extra if r.run_id not in waiting]
        due = sorted(stored + extra, key=lambda r: r.scheduled_at)
        hit = self.gate.holds_all(job.spec, now)
        if hit is not None:
            # inside a window a `defer` job's due occurrences are all held, before any
            # catch-up decision: the catch-up policy applies when the window ends
            self.ledger.store_runs([*extra, nxt])
            if nxt is not None:
                self.timeline.track(nxt)
            self.admission.hold(due, hit)
            self.log("runs.deferred", job=job.spec.id, count=len(due), window=hit.window.name, until=hit.end)
            return
        decision = policy.catchup(
            job.spec, [policy.Due(r.scheduled_at, r.fire_at) for r in due], now, self.up_since(now)
        )
        by_at = {r.scheduled_at: r for r in due}
        to_store: list[Run | None] = list(extra)
        if nxt is not None:
            to_store.append(nxt)
        skips = []
        for d, reason in decision.skip:
            r = by_at[d.scheduled_at]
            r.state, r.error = RunState.SKIPPED_OUTAGE, reason
            skips.append(r)
        stored_ids = {r.run_id for r in stored}
        # later occurrences (skipped ones in their terminal state) and the next one
        self.ledger.store_runs(to_store)
        for r in skips:
            if r.run_id in stored_ids:
                self.ledger.settle_quietly(r.run_id, RunState.SKIPPED_OUTAGE, r.error, nxt)
            self.metrics.runs.labels(r.job_id, RunState.SKIPPED_OUTAGE).inc()
        if skips:
            self.log(
                "runs.skipped_outage",
                job=job.spec.id,
                count=len(skips),
                first=skips[0].scheduled_at,
                last=skips[-1].scheduled_at,
            )
        if nxt is not None:
            self.timeline.track(nxt)
        runs = [by_at[d.scheduled_at] for d in decision.run]
        if job.spec.catchup == "all" and len(runs) > 1:
            self.admission.queue_backlog(job, runs)  # in scheduled order, one after another under forbid
            return
        for run in runs:
            self.admission.start_or_queue(job, run, next_run=nxt)

    def between(self, stored: list[Run], extra: list[Run]) -> list[Run]:
        """The occurrences due besides several stored ones that fall due together: those
        after the last, and those between them that have no row. An edit that made a
        schedule more frequent kept the stored occurrence of the old one that the new one
        has too, beside the new one's earlier next (`Occurrences.load`); the firing of the
        earlier one stores those between, but when both fall due in one wake-up (a crash,
        a stall, an outage) nothing else would. One with a row is someone else's to decide."""
        have, last = {r.run_id for r in stored}, max(r.scheduled_at for r in stored)
        gap = [r.run_id for r in extra if r.scheduled_at < last and r.run_id not in have]
        known = self.store.run_states(gap) if gap else {}
        return [r for r in extra if r.run_id not in have and r.run_id not in known]

    def leave(self, runs: list[Run]) -> None:
        """Another node owns the job: leave its occurrences to it, and follow none of them
        (its owner stores the next one when it claims). Look for late ones when these
        would be late (`rescue.next_look`): a dead owner's are rescued then."""
        for r in runs:
            self.timeline.take(r.run_id)
        self.timeline.look_at(max(r.fire_at for r in runs) + timedelta(seconds=RESCUE_AFTER_S))

    def look_for_late(self, now: datetime, behind: bool = False) -> None:
        """Ask the store, in one query, which occurrences are still pending
        RESCUE_AFTER_S past their fire time (their owner died, froze or fell behind), and
        take those of the jobs this node carries that it is not handling itself, through
        the catch-up policy, competing for the claim like any other node. A node that is
        behind itself (runs the last wake-up could not start, `behind`, or runs waiting for
        the start limit) or overloaded (`StartLimit.overloaded`) does not look: taking more
        work would only spread the overload (`rescue.looks`). Its own runs due in this same
        wake-up are not being behind: a fleet whose jobs fire together would otherwise put
        every rescue off until nothing of its own fell due. The node looks again when the
        next pending occurrence would be late (`rescue.next_look`)."""
        if not rescue.looks(behind or bool(self.limit.backlog), self.limit.overloaded()):
            self.timeline.looked(now + timedelta(seconds=rescue.LOOK_EVERY_S))
            return
        late, upcoming = self.store.late(rescue.late_before(now, RESCUE_AFTER_S), rescue.LOOK_LIMIT)
        self.timeline.looked(rescue.next_look(now, upcoming, RESCUE_AFTER_S))
        if not late:
            return
        jobs, held, backlog = self.registry.jobs, self.lines.held(), {r.run_id for _, r in self.limit.backlog}
        here = {
            r.run_id
            for r in late
            if r.run_id in self.timeline or r.run_id in held or r.run_id in backlog or r.run_id in self.starter
        }
        carried = {
            r.job_id: job.key
            for r in late
            if (job := jobs.get(r.job_id)) is not None
            and not job.spec.run_on.each
            and not self.placement.outvoted_here(job)
            and r.job_id not in self.quarantine
        }
        runs = rescue.to_rescue(late, here, carried)
        if runs:
            self.rescue(runs, now)

    def rescue(self, runs: list[Run], now: datetime) -> None:
        """Late occurrences of other nodes (oldest first): each job's decided together."""
        jobs = self.registry.jobs
        taken: Counter[str] = Counter()
        by_job: dict[str, list[Run]] = {}
        for r in runs:
            taken[str(self.placement.owner(r.job_id))] += 1
            by_job.setdefault(r.job_id, []).append(r)
        for job_id, due in by_job.items():
            job = jobs[job_id]
            with self.quarantine.guard(job.spec, "rescued occurrences"):
                self.rescue_job(job, sorted(due, key=lambda r: r.scheduled_at), now)
        self.metrics.rescued.inc(len(runs))
        self.log(
            "runs.rescued",
            "warning",
            count=len(runs),
            owners=",".join(f"{o}:{n}" for o, n in sorted(taken.items())),
            oldest_late_s=round(max((now - r.fire_at).total_seconds() for r in runs), 1),
        )

    def rescue_job(self, job: Job, due: list[Run], now: datetime) -> None:
        """One job's rescued occurrences (oldest first), decided together by the catch-up
        policy, as its owner would have: an older one is never started beside, or
        recorded skipped_overlap behind, a newer one rescued in the same breath."""
        at = job.schedule.next_after(due[-1].scheduled_at)
        nxt = new_run(job, at) if at is not None else None
        decision = policy.catchup(job.spec, [policy.Due(r.scheduled_at, r.fire_at) for r in due], now)
        by_at = {r.scheduled_at: r for r in due}
        owner = self.placement.owner(job.spec.id)
        for d, reason in decision.skip:
            why = reason.replace(
                "fell due while chronod could not run it",
                f"its owner {owner or 'node'} did not start it and it was rescued late",
            )
            self.ledger.settle(by_at[d.scheduled_at], RunState.SKIPPED_OUTAGE, why, nxt)
        if nxt is not None and nxt.run_id not in self.timeline:
            # its owner may be gone for good: once its lease lapses this node may own the
            # job, and the next occurrence then starts on time (otherwise it is left again)
            self.timeline.track(nxt)
        go = [by_at[d.scheduled_at] for d in decision.run]
        if len(go) > 1:
            self.ledger.store_runs([nxt])
            self.admission.queue_backlog(job, go)  # in scheduled order, one after another under forbid
            return
        for r in go:
            self.admission.start_or_queue(job, r, next_run=nxt)

    def due_since(self, job: Job, last: datetime, now: datetime) -> tuple[list[Run], Run | None]:
        """Occurrences after `last` whose fire time has passed, and the first that has not."""
        extra: list[Run] = []
        at: datetime | None = last
        while True:
            assert at is not None
            at = job.schedule.next_after(at)
            if at is None:
                return extra, None
            run = new_run(job, at)
            if run.fire_at > now:
                return extra, run
            extra.append(run)
            if len(extra) > policy.MAX_BACKLOG_RECORDS:
                # a very long outage of a very frequent job: keep the newest records only
                extra = extra[-policy.MAX_BACKLOG_RECORDS :]
                skip_to = now - timedelta(seconds=job.offset + policy.ON_TIME_GRACE_S + 1)
                at = max(at, skip_to - timedelta(seconds=1))

    def reboot_jobs(self, boot_id: str, boot_time: float) -> None:
        """@reboot jobs run once per kernel boot (boot id), not once per chronod start."""
        for job in list(self.registry.jobs.values()):
            if not job.reboot or not job.spec.enabled:
                continue
            state = self.store.get_job_state(job.key)
            if state.get("boot_id") == boot_id:
                continue
            at = datetime.fromtimestamp(int(boot_time), timezone.utc)
            run = new_run(job, at)
            run.fire_at = self.clock.now()
            self.store.insert_runs([run])
            self.store.set_job_state(job.key, {**state, "boot_id": boot_id})
            self.admission.start_or_queue(job, run)

    def trigger(self, job: Job, run_id: str, at: datetime, force: bool) -> None:
        """A manual run asked for by chronoctl at `at`: stored, then started like any other."""
        run = new_run(job, at, trigger=Trigger.MANUAL_FORCE if force else Trigger.MANUAL, rid=run_id)
        run.fire_at = at
        self.store.insert_runs([run])
        self.log("run.triggered", job=job.spec.id, run=run_id, force=force)
        self.admission.start_or_queue(job, run)
