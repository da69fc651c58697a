"""A run's way to its start: pauses and windows (the `Gate`'s answer), the overlap rule,
the catch-up line, the resource's line, the fleet's version, the account's check (a
locked or expired account: `chronod.core.accounts`), then the claim (`Starter`).

`Admission` holds no state of its own: it asks the parts that own it and acts on their
answers (values from chronod.core.policy, chronod.daemon.gate and chronod.daemon.waits).
"""

from __future__ import annotations

from datetime import timedelta

from chronod.core import accounts, blackout, policy
from chronod.core.clock import Clock
from chronod.core.durations import format_duration
from chronod.core.model import JobSpec, RunState, Trigger
from chronod.daemon.fleetview import FleetView
from chronod.daemon.gate import Gate, Hold, Skip, Start, Wait
from chronod.daemon.ledger import Ledger, retry_given_up
from chronod.daemon.registry import Registry
from chronod.daemon.runs import Job
from chronod.daemon.seams import Accounts, Log
from chronod.daemon.starter import Starter
from chronod.daemon.timeline import Timeline
from chronod.daemon.waits import QUEUED, Lines, slot_since
from chronod.fleet.lease import Lease
from chronod.store.api import Run, RunLedger


class Admission:
    """Start, queue, hold or skip one run; let the lines move."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: RunLedger,
        node: str,
        lease: Lease,
        log: Log,
        registry: Registry,
        timeline: Timeline,
        gate: Gate,
        lines: Lines,
        ledger: Ledger,
        starter: Starter,
        placement: FleetView,
        accounts: Accounts,
    ) -> None:
        self.clock, self.store, self.node, self.lease, self.log = clock, store, node, lease, log
        self.registry, self.timeline, self.gate, self.lines = registry, timeline, gate, lines
        self.ledger, self.starter, self.placement = ledger, starter, placement
        self.accounts = accounts

    def start_or_queue(self, job: Job, run: Run, next_run: Run | None = None) -> None:
        """Apply pause, overlap and resource limits, then dispatch and launch."""
        spec = job.spec
        if run.trigger == Trigger.SCHEDULE and self.holds_back(job, run, next_run):
            return
        running = self.starter.running(spec.id)
        waiting_retry = self.timeline.retrying(spec.id)
        draining = self.lines.draining(spec.id, self.starter.going_ids(spec.id) | {r.run_id for r in waiting_retry})
        action, retries = self.overlap(spec, run, draining)
        behind = self.waits_behind(spec, run, action, retries)
        if behind is not None:
            # the schedule comes first: a backfill or manual run never makes a scheduled
            # occurrence skip; it waits its turn (inside its catch-up window), and the
            # backfill's next run waits for it (`Backfills`)
            self.ledger.store_runs([next_run])
            self.lines.wait_behind(job, run, behind)
            self.note_line(job, run)
            self.log("run.waiting", job=spec.id, run=run.run_id, behind=behind)
            self.drain_queue(spec.id)
            return
        if action == policy.Overlap.QUEUE:
            self.ledger.store_runs([next_run])  # the chain must not wait for the queue
            run.error = QUEUED  # chronod was up when it fell due (`expiry`)
            self.note_line(job, run)
            self.queue_backlog(job, [run])
            return
        if action == policy.Overlap.SKIP:
            starting = self.starter.going_runs(spec.id)
            prev = (
                f"previous run {running[0].run.run_id}"
                if running
                else f"previous run {starting[0].run_id}, started in the same instant, is"
                if starting
                else f"previous run {retries[0].run_id} (waiting to start attempt {retries[0].attempts + 1}) is"
                if retries
                else "a previous run started just now"
            )
            self.ledger.settle(run, RunState.SKIPPED_OVERLAP, f"{prev} still running; overlap: forbid", next_run)
            return
        if action == policy.Overlap.REPLACE:
            self.starter.cancel(running, by=run)
        self.to_slot(job, run, next_run)

    def waits_behind(self, spec: JobSpec, run: Run, action: policy.Overlap, retries: list[Run]) -> str | None:
        """What a scheduled occurrence waits for instead of being skipped (None: the overlap
        rule applies as it is): under `forbid`, the backfill or manual runs going when it
        falls due (`retries`: those waiting for their next attempt count) while none of its
        schedule's runs is; or, with nothing going, the older scheduled occurrences still
        waiting their turn behind such a run. While a scheduled run is going, `forbid`
        skips as ever (the record names that run)."""
        if run.trigger != Trigger.SCHEDULE or spec.overlap == "allow":
            return None
        if action == policy.Overlap.SKIP:
            ahead = self.starter.going_runs(spec.id) + retries
            if ahead and all(r.trigger != Trigger.SCHEDULE for r in ahead):
                return f"{ahead[0].trigger} run {ahead[0].run_id}"
            return None
        if action == policy.Overlap.START:
            return self.lines.yielding(spec.id)
        return None

    # ------------------------------------------------------------------ pauses and windows
    def holds_back(self, job: Job, run: Run, next_run: Run | None, pauses: bool = True) -> bool:
        """Apply a pause or a window to a scheduled occurrence about to start; True when it
        does not start now (settled, or held until the window ends)."""
        verdict = self.gate.admit(job.spec, run, self.clock.now(), pauses)
        if isinstance(verdict, Start):
            return False
        if isinstance(verdict, Skip) and run.state == RunState.RETRY_WAIT and verdict.state == RunState.SKIPPED_PAUSED:
            self.give_up_retry(job, run, verdict.reason, next_run)
        elif isinstance(verdict, Skip):
            self.ledger.settle(run, verdict.state, verdict.reason, next_run)
        elif isinstance(verdict, Wait):
            hit = verdict.hit
            run.next_attempt_at = hit.end  # a retry waits for the window's end, whatever the policy
            self.timeline.track(run)
            self.log("run.held", job=run.job_id, run=run.run_id, window=hit.window.name, until=hit.end)
        elif isinstance(verdict, Hold):
            hit = verdict.hit
            self.ledger.store_runs([next_run])  # the chain does not wait for the window
            # the occurrences queued behind it in its job's line are held with it, at once:
            # each would be held in its turn, one a wake-up, saying meanwhile that an earlier
            # window still holds it
            behind = self.lines.take_scheduled(job.spec.id)
            self.hold([run, *behind], hit)
            self.log(
                "run.deferred",
                job=run.job_id,
                run=run.run_id,
                window=hit.window.name,
                until=hit.end,
                behind=len(behind),
            )
        return True

    def give_up_retry(self, job: Job, run: Run, pause: str, next_run: Run | None) -> None:
        """A pause set after the occurrence fell due holds its retry: it did not fall due
        while paused, so not skipped_paused; its last attempt's outcome (failed or
        timed_out) is its record, and the error says which retry the pause kept from
        starting (`chronoctl backfill --only failed` runs it again after the resume). So
        is that of a retry that got no slot of its resource (`admit`)."""
        state, error = retry_given_up(self.store, run, job.spec.retry.attempts, pause)
        self.ledger.settle(run, state, error, next_run)

    def hold(self, runs: list[Run], hit: blackout.Hit) -> None:
        """Hold due occurrences until the window ends; their rows say so (for the audit:
        "deferred by window NAME (reason) until T"), the ones still to be stored included."""
        why = hit.deferral()
        for run in runs:
            run.error, run.next_attempt_at = why, hit.end
            self.timeline.hold(run, hit.end)
        self.store.note_held([r.run_id for r in runs], why, hit.end, node=self.node, token=self.lease.token)

    def release(self, job: Job, runs: list[Run], superseded: bool = False) -> None:
        """Occurrences held by a window that has ended: run once (catch-up `latest`), each
        in turn (`all`), or none (`none`); the others are recorded skipped_blackout. When an
        occurrence of the job fell due as the window ended (`superseded`), that one is the
        run once, unless the policy is `all`: then it runs after the held ones, in
        scheduled order (the caller releases before it lets the new occurrence fall due)."""
        for r in runs:
            self.timeline.take(r.run_id)
        # a window that outlasted an occurrence's catch-up window: it never starts (as a
        # backlog would not), and its record says the window held it, not a busy node
        now, window_s = self.clock.now(), job.spec.catchup_window_s
        late = [r for r in runs if (now - r.fire_at).total_seconds() > window_s]
        for r in late:
            ended = r.next_attempt_at  # the window's end, as the hold recorded it
            outlasted = ended is None or (ended - r.fire_at).total_seconds() > window_s
            why = (r.error + "; " if r.error and r.error.startswith(blackout.DEFERRED_BY) else "") + (
                f"the window outlasted catchup_window_s={window_s}"
                if outlasted
                else f"chronod could not run it when the window ended, and catchup_window_s={window_s} ran out"
            )
            self.ledger.settle(r, RunState.SKIPPED_BLACKOUT, why, None)
        runs = [r for r in runs if r not in late]
        if not runs:
            return
        go, skip = blackout.release(job.spec.catchup, [r.scheduled_at for r in runs])
        if superseded and job.spec.catchup == "latest":
            go, skip = [], sorted([*go, *skip])
        by_at = {r.scheduled_at: r for r in runs}
        for at in skip:
            why = "deferred by a maintenance window; "
            if go:
                why += f"catchup: latest released the occurrence of {blackout.stamp(go[-1])}"
            elif superseded and job.spec.catchup == "latest":
                why += "the occurrence due as the window ended ran in its place"
            else:
                why += "catchup: none"
            self.ledger.settle(by_at[at], RunState.SKIPPED_BLACKOUT, why, None)
        if len(go) > 1 or (go and superseded):
            # in scheduled order, one after another under forbid; the occurrence due as the
            # window ended waits behind them (`start_or_queue` finds the line draining)
            self.queue_backlog(job, [by_at[at] for at in go])
        elif go:
            self.start_or_queue(job, by_at[go[0]])

    def resume(self, job: Job, runs: list[Run]) -> None:
        """Occurrences whose rows say they waited in a line when the last chronod stopped
        (`waits.waited_in_line`): they fell due with chronod up, so they go back into their
        line, and its rule decides them (their turn, or their catch-up window ran out),
        never the outage's catch-up. Both lines move at the end of the wake-up
        (`admit_all`): the job's occurrences read back unmarked (they fell due while
        chronod was down) join the catch-up line first, in scheduled order, an older one
        before them; and a resource's free slots go to the runs that waited longest, once
        every job's are back in its line (admitted job by job, the first job read took them
        all, ahead of an older run of another job)."""
        for r in runs:
            self.timeline.take(r.run_id)
        slot = [r for r in runs if (r.error or "").startswith(blackout.WAITING_FOR)]
        queued = [r for r in runs if not (r.error or "").startswith(blackout.WAITING_FOR)]
        if queued:
            self.lines.queue(job, queued)
        first = min((r.scheduled_at for r in queued if r.error == QUEUED), default=None)
        for r in slot:
            if job.spec.resource:
                # one older than those queued behind the backlog was their line's head: the
                # line waits for it again
                self.lines.wait_for_slot(job, r, from_line=first is not None and r.scheduled_at < first)
            else:
                self.to_slot(job, r, None)

    # ------------------------------------------------------------------ the lines
    def note_line(self, job: Job, run: Run) -> None:
        """A scheduled occurrence left waiting in its job's catch-up line: its row says so
        (run.error, as set) and until when it may still start, as a resource's wait does."""
        until = run.fire_at + timedelta(seconds=job.spec.catchup_window_s)
        run.next_attempt_at = until
        self.store.note_held([run.run_id], run.error or QUEUED, until, node=self.node, token=self.lease.token)

    def queue_backlog(self, job: Job, runs: list[Run]) -> None:
        """Put occurrences in the job's catch-up line, in scheduled order, then let it drain."""
        self.lines.queue(job, runs)
        self.drain_queue(job.spec.id)

    def drain_queue(self, job_id: str, slot_head: Run | None = None) -> None:
        """Start the job's next queued occurrences when their turn has come (`catchup_turn`).
        `slot_head`: a run of the job that waited for a slot of its resource and got none
        within its catch-up window, taken out of the resource's line but not settled yet:
        the occurrences behind it whose window ran out too waited for it. A run skipped as
        it starts (a window, a pause, its account) never went: the next one's turn comes
        at once, not at a later wake-up."""
        while self._drain_once(job_id, slot_head) and self.lines.queued(job_id):
            slot_head = None

    def _drain_once(self, job_id: str, slot_head: Run | None) -> bool:
        """One turn of the job's catch-up line; whether it started any run (and may go on)."""
        job = self.registry.jobs.get(job_id)
        now = self.clock.now()
        # the catch-up rule asks only whether any run of the job is going: the runs started
        # here answer it, and the line's retries are looked for only when none is
        quiet = self.lines.waits_while_going(job, job_id, now)
        if quiet and self.starter.any_going(job_id):
            return False  # as the last drain: a run is going, and nothing in line is due to move yet
        # a run the line sent to its resource's line, still waiting for a slot, is going too
        slot = [slot_head] if slot_head is not None else [] if job is None else self.lines.ahead_of_line(job)
        if quiet and slot:
            return False  # (its head waits for a slot at most wake-ups of a short resource)
        going = int(self.starter.any_going(job_id)) or len(self.retrying(job_id)) or len(slot)
        start, expired, replaced = self.lines.catchup_turn(job, job_id, going, now)
        for run, newer in replaced:
            assert job is not None
            self.ledger.settle(run, RunState.SKIPPED_OVERLAP, self.replacement(job, run, newer), None)
        for run in expired:
            assert job is not None
            self.ledger.settle(run, *self.expiry(job, run, slot), None)
        for run in start:
            assert job is not None
            self.to_slot(job, run, None)
        # (one put back on the timeline, its launch refused for a doubtful lease, waits for
        # the next wake-up, and so does the rest of the line)
        return bool(start) and not any(r.run_id in self.timeline for r in start)

    def retrying(self, job_id: str) -> set[str]:
        """The run ids of the job that wait for their next attempt: a catch-up line drains
        one occurrence after another, each with its retries (the next one started during
        the backoff ran beside the retry, which always starts). Not only those started
        from this daemon's line: one a daemon started before a restart, and this one
        adopted, waits for its retry just the same, and the line never saw it."""
        return {r.run_id for r in self.timeline.retrying(job_id)}

    def replacement(self, job: Job, run: Run, newer: Run) -> str:
        """Why a scheduled occurrence waiting in its job's line ends skipped_overlap: a newer
        one fell due while it waited, and under `latest` (or `none`) only the newest waits
        (`newest_waiting`)."""
        behind = self.lines.behind(run)
        where = f"waited its turn behind {behind}" if behind is not None else "waited its turn in its job's line"
        return (
            f"{where}; the occurrence of {blackout.stamp(newer.scheduled_at)} fell due meanwhile and waits "
            f"in its place (catchup: {job.spec.catchup}); overlap: {job.spec.overlap}"
        )

    def expiry(self, job: Job, run: Run, slot: list[Run]) -> tuple[RunState, str]:
        """The state and reason of an occurrence that waited in its job's line past its
        catch-up window, saying what it waited for: a backfill or manual run
        (skipped_overlap), the run ahead of it waiting for a slot of the job's resource
        since before it fell due (`slot`: skipped_resource; one that began to wait later
        is the backlog's run it waited behind), the occurrences a window held before it
        (skipped_blackout), the runs of a backlog while it fell due with chronod up
        (skipped_overlap, naming the run going), or a backlog it fell due in while chronod
        could not run it."""
        past = f"past catchup_window_s={job.spec.catchup_window_s}"
        behind = self.lines.behind(run)
        if behind is not None:
            return RunState.SKIPPED_OVERLAP, f"waited for {behind} to end {past}; overlap: forbid"
        deferred = bool(run.error and run.error.startswith(blackout.DEFERRED_BY))
        going = self.starter.going_runs(job.spec.id)
        head = slot[0] if slot and not going else None  # the run ahead of it in line waits for a slot
        resource = job.spec.resource or ""
        slot_wait = f"a slot of resource {resource!r} (max_concurrency {self.registry.limit(resource)})"
        if head is not None and slot_since(head) <= run.fire_at and (deferred or run.error == QUEUED):
            # the line waited for the resource all along (else the head would have started)
            why = f"{run.error}; then" if deferred else "fell due while the catch-up backlog drained;"
            return (
                RunState.SKIPPED_RESOURCE,
                f"{why} waited its turn behind run {head.run_id}, which waits for {slot_wait}, {past}",
            )
        if deferred:
            return RunState.SKIPPED_BLACKOUT, f"{run.error}; then waited its turn behind the others it held {past}"
        if run.error == QUEUED:
            ahead = (
                f"behind run {going[0].run_id}"
                if going
                else f"behind run {head.run_id} (it waits for {slot_wait})"
                if head is not None
                else "its turn behind the backlog"
            )
            return (
                RunState.SKIPPED_OVERLAP,
                f"fell due while the catch-up backlog drained; waited {ahead} {past}; overlap: {job.spec.overlap}",
            )
        return (
            RunState.SKIPPED_OUTAGE,
            f"fell due while chronod could not run it; waited behind the catch-up backlog {past}",
        )

    def to_slot(self, job: Job, run: Run, next_run: Run | None) -> None:
        """Launch, or for a job with a `resource`, wait in the resource's line."""
        if not job.spec.resource:
            self.launch(job, run, next_run)
            return
        self.ledger.store_runs([next_run])  # the chain must not wait for the slot
        self.lines.wait_for_slot(job, run)
        self.admit(job.spec.resource)
        if self.lines.in_line(job.spec.resource, run.run_id):
            self.note_wait(job, run)

    def note_wait(self, job: Job, run: Run) -> None:
        """A run left waiting for a slot: its row says which resource holds it and since
        when, until when at the latest (for did-it-run, missed, status), as a window's hold does."""
        resource = job.spec.resource
        assert resource, "only a job with a resource waits for a slot"
        why = run.error if (run.error or "").startswith(blackout.WAITING_FOR) else None  # since it first waited
        why = why or blackout.slot_wait(resource, self.registry.limit(resource), self.clock.now())
        until = slot_since(run) + timedelta(seconds=job.spec.catchup_window_s)
        run.error = why
        if run.state == RunState.PENDING:
            # as the store notes it: a row this wake-up has yet to write (a backlog stored
            # with its writes) is written saying so, or a restart takes it for an outage's
            run.next_attempt_at = until
        self.store.note_held([run.run_id], why, until, node=self.node, token=self.lease.token)

    def admit(self, resource: str) -> None:
        """Give the resource's free slots to the runs waiting longest (`resource_admission`).
        A run given a slot that does not take it (a window or pause holds it, its overlap
        rule skips it) leaves the line, and the slot goes to the next run in the same
        call: a slot never stays free while a run that could take it waits behind held
        ones for the next wake-up."""
        limit = self.registry.limit(resource)
        headless: set[str] = set()
        while self._admit_once(resource, limit, headless) and self.starter.used(resource) < limit and self.lease.ok():
            pass
        for job_id in sorted(headless):
            self.drain_queue(job_id)  # the next one in line joins the resource's line now, not at a later wake-up

    def _admit_once(self, resource: str, limit: int, headless: set[str]) -> bool:
        """One turn of the resource's line; whether it gave out a slot (the line moved).
        `headless` gathers the jobs whose catch-up line lost its head: it got no slot."""
        turn = self.lines.slot_turn(resource, limit, self.starter.used(resource), self.clock.now())
        if turn is None or turn == ([], []):
            return False  # (the line stays as it is: most wake-ups of a full resource)
        start, expired = turn
        for job, run in expired:
            if run.trigger == Trigger.SCHEDULE and self.lines.queued(job.spec.id):
                self.drain_queue(job.spec.id, slot_head=run)  # those behind it that waited as long
                headless.add(job.spec.id)
            if run.state == RunState.RETRY_WAIT:  # it ran: its last attempt's outcome is its record
                why = (
                    f"waited for a slot of resource {resource!r} (max_concurrency {limit}) and got none "
                    f"within catchup_window_s={format_duration(job.spec.catchup_window_s)} of when it fell due"
                )
                self.give_up_retry(job, run, why, None)
                continue
            self.ledger.settle(
                run,
                RunState.SKIPPED_RESOURCE,
                f"waited for a slot of resource {resource!r} (max_concurrency {limit}) "
                f"and got none within catchup_window_s={format_duration(job.spec.catchup_window_s)} of "
                f"its fire time",
                None,
            )
        taken: dict[str, int] = {}  # job id -> runs of it given a slot in this turn, not started yet
        go = []
        for job, run in start:
            if self.slot_ok(job, run, taken.get(job.spec.id, 0)):
                go.append((job, run))
                taken[job.spec.id] = taken.get(job.spec.id, 0) + 1
        self.launch_group(resource, go)
        self.lines.tidy(resource)
        return bool(start)

    def overlap(self, spec: JobSpec, run: Run, queued: int = 0, starting: int = 0) -> tuple[policy.Overlap, list[Run]]:
        """The overlap rule for `run` now (`policy.overlap`), and the runs of the job waiting
        for their next attempt that it counted as going: under forbid such a run is still
        going, since its retry always starts and would run beside one started now. A retry
        or a forced manual run always starts. `starting`: runs of the job about to start
        beside it (given a slot in the same turn)."""
        forced = _forced(run)
        retries = [] if forced or spec.overlap != "forbid" else self.timeline.retrying(spec.id)
        going = self.starter.going(spec.id) + starting + len(retries)
        return policy.overlap(spec, going, queued, forced=forced), retries

    def slot_ok(self, job: Job, run: Run, starting: int = 0) -> bool:
        """A slot is free for `run`: the job's overlap rule still holds for it, as when it fell
        due (`start_or_queue`), counting the `starting` runs of its job given a slot in the
        same turn. A retry settled skipped_overlap here would hide the outcome of the
        attempt before it; a run started while the one before it waits for its retry would
        run beside that retry."""
        action, retries = self.overlap(job.spec, run, starting=starting)
        if action == policy.Overlap.SKIP:
            prev = (
                f"previous run {retries[0].run_id} (waiting to start attempt {retries[0].attempts + 1})"
                if retries and not self.starter.going(job.spec.id) and not starting
                else "a previous run started and"
            )
            self.ledger.settle(
                run,
                RunState.SKIPPED_OVERLAP,
                f"waited for a slot of its resource while {prev} is still running; overlap: forbid",
                None,
            )
            return False
        return True

    def launch_group(self, resource: str, runs: list[tuple[Job, Run]]) -> None:
        """Start the runs that got a slot of `resource`. In a fleet they are claimed
        together, in one transaction that counts the resource's runs on every node; those
        refused for want of a slot go back to the front of the line."""
        if not self.placement.fleet:
            for job, run in runs:
                self.launch(job, run, None)
            return
        # a maintenance window that opened while they waited holds them (launch does it on one host)
        runs = [
            (j, r) for j, r in runs if r.trigger != Trigger.SCHEDULE or not self.holds_back(j, r, None, pauses=False)
        ]
        lease_ok = self.starter.lease_ok() if runs else self.lease.ok()
        runs = [(j, r) for j, r in runs if not self.placement.outvoted_here(j)]
        runs = [(j, r) for j, r in runs if not self.account_refuses(j, r, None)]
        if not runs or not lease_ok:
            for job, run in runs:
                self.log("launch.refused", "warning", job=job.spec.id, run=run.run_id, why="lease may have lapsed")
                self.timeline.track(run)
            return
        self.ledger.store_now([r for _, r in runs])  # claimed at once: their rows must exist first
        got = self.starter.claim_group(resource, self.registry.limit(resource), runs)
        for job, run in reversed(runs):
            if run.run_id not in got:
                self.lines.back_in_front(job, run, self.clock.now())

    def launch(self, job: Job, run: Run, next_run: Run | None) -> None:
        """Claim the run in the store (with the next occurrence), then start its process."""
        if run.trigger == Trigger.SCHEDULE and self.holds_back(job, run, next_run, pauses=False):
            return  # a window opened while it waited in a line
        if not self.starter.lease_ok():
            self.log("launch.refused", "warning", job=job.spec.id, run=run.run_id, why="lease may have lapsed")
            self.ledger.store_runs([next_run])
            self.timeline.track(run)
            return
        if self.placement.outvoted_here(job):
            self.ledger.store_runs([next_run])
            return  # the nodes with the fleet's version of this job dispatch it
        if self.account_refuses(job, run, next_run):
            return
        if self.ledger.collecting() and not job.spec.resource:
            self.ledger.claim(job, run)
            self.ledger.store_runs([next_run])
            return
        self.ledger.store_now([run])  # claimed at once: its row must exist first
        claimed, full = self.starter.claim(job, run, next_run, self.registry.limit(job.spec.resource or ""))
        if full:
            self.lines.back_in_front(job, run, self.clock.now())
        elif claimed is not None:
            self.starter.start_process(job, claimed)

    def account_refuses(self, job: Job, run: Run, next_run: Run | None) -> bool:
        """cron's PAM account check, before each launch: the run of a job whose account is
        locked or expired ends skipped_account, saying why (`accounts.refusal`)."""
        user = job.spec.user
        if not user:
            return False
        why = accounts.refusal(self.accounts.account(user), self.clock.now())
        if why is None:
            return False
        self.ledger.settle(run, RunState.SKIPPED_ACCOUNT, why, next_run)
        return True

    def admit_all(self) -> None:
        """Let every line move: after runs ended, and on every wake-up (deadlines pass)."""
        for job_id in self.lines.queued_jobs():
            self.drain_queue(job_id)
        for resource in self.lines.resources():
            self.admit(resource)


def _forced(run: Run) -> bool:
    """A forced manual run and a retry always start: the overlap rule does not hold them
    (`policy.overlap`)."""
    return run.trigger == Trigger.MANUAL_FORCE or run.state == RunState.RETRY_WAIT
