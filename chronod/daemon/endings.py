"""How runs end: collect the supervisors that exited, record outcomes (one transaction for
the lot), schedule retries and re-dispatch unknown outcomes of idempotent jobs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from chronod.core import policy
from chronod.daemon.runs import Job
from chronod.store.api import Ending, Run


class Endings:
    """Outcomes, retries. Part of `Daemon` (chronod.daemon.loop)."""

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
            kept = {active.run.run_id for active, _ in ended}
        else:
            kept = self.record_outcomes([(active.job, active.run, outcome) for active, outcome in ended])
            if self.notify_service is not None:
                self.notify_service.wake()
        for active, _ in ended:
            if active.run.run_id in kept:
                self.runner.discard(active.run.run_id, active.run.attempts)
            # a refused record keeps its result: the next chronod adopts it from there
        self.admit_all()

    def record_outcomes(self, ended: list[tuple[Job, Run, Any]]) -> set[str]:
        """Retries and unknown outcomes one by one; every final outcome in one transaction.
        Returns the run ids the store accepted (a stale token is refused)."""
        final, kept = [], set()
        for job, run, outcome in ended:
            state = outcome.state
            if state == "lost" and policy.on_unknown_outcome(job.spec) == "redispatch":
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

    def schedule_retry(self, job: Job, run: Run, outcome: Any) -> bool:
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
            run.state, run.next_attempt_at = "retry_wait", at
            self.track(run)
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

    def recorded(self, job: Job, run: Run, outcome: Any, ok: bool) -> None:
        spec, state = job.spec, outcome.state
        if not ok:
            self.log("run.finish_rejected", "warning", job=spec.id, run=run.run_id, why="stale token or state")
            return
        self.metrics.runs.labels(spec.id, state).inc()
        if state == "succeeded":
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
            run.state, run.next_attempt_at = "retry_wait", at
            self.track(run)
            self.log("run.redispatch", "warning", job=job.spec.id, run=run.run_id, why=why)
            return True
        return False
