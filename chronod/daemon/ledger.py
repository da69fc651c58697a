"""The writes of one wake-up: occurrences to store, runs to settle, runs to claim.

`Ledger` alone holds the wake-up's `Batch` (`Store.commit_wakeup` writes it in one
transaction with the first claims). Outside a wake-up (start-up, a reload, a rescue on
its own) each write goes to the store at once."""

from __future__ import annotations

from chronod.core import policy
from chronod.core.model import RunState
from chronod.daemon.runs import Batch, Job
from chronod.daemon.seams import Log, Metrics
from chronod.fleet.lease import Lease
from chronod.store.api import Occurrences, Run, RunHistory


def retry_given_up(store: RunHistory, run: Run, of: int | None, why: str) -> tuple[RunState, str]:
    """The state and error to settle a run with whose next retry will never start
    (`policy.retry_given_up`), from its stored attempts and error."""
    tried = store.attempts(run.run_id)
    stored = store.get_run(run.run_id)
    error = (stored.error if stored is not None else None) or run.error
    return policy.retry_given_up(tried[-1].state if tried else None, error, run.attempts + 1, of, why)


class Ledger:
    """Settles and stores occurrences, with this wake-up's writes or now."""

    def __init__(self, store: Occurrences, node: str, lease: Lease, metrics: Metrics, log: Log) -> None:
        self.store, self.node, self.lease, self.metrics, self.log = store, node, lease, metrics, log
        self._batch: Batch | None = None  # set while a wake-up collects its writes

    def open(self, claims: list[tuple[Job, Run]]) -> None:
        """A wake-up begins collecting its writes (`claims`: runs left from the last one)."""
        self._batch = Batch(claims=claims)

    def take(self) -> Batch | None:
        """The wake-up's writes; from now on writes go to the store at once."""
        batch, self._batch = self._batch, None
        return batch

    def claiming(self) -> bool:
        """Whether this wake-up has runs to claim (a node with runs waiting to start)."""
        return self._batch is not None and bool(self._batch.claims)

    def collecting(self) -> bool:
        return self._batch is not None

    def claims_of(self, job_id: str) -> int:
        """Runs of the job claimed by this wake-up and starting."""
        return self._batch.per_job[job_id] if self._batch is not None else 0

    def claim_ids(self, job_id: str) -> set[str]:
        if self._batch is None or not self._batch.per_job[job_id]:
            return set()
        return {r.run_id for r in self._batch.by_job[job_id]}

    def store_now(self, runs: list[Run]) -> None:
        """Write now those of `runs` this wake-up holds among its occurrences to store. A run
        claimed at once (a resource's slot is counted as it starts, not with the wake-up's
        claims) must exist in the store before its claim: claimed first, it was "lost to
        another node" and left pending for good, its row written just after."""
        if self._batch is None:
            return
        ids = {r.run_id for r in runs}
        held = [r for r in self._batch.inserts if r.run_id in ids]
        if held:
            self.store.insert_runs(held)

    def claim_runs(self, job_id: str) -> list[Run]:
        """The job's runs claimed by this wake-up and starting."""
        if self._batch is None or not self._batch.per_job[job_id]:
            return []
        return list(self._batch.by_job[job_id])

    def claim(self, job: Job, run: Run) -> None:
        """Start `run` with this wake-up's claims (only while collecting)."""
        assert self._batch is not None
        self._batch.claim(job, run)

    def settle(self, run: Run, state: RunState, why: str, next_run: Run | None) -> None:
        """Record a terminal state for an occurrence that will not start."""
        self.settle_quietly(run.run_id, state, why, next_run)
        self.metrics.runs.labels(run.job_id, state).inc()
        self.log("run.settled", job=run.job_id, run=run.run_id, state=state, why=why)

    def settle_quietly(self, run_id: str, state: RunState, why: str | None, next_run: Run | None) -> None:
        """`settle` without the log line: with this wake-up's writes, or now."""
        if self._batch is None:
            self.store.settle(run_id, state, error=why, next_run=next_run, node=self.node, token=self.lease.token)
            return
        self._batch.settles.append((run_id, state, why))
        self.store_runs([next_run])

    def store_runs(self, runs: list[Run | None]) -> None:
        """Store occurrences (existing run ids are left alone): with this wake-up's writes, or now."""
        some = [r for r in runs if r is not None]
        if not some:
            return
        if self._batch is not None:
            self._batch.inserts.extend(some)
        else:
            self.store.insert_runs(some)
