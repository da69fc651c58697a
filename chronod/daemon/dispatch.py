"""Due work: pop what fell due, apply catch-up, ownership (a fleet's `any` jobs), pause,
overlap and resource limits, then claim in the store and start processes. One wake-up's
writes go to the store together (`Batch`, `Store.commit_wakeup`)."""

from __future__ import annotations

import heapq
from collections import Counter
from datetime import datetime, timedelta

from chronod.core import occurrence, policy
from chronod.core.model import JobSpec
from chronod.daemon.runs import Active, Batch, Job
from chronod.fleet import placement
from chronod.store.api import Run

CLAIM_CHUNK = 50  # runs claimed per transaction: the first ones start before the rest are claimed
LAUNCH_SLICE_S = 0.5  # a wake-up starts runs for at most this long, then collects children again
RESCUE_AFTER_S = 2.0  # an `any` occurrence still unclaimed this long after its fire time: any node takes it


class Dispatch:
    """What falls due, and launching it. Part of `Daemon` (chronod.daemon.loop)."""

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
        held = self.held() if self.queued or self.waiting else set()
        released: dict[str, list[Run]] = {}
        seen: set[str] = set()
        while self.heap and self.heap[0][0] <= now:
            _, _, rid = heapq.heappop(self.heap)
            run = self.pending.get(rid)
            if run is None or rid in held or rid in seen:
                continue  # (a held occurrence may have two entries at its window's end)
            seen.add(rid)
            window_over = self.take_held(rid, now)
            if window_over is not None:
                if window_over:
                    released.setdefault(run.job_id, []).append(run)
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
        for job_id, runs in released.items():
            if job_id in self.jobs and job_id not in self.quarantine:
                with self.quarantine.guard(self.jobs[job_id].spec, "held occurrences"):
                    self.release(self.jobs[job_id], runs, superseded=job_id in by_job)
        self.admit_all()

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
        if self.hold_all(job, due, extra, nxt, now):
            return
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
            self.metrics.runs.labels(r.job_id, "skipped_outage").inc()
        if skips:
            self.log(
                "runs.skipped_outage",
                job=job.spec.id,
                count=len(skips),
                first=skips[0].scheduled_at,
                last=skips[-1].scheduled_at,
            )
        if nxt is not None:
            self.track(nxt)
        runs = [by_at[d.scheduled_at] for d in decision.run]
        if job.spec.catchup == "all" and len(runs) > 1:
            self.queue_backlog(job, runs)  # in scheduled order, one after another under forbid
            return
        for run in runs:
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
        if self.backlog or (self.batch is not None and self.batch.claims):
            # this node has runs waiting to start (carried into this wake-up's batch)
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
            self.log(
                "runs.rescued",
                "warning",
                count=sum(taken.values()),
                owners=",".join(f"{o}:{n}" for o, n in sorted(taken.items())),
                oldest_late_s=round(max((now - r.fire_at).total_seconds() for r in runs), 1),
            )

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
                extra = extra[-policy.MAX_BACKLOG_RECORDS :]
                skip_to = now - timedelta(seconds=job.offset + policy.ON_TIME_GRACE_S + 1)
                at = max(at, skip_to - timedelta(seconds=1))

    def start_or_queue(self, job: Job, run: Run, next_run: Run | None = None) -> None:
        """Apply pause, overlap and resource limits, then dispatch and launch."""
        spec = job.spec
        if run.trigger == "schedule" and self.holds_back(job, run, next_run):
            return
        running = [a for a in self.active.for_job(spec.id) if not a.disowned]
        forced = run.trigger == "manual-force" or run.state == "retry_wait"
        action = policy.overlap(spec, self.going(spec.id), self.draining(spec.id), forced=forced)
        if action == "queue":
            self.store_runs([next_run])  # the chain must not wait for the queue
            self.queue_backlog(job, [run])
            return
        if action == "skip":
            prev = f"previous run {running[0].run.run_id}" if running else "a previous run started just now"
            self.settle(run, "skipped_overlap", f"{prev} still running; overlap: forbid", next_run)
            return
        if action == "replace":
            for a in running:
                self.log("run.replacing", job=spec.id, run=a.run.run_id, by=run.run_id)
                self.runner.cancel(a.handle)
        self.to_slot(job, run, next_run)

    def resource_limit(self, spec: JobSpec) -> int:
        return self.resources.get(spec.resource, 1)

    def settle(self, run: Run, state: str, why: str, next_run: Run | None) -> None:
        """Record a terminal state for an occurrence that will not start."""
        self.settle_quietly(run.run_id, state, why, next_run)
        self.metrics.runs.labels(run.job_id, state).inc()
        self.log("run.settled", job=run.job_id, run=run.run_id, state=state, why=why)

    def settle_quietly(self, run_id: str, state: str, why: str | None, next_run: Run | None) -> None:
        """`settle` without the log line: with this wake-up's writes, or now."""
        if self.batch is None:
            self.store.settle(run_id, state, error=why, next_run=next_run, node=self.node, token=self.lease.token)
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

    def launch(self, job: Job, run: Run, next_run: Run | None) -> None:
        """Claim the run in the store (with the next occurrence), then start its process."""
        if run.trigger == "schedule" and self.holds_back(job, run, next_run, pauses=False):
            return  # a window opened while it waited in a line
        if not self.lease.ok():
            self.heartbeat()
            if not self.lease.ok():
                self.log("launch.refused", "warning", job=job.spec.id, run=run.run_id, why="lease may have lapsed")
                self.store_runs([next_run])
                self.track(run)
                return
        if job.spec.id in self.outvoted and not job.spec.run_on.each:
            self.store_runs([next_run])
            return  # the nodes with the fleet's version of this job dispatch it
        if self.batch is not None and not job.spec.resource:
            self.batch.claim(job, run)
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
        settles = batch.settles
        claims = self.admit_starts(batch.claims, settles)  # the start limit; the rest wait or are skipped
        jobs = {run.run_id: job for job, run in claims}
        until = self.clock.monotonic() + LAUNCH_SLICE_S
        i = 0
        while inserts or settles or i < len(claims):
            if i and self.clock.monotonic() > until:
                # a node that cannot start them all in time collects its children first;
                # the rest wait one wake-up (or another node rescues them)
                self.give_back(claims[i:])
                return
            if not self.lease.ok():
                self.heartbeat()
            if getattr(self.waker, "stop_requested", False) or not self.lease.ok():
                # SIGTERM or a doubtful lease: store what must be stored, start nothing;
                # what is not claimed stays pending for the other nodes or the next start
                self.store.commit_wakeup(inserts, settles, [], self.node, self.lease.token)
                for _, run in claims[i:] + self.backlog:
                    self.track(run)
                self.backlog = []
                return
            chunk = [run.run_id for _, run in claims[i : i + CLAIM_CHUNK]]
            if chunk and self.notify_service is not None:
                self.notify_service.launching()  # its next round waits for the burst to be started
            claimed = self.store.commit_wakeup(inserts, settles, chunk, self.node, self.lease.token)
            self.refund(len(chunk) - len(claimed))  # another node had them: no start spent
            # start in the order decided (a catch-up backlog oldest first), not the database's
            pos = {rid: k for k, rid in enumerate(chunk)}
            claimed = sorted(claimed, key=lambda c: pos.get(c.run_id, len(pos)))
            inserts, settles, i = [], [], i + CLAIM_CHUNK
            started = [self.start_process(jobs[c.run_id], c, record=False) for c in claimed]
            self.store.set_processes([p for p in started if p is not None], self.lease.token)

    def start_process(self, job: Job, claimed: Run, record: bool = True) -> tuple[str, int, int, int] | None:
        """Start the process of a claimed attempt and watch it; store its process ids now,
        or (`record=False`) return them for the caller to store with others."""
        from chronod.runner.api import LaunchRequest

        env = {
            "CHRONO_JOB_ID": job.spec.id,
            "CHRONO_RUN_ID": claimed.run_id,
            "CHRONO_SCHEDULED_AT": occurrence.utc_stamp(claimed.scheduled_at),
            "CHRONO_FIRE_AT": occurrence.utc_stamp(claimed.fire_at),
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
        self.log(
            "run.started",
            job=job.spec.id,
            run=claimed.run_id,
            attempt=claimed.attempts,
            supervisor=handle.supervisor_pid,
            lag_ms=round(lag * 1000, 1),
        )
        if not handle.pid:
            return None
        pids = (claimed.run_id, claimed.attempts, handle.pid, handle.supervisor_pid)
        if record:
            self.store.set_processes([pids], self.lease.token)
        return pids

    def claim(self, job: Job, run: Run, next_run: Run | None) -> Run | None:
        """Dispatch in the store; in a fleet, a `resource` limit holds across every node."""
        spec = job.spec
        if self.fleet and spec.resource:
            claimed, full = self.store.dispatch_in_group(
                run.run_id,
                self.node,
                self.lease.token,
                next_run,
                resource=spec.resource,
                limit=self.resource_limit(spec),
            )
            if full:
                self.group_full(job, run)
                return None
            return claimed
        claimed = self.store.dispatch(run.run_id, self.node, self.lease.token, next_run)
        if claimed is None and not self.fleet:
            self.log("dispatch.lost_race", "warning", job=spec.id, run=run.run_id)
        return claimed
