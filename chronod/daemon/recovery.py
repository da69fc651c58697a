"""Recovery: runs a previous chronod left `running` (adopt live supervisors, record what
ended meanwhile, settle the truly unknown), a lease this node lost (rejoin, keep what nobody
took, terminate what another node now owns), and the runs of expired nodes (takeover)."""

from __future__ import annotations

import os
from typing import Mapping

from chronod.core import policy
from chronod.core.clock import Clock
from chronod.core.model import RunState
from chronod.daemon.endings import Endings
from chronod.daemon.registry import Registry
from chronod.daemon.runs import Job
from chronod.daemon.seams import Log, Metrics, Runner
from chronod.daemon.starter import Starter
from chronod.daemon.timeline import Timeline
from chronod.fleet.lease import Lease
from chronod.runner import files
from chronod.runner.api import Handle
from chronod.store.api import Run, Store


class Recovery:
    """Adopt, rejoin, take over. Holds no state: the runs it adopts go to the `Starter`,
    the attempts it schedules to the `Timeline`."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: Store,
        runner: Runner,
        node: str,
        lease: Lease,
        log: Log,
        metrics: Metrics,
        registry: Registry,
        timeline: Timeline,
        starter: Starter,
        endings: Endings,
    ) -> None:
        self.clock, self.store, self.runner, self.node, self.lease = clock, store, runner, node, lease
        self.log, self.metrics, self.registry = log, metrics, registry
        self.timeline, self.starter, self.endings = timeline, starter, endings

    @property
    def jobs(self) -> Mapping[str, Job]:
        return self.registry.jobs

    def acquire(self) -> None:
        """A new lease under a new fencing token."""
        self.metrics.lease_token.set(self.lease.acquire())

    def adopt(self) -> None:
        """Runs left `running` by a previous chronod: adopt live supervisors, record the
        results of those that ended meanwhile, and settle the truly unknown."""
        for run in self.store.running(self.node if self.store.dialect != "sqlite" else None):
            if run.run_id in self.starter:
                continue
            job = self.jobs.get(run.job_id) or self.job_from_store(run.job_id)
            if job is None:
                continue
            found = self.runner.adopt(run.run_id, run.attempts)
            if found is None and run.token in self.lease.tokens:
                self.never_started(job, run)
                continue
            if found is None:
                self.unknown_outcome(job, run)
                continue
            if not self.store.adopt(run.run_id, run.attempts, node=self.node, token=self.lease.token):
                self.log(
                    "run.adopt_refused",
                    "warning",
                    job=run.job_id,
                    run=run.run_id,
                    why="its holder still has a live lease",
                )
                continue
            if isinstance(found, Handle):
                self.starter.adopted(run, found, job)
                self.log(
                    "run.adopted", job=run.job_id, run=run.run_id, attempt=run.attempts, supervisor=found.supervisor_pid
                )
            else:
                self.log("run.ended_while_down", job=run.job_id, run=run.run_id, state=found.state)
                if self.endings.record_outcomes([(job, run, found)]):
                    self.runner.discard(run.run_id, run.attempts)
        for rid, attempt in self.runner.orphans(known=self.starter.known()):
            row = self.store.get_run(rid)
            if row is None or row.state != RunState.RUNNING or row.attempts != attempt:
                if row is not None:
                    self.late_outcome(row, attempt)
                self.runner.discard(rid, attempt)  # recorded before a crash, or noted just now

    def late_outcome(self, run: Run, attempt: int) -> None:
        """A result file for an attempt already settled: recorded before a crash (nothing
        to do), or the real outcome of an attempt settled `lost`, which is stored as what
        happened next to the `lost` (never dropped, never overwriting it)."""
        record = files.read_json(files.path_of(os.fspath(self.runner.state_dir), run.run_id, attempt, files.RESULT))
        if record is None or record.get("state") in (None, RunState.LOST):
            return
        code = record.get("exit_code")
        text = (
            f"late result, after this attempt was settled lost: {record['state']}"
            + (f" (exit code {code})" if code is not None else "")
            + (f", finished at {record['finished_at']}" if record.get("finished_at") else "")
        )
        if self.store.note_late_outcome(run.run_id, attempt, text):
            self.log("run.late_outcome", "error", job=run.job_id, run=run.run_id, attempt=attempt, result=text)

    def job_from_store(self, job_id: str) -> Job | None:
        row = self.store.get_job(job_id)
        if row is None:
            return None
        return Job.on(row.spec, self.node)

    def unknown_outcome(self, job: Job, run: Run) -> None:
        """No supervisor and no result: the machine rebooted, or chronod died between the
        claim and the fork. Unsafe runs are `lost`; others get a new attempt now."""
        why = "chronod stopped while it ran and no supervisor or result is left: outcome unknown"
        if policy.on_unknown_outcome(job.spec) == policy.Unknown.LOST:
            if self.reclaim_lost(run, why + "; an unsafe job is never run twice"):
                self.log("run.lost", "error", job=job.spec.id, run=run.run_id, why=why)
            return
        if job.spec.id not in self.jobs:
            why += f"; not started again: {policy.REMOVED_FROM_REGISTRY}"
            if self.reclaim_lost(run, why):
                self.log("run.lost", "error", job=job.spec.id, run=run.run_id, why=why)
        elif self.redispatch(run, why):
            self.log("run.redispatch", "warning", job=job.spec.id, run=run.run_id, why=why)

    def reclaim_lost(self, run: Run, error: str) -> bool:
        """Record a run whose outcome cannot be known as `lost` under this node's token."""
        if not self.store.reclaim(
            run.run_id, run.attempts, node=self.node, token=self.lease.token, state=RunState.LOST, error=error
        ):
            return False
        self.metrics.runs.labels(run.job_id, RunState.LOST).inc()
        return True

    def redispatch(self, run: Run, why: str) -> bool:
        """Take a run over as a new attempt due now (fenced; False when another node won)."""
        now = self.clock.now()
        if not self.store.reclaim(
            run.run_id,
            run.attempts,
            node=self.node,
            token=self.lease.token,
            state=RunState.RETRY_WAIT,
            error=why + "; re-dispatched",
            next_attempt_at=now,
        ):
            return False
        run.state, run.next_attempt_at = RunState.RETRY_WAIT, now
        self.timeline.track(run)
        return True

    def never_started(self, job: Job, run: Run) -> None:
        """A claim this very process made whose launch never happened (the database failed
        between the claim's commit and its answer): no process ever ran, so a new attempt
        is safe for every class, unsafe included."""
        why = "claimed, but the database connection failed before the job was started; started again"
        if run.token != self.lease.token and not self.store.adopt(
            run.run_id, run.attempts, node=self.node, token=self.lease.token
        ):
            return
        now = self.clock.now()
        if self.store.schedule_retry(
            run.run_id, run.attempts, now, exit_code=None, signal=None, error=why, token=self.lease.token
        ):
            run.state, run.next_attempt_at = RunState.RETRY_WAIT, now
            if job.spec.id in self.jobs:
                self.timeline.track(run)
            self.log("run.redispatch", "warning", job=job.spec.id, run=run.run_id, why=why)

    def lease_lost(self) -> None:
        """Our lease lapsed (a pause, a stall, an outage): rejoin with a new token, keep the
        runs nobody took over, terminate the ones another node now owns."""
        old = self.lease.token
        self.acquire()
        self.log("node.lease_lost", "warning", node=self.node, token=old, new_token=self.lease.token)
        self.starter.rejoin()

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
        if policy.on_unknown_outcome(job.spec) == policy.Unknown.LOST:
            if self.reclaim_lost(run, why + "; an unsafe job is never run twice: outcome unknown"):
                self.metrics.takeovers.labels("lost").inc()
                self.log(
                    "run.lost",
                    "error",
                    job=run.job_id,
                    run=run.run_id,
                    dead_node=dead,
                    why=why,
                    notice="owner must check whether it ran",
                )
            return
        if run.job_id not in self.jobs:
            return  # a node that carries the job takes it over
        if self.redispatch(run, why):
            self.metrics.takeovers.labels("redispatched").inc()
            self.log(
                "run.taken_over", "warning", job=run.job_id, run=run.run_id, dead_node=dead, attempt=run.attempts + 1
            )

    def take_over_retries(self, dead: str) -> None:
        """Retries the dead node was waiting to start: nobody else tracks them."""
        for run in self.store.waiting_retries(dead):
            if run.job_id in self.jobs and run.run_id not in self.timeline:
                self.timeline.track(run)
