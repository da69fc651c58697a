"""How runs end: record the outcomes of the supervisors that exited (one transaction for
the lot), schedule retries and re-dispatch unknown outcomes of idempotent jobs."""

from __future__ import annotations

import os
import random
from dataclasses import replace
from datetime import timedelta
from typing import Callable

from chronod.core import outputs, policy
from chronod.core.clock import Clock
from chronod.core.model import RunState
from chronod.daemon.runs import Job
from chronod.daemon.seams import Log, Metrics
from chronod.daemon.timeline import Timeline
from chronod.fleet.lease import Lease
from chronod.runner.api import Outcome
from chronod.store.api import Ending, Outcomes, Run


def output_budget() -> int:
    """The host's output budget (CHRONO_OUTPUT_BUDGET, bytes of output stored per run);
    the default when unset or not a size (Endings says so in the log at start)."""
    return outputs.parse_budget(os.environ.get("CHRONO_OUTPUT_BUDGET")) or outputs.DEFAULT_OUTPUT_BUDGET


class Endings:
    """Outcomes, retries. Holds no state: a retry goes to the `Timeline`."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: Outcomes,
        lease: Lease,
        log: Log,
        metrics: Metrics,
        rng: random.Random,
        timeline: Timeline,
        carried: Callable[[str], bool],
    ) -> None:
        self.clock, self.store, self.lease, self.log, self.metrics = clock, store, lease, log, metrics
        self.rng, self.timeline, self.carried = rng, timeline, carried
        if outputs.parse_budget(os.environ.get("CHRONO_OUTPUT_BUDGET")) is None:
            log(
                "config.invalid",
                "warning",
                what="CHRONO_OUTPUT_BUDGET",
                value=os.environ.get("CHRONO_OUTPUT_BUDGET"),
                why="not a size (bytes, or a number with K, M or G)",
                using=outputs.DEFAULT_OUTPUT_BUDGET,
            )

    def record_outcomes(self, ended: list[tuple[Job, Run, Outcome]]) -> set[str]:
        """Retries and unknown outcomes one by one; every final outcome in one transaction.
        Returns the run ids the store accepted (a stale token is refused)."""
        final: list[tuple[Job, Run, Outcome]] = []
        kept: set[str] = set()
        for job, run, outcome in ended:
            state = outcome.state
            redispatch = state == RunState.LOST and policy.on_unknown_outcome(job.spec) == policy.Unknown.REDISPATCH
            if (redispatch or policy.may_retry(job.spec, run.attempts, state)) and not self.carried(job.spec.id):
                # its job was removed while this attempt ran: no other attempt will ever start
                why = policy.REMOVED_FROM_REGISTRY
                _, error = policy.retry_given_up(state, outcome.error, run.attempts + 1, None, why)
                final.append((job, run, replace(outcome, error=error)))
            elif redispatch:
                if self.retry_now(job, run, outcome.error or "outcome unknown"):
                    kept.add(run.run_id)
            elif policy.may_retry(job.spec, run.attempts, state):
                if self.schedule_retry(job, run, outcome):
                    kept.add(run.run_id)
            else:
                final.append((job, run, outcome))
        if not final:
            return kept
        endings = []
        for _, run, outcome in final:
            tail, note = outputs.within_budget(outcome.output_tail, output_budget())
            endings.append(
                Ending(
                    run.run_id,
                    run.attempts,
                    outcome.state,
                    exit_code=outcome.exit_code,
                    signal=outcome.signal,
                    output_tail=tail,
                    output_bytes=outcome.output_bytes,
                    error=outputs.with_note(outcome.error, note),
                    finished_at=outcome.finished_at,
                )
            )
        try:
            done = self.store.finish_many(endings, self.lease.token)
        except Exception as e:
            if not outputs.is_database_full(e):
                raise
            # A full database degrades the runs with output, not the host: their outcomes
            # are stored without it, with a note; were even that refused, the outage path
            # retries a write that is small.
            self.log("store.full", "warning", runs=len(endings), what="run output dropped, outcomes kept")
            done = self.store.finish_many(
                [
                    replace(e, output_tail=None, error=outputs.with_note(e.error, outputs.DB_FULL_NOTE))
                    if e.output_tail
                    else e
                    for e in endings
                ],
                self.lease.token,
            )
        for job, run, outcome in final:
            self.recorded(job, run, outcome, run.run_id in done)
        return kept | done

    def schedule_retry(self, job: Job, run: Run, outcome: Outcome) -> bool:
        delay = policy.retry_delay_s(job.spec, run.attempts, self.rng)
        at = self.clock.now() + timedelta(seconds=delay)
        tail, note = outputs.within_budget(outcome.output_tail, output_budget())

        def write(tail: str | None, note: str | None) -> bool:
            return bool(
                self.store.schedule_retry(
                    run.run_id,
                    run.attempts,
                    at,
                    exit_code=outcome.exit_code,
                    signal=outcome.signal,
                    error=outputs.with_note(outcome.error, note),
                    token=self.lease.token,
                    attempt_state=outcome.state,  # failed or timed_out: what a retry given up keeps
                    output_tail=tail,
                    output_bytes=outcome.output_bytes,
                )
            )

        try:
            ok = write(tail, note)
        except Exception as e:
            if not outputs.is_database_full(e) or not tail:
                raise
            self.log("store.full", "warning", runs=1, what="run output dropped, outcome kept")
            ok = write(None, outputs.DB_FULL_NOTE)
        if ok:
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
