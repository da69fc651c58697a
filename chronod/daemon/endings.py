"""How runs end: record the outcomes of the supervisors that exited (one transaction for
the lot), schedule retries and re-dispatch unknown outcomes of idempotent jobs."""

from __future__ import annotations

import random
from datetime import timedelta

from chronod.core import policy
from chronod.core.clock import Clock
from chronod.core.model import RunState
from chronod.daemon.runs import Job
from chronod.daemon.seams import Log, Metrics
from chronod.daemon.timeline import Timeline
from chronod.fleet.lease import Lease
from chronod.runner.api import Outcome
from chronod.store.api import Ending, Run, Store


class Endings:
    """Outcomes, retries. Holds no state: a retry goes to the `Timeline`."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: Store,
        lease: Lease,
        log: Log,
        metrics: Metrics,
        rng: random.Random,
        timeline: Timeline,
    ) -> None:
        self.clock, self.store, self.lease, self.log, self.metrics = clock, store, lease, log, metrics
        self.rng, self.timeline = rng, timeline

    def record_outcomes(self, ended: list[tuple[Job, Run, Outcome]]) -> set[str]:
        """Retries and unknown outcomes one by one; every final outcome in one transaction.
        Returns the run ids the store accepted (a stale token is refused)."""
        final: list[tuple[Job, Run, Outcome]] = []
        kept: set[str] = set()
        for job, run, outcome in ended:
            state = outcome.state
            if state == RunState.LOST and policy.on_unknown_outcome(job.spec) == policy.Unknown.REDISPATCH:
                if self.retry_now(job, run, outcome.error or "outcome unknown"):
                    kept.add(run.run_id)
            elif policy.may_retry(job.spec, run.attempts, state):
                if self.schedule_retry(job, run, outcome):
                    kept.add(run.run_id)
            else:
                final.append((job, run, outcome))
        if not final:
            return kept
        done = self.store.finish_many(
            [
                Ending(
                    run.run_id,
                    run.attempts,
                    outcome.state,
                    exit_code=outcome.exit_code,
                    signal=outcome.signal,
                    output_tail=outcome.output_tail,
                    output_bytes=outcome.output_bytes,
                    error=outcome.error,
                    finished_at=outcome.finished_at,
                )
                for _, run, outcome in final
            ],
            self.lease.token,
        )
        for job, run, outcome in final:
            self.recorded(job, run, outcome, run.run_id in done)
        return kept | done

    def schedule_retry(self, job: Job, run: Run, outcome: Outcome) -> bool:
        delay = policy.retry_delay_s(job.spec, run.attempts, self.rng)
        at = self.clock.now() + timedelta(seconds=delay)
        if self.store.schedule_retry(
            run.run_id,
            run.attempts,
            at,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            error=outcome.error,
            token=self.lease.token,
            output_tail=outcome.output_tail,
            output_bytes=outcome.output_bytes,
        ):
            run.state, run.next_attempt_at = RunState.RETRY_WAIT, at
            self.timeline.track(run)
            self.log(
                "run.retry_wait",
                job=job.spec.id,
                run=run.run_id,
                attempt=run.attempts,
                exit_code=outcome.exit_code,
                retry_in_s=round(delay, 1),
            )
            return True
        return False

    def recorded(self, job: Job, run: Run, outcome: Outcome, ok: bool) -> None:
        spec, state = job.spec, outcome.state
        if not ok:
            self.log("run.finish_rejected", "warning", job=spec.id, run=run.run_id, why="stale token or state")
            return
        self.metrics.runs.labels(spec.id, state).inc()
        if state == RunState.SUCCEEDED:
            self.metrics.last_success.labels(spec.id).set((outcome.finished_at or self.clock.now()).timestamp())
        self.log(
            "run.finished",
            job=spec.id,
            run=run.run_id,
            attempt=run.attempts,
            state=state,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            output_bytes=outcome.output_bytes,
            error=outcome.error,
        )

    def retry_now(self, job: Job, run: Run, why: str) -> bool:
        """Idempotent/keyed run whose outcome is unknown: a new attempt, same run id."""
        at = self.clock.now()
        if self.store.schedule_retry(
            run.run_id,
            run.attempts,
            at,
            exit_code=None,
            signal=None,
            error=f"{why}; re-dispatched",
            token=self.lease.token,
        ):
            run.state, run.next_attempt_at = RunState.RETRY_WAIT, at
            self.timeline.track(run)
            self.log("run.redispatch", "warning", job=job.spec.id, run=run.run_id, why=why)
            return True
        return False
