"""Runs that wait for their turn: a catch-up backlog that drains in scheduled order (with
the occurrences that fall due meanwhile queued behind it), and runs that wait for a slot
of their resource. Who goes next is decided by chronod.core.policy (`catchup_turn`,
`resource_admission`); this part keeps the lines and acts on the answers. A waiting run
stays `pending` in the store; one that waited past its catch-up window ends
`skipped_outage` (backlog) or `skipped_resource` (resource), with the reason."""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta

from chronod.core import policy
from chronod.core.durations import format_duration
from chronod.daemon.runs import Job
from chronod.store.api import Run

GROUP_FULL_RETRY_S = 1.0  # a fleet's resource was full in the store: ask again this much later
EXPIRY_SLACK = timedelta(milliseconds=5)  # wake just after a waiting run's deadline


class Waits:
    """Catch-up queues and resource lines. Part of `Daemon` (chronod.daemon.loop)."""

    def going(self, job_id: str) -> int:
        """Runs of the job going here: started, or claimed by this wake-up and starting."""
        started = sum(1 for a in self.active.for_job(job_id) if not a.disowned)
        return started + (self.batch.per_job[job_id] if self.batch is not None else 0)

    def draining(self, job_id: str) -> int:
        """How much of the job's catch-up backlog is left: queued, or started from the queue
        and still going (an occurrence falling due meanwhile waits behind it)."""
        started = self.catching_up.get(job_id)
        if started:
            going = {a.run.run_id for a in self.active.for_job(job_id)}
            if self.batch is not None and self.batch.per_job[job_id]:
                going |= {r.run_id for j, r in self.batch.claims if j.spec.id == job_id}
            started &= going
        return len(self.queued.get(job_id, ())) + len(started or ())

    def held(self) -> set[str]:
        """The run ids waiting in a line here (not to be picked up again from the schedule)."""
        ids = {r.run_id for q in self.queued.values() for r in q}
        return ids | {r.run_id for line in self.waiting.values() for _, r in line}

    def queue_backlog(self, job: Job, runs: list[Run]) -> None:
        """Put occurrences in the job's catch-up line, in scheduled order, then let it drain."""
        q = self.queued.setdefault(job.spec.id, deque())
        q.extend(runs)
        self.queued[job.spec.id] = deque(sorted(q, key=lambda r: (r.scheduled_at, r.run_id)))
        self.drain_queue(job.spec.id)

    def drain_queue(self, job_id: str) -> None:
        """Start the job's next queued occurrence when its turn has come (`catchup_turn`)."""
        q = self.queued.get(job_id)
        job = self.jobs.get(job_id)
        if not q or job is None:
            self.queued.pop(job_id, None)
            return
        by_id = {r.run_id: r for r in q}
        lines = [policy.waiting(r.run_id, r.fire_at, job.spec) for r in q]
        turn = policy.catchup_turn(job.spec, lines, self.going(job_id), self.clock.now())
        for w in turn.expire:
            q.remove(by_id[w.run_id])
            self.settle(
                by_id[w.run_id],
                "skipped_outage",
                "fell due while chronod could not run it; waited behind "
                f"the catch-up backlog past catchup_window_s={job.spec.catchup_window_s}",
                None,
            )
        for w in turn.start:
            q.remove(by_id[w.run_id])
            self.catching_up.setdefault(job_id, set()).add(w.run_id)
            self.to_slot(job, by_id[w.run_id], None)
        if not q:
            self.queued.pop(job_id, None)

    def to_slot(self, job: Job, run: Run, next_run: Run | None) -> None:
        """Launch, or for a job with a `resource`, wait in the resource's line."""
        if not job.spec.resource:
            self.launch(job, run, next_run)
            return
        self.store_runs([next_run])  # the chain must not wait for the slot
        self.waiting.setdefault(job.spec.resource, []).append((job, run))
        self.admit(job.spec.resource)

    def admit(self, resource: str) -> None:
        """Give the resource's free slots to the runs waiting longest (`resource_admission`)."""
        line = self.waiting.get(resource)
        if not line:
            self.waiting.pop(resource, None)
            return
        now = self.clock.now()
        if now < self.group_retry_at.get(resource, now):
            return  # the fleet's store said full a moment ago
        limit = self.resources.get(resource, 1)
        used = sum(1 for a in self.active.values() if a.job.spec.resource == resource and not a.disowned)
        by_id = {r.run_id: (j, r) for j, r in line}
        turn = policy.resource_admission(
            limit, used, [policy.waiting(r.run_id, r.fire_at, j.spec) for j, r in line], now
        )
        gone = {w.run_id for w in (*turn.expire, *turn.start)}
        self.waiting[resource] = [(j, r) for j, r in line if r.run_id not in gone]
        for w in turn.expire:
            job, run = by_id[w.run_id]
            self.settle(
                run,
                "skipped_resource",
                f"waited for a slot of resource {resource!r} (max_concurrency {limit}) "
                f"and got none within catchup_window_s={format_duration(job.spec.catchup_window_s)} of "
                f"its fire time",
                None,
            )
        self.launch_group(resource, [by_id[w.run_id] for w in turn.start if self.slot_ok(*by_id[w.run_id])])
        if not self.waiting.get(resource):
            self.waiting.pop(resource, None)

    def slot_ok(self, job: Job, run: Run) -> bool:
        """A slot is free for `run`: the job's overlap rule still holds for it."""
        if policy.overlap(job.spec, self.going(job.spec.id)) == "skip":
            self.settle(
                run,
                "skipped_overlap",
                "waited for a slot of its resource while a previous run started and is still running; overlap: forbid",
                None,
            )
            return False
        return True

    def launch_group(self, resource: str, runs: list[tuple[Job, Run]]) -> None:
        """Start the runs that got a slot of `resource`. In a fleet they are claimed
        together, in one transaction that counts the resource's runs on every node; those
        refused for want of a slot go back to the front of the line (`group_full`)."""
        if not self.fleet:
            for job, run in runs:
                self.launch(job, run, None)
            return
        # a maintenance window that opened while they waited holds them (launch does it on one host)
        runs = [(j, r) for j, r in runs if r.trigger != "schedule" or not self.holds_back(j, r, None, pauses=False)]
        if runs and not self.lease.ok():
            self.heartbeat()
        runs = [(j, r) for j, r in runs if j.spec.id not in self.outvoted or j.spec.run_on.each]
        if not runs or not self.lease.ok():
            for job, run in runs:
                self.log("launch.refused", "warning", job=job.spec.id, run=run.run_id, why="lease may have lapsed")
                self.track(run)
            return
        ids = [r.run_id for _, r in runs]
        claimed, full = self.store.dispatch_group(
            ids, self.node, self.lease.token, [], resource=resource, limit=self.resources.get(resource, 1)
        )
        jobs = {r.run_id: j for j, r in runs}
        started = [self.start_process(jobs[c.run_id], c, record=False) for c in claimed]
        self.store.set_processes([p for p in started if p is not None], self.lease.token)
        if full:
            got = {c.run_id for c in claimed}
            for job, run in reversed(runs):
                if run.run_id not in got:
                    self.group_full(job, run)

    def group_full(self, job: Job, run: Run) -> None:
        """A fleet's resource was full in the store: back to the front of the line, ask again
        in GROUP_FULL_RETRY_S (its deadline still holds)."""
        self.waiting.setdefault(job.spec.resource, []).insert(0, (job, run))
        self.group_retry_at[job.spec.resource] = self.clock.now() + timedelta(seconds=GROUP_FULL_RETRY_S)

    def admit_all(self) -> None:
        """Let every line move: after runs ended, and on every wake-up (deadlines pass)."""
        for job_id in list(self.queued):
            self.drain_queue(job_id)
        for resource in list(self.waiting):
            self.admit(resource)

    def wait_deadline(self) -> datetime | None:
        """When the loop must wake for the lines: a waiting run's deadline, a fleet retry."""
        times = [
            r.fire_at + timedelta(seconds=j.spec.catchup_window_s) + EXPIRY_SLACK
            for line in self.waiting.values()
            for j, r in line
        ]
        times += [
            q[0].fire_at + timedelta(seconds=self.jobs[j].spec.catchup_window_s) + EXPIRY_SLACK
            for j, q in self.queued.items()
            if q and j in self.jobs
        ]
        times += [t for r, t in self.group_retry_at.items() if r in self.waiting]
        return min(times) if times else None

    def forget_waits(self, job_id: str) -> None:
        """A job removed or set aside: its runs leave every line."""
        self.queued.pop(job_id, None)
        self.catching_up.pop(job_id, None)
        for resource, line in list(self.waiting.items()):
            self.waiting[resource] = [(j, r) for j, r in line if j.spec.id != job_id]
            if not self.waiting[resource]:
                del self.waiting[resource]
