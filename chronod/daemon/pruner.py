"""The pruner: deletes runs older than their job's `history_days`, on a thread of its own.

Off the firing path: the loop never waits for it. Each batch is one short transaction (on
SQLite the write lock is held for a few milliseconds) and the pruner pauses between
batches, so the loop's writes go first. What is deleted and the watermark that lets an
audit say "pruned" move together, in the same transaction (chronod.core.retention).
In a fleet one node prunes, the first live one by name; the others look again later.
Each round also measures the database (size, runs per state) for the metrics.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any, Callable, Mapping

from chronod.core import retention
from chronod.core.model import ACTIVE_STATES, TERMINAL_STATES
from chronod.store.api import StoreError

EVERY_S = 600.0  # a round every ten minutes: retention is counted in days
FIRST_ROUND_S = 5.0  # after start-up (the loop is ready by then), then every EVERY_S
BATCH = 500
PAUSE_S = 0.05
MIN_HISTORY_DAYS = 1  # the shortest retention a job may ask for (chronod.core.validate)
READ_ONE_BY_ONE = 200  # definitions not carried here read one by one; more: all at once


class Pruner:
    """Retention rounds: `step(now)` does one; `start()` runs them on a timer."""

    def __init__(
        self,
        store: Any,
        clock: Any,
        log: Callable[..., None],
        node: str,
        *,
        metrics: Any = None,
        every_s: float = EVERY_S,
        first_s: float = FIRST_ROUND_S,
        batch: int = BATCH,
        pause_s: float = PAUSE_S,
        known_specs: Callable[[], Mapping[str, Any]] | None = None,
    ):
        self.store, self.clock, self.log, self.node, self.metrics = store, clock, log, node, metrics
        self.known_specs = known_specs  # the daemon's specs by id: shared, not parsed again
        self.every_s, self.first_s, self.batch, self.pause_s = every_s, first_s, batch, pause_s
        self._stop = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Run rounds in a background thread until `stop()`."""
        self.thread = threading.Thread(target=self.run, name="chrono-pruner", daemon=True)
        self.thread.start()

    def stop(self, wait_s: float = 5.0) -> None:
        """Stop after the batch in progress."""
        self._stop.set()
        if self.thread is not None:
            self.thread.join(wait_s)

    def run(self) -> None:
        """The thread body: a round now and then; a database error waits for the next round."""
        delay = self.first_s
        while not self._stop.wait(delay):
            try:
                self.step(self.clock.now())
            except StoreError as e:  # an outage: the loop reports it; retention can wait
                self.log("retention.failed", "warning", error=str(e))
            except Exception as e:  # noqa: BLE001 - one bad round must not end retention for the daemon's life
                self.log("retention.failed", "error", error=f"{type(e).__name__}: {e}")
            delay = self.every_s

    def step(self, now: datetime) -> int:
        """One round: prune every job past its retention (if this node leads), then measure.
        Returns how many runs were deleted."""
        deleted = self._prune(now) if self._leads() else 0
        if deleted:
            self.log("retention.pruned", runs=deleted)
        self._measure()
        return deleted

    def _leads(self) -> bool:
        live = [name for name, _ in self.store.live_nodes()]
        return not live or live[0] == self.node

    def _prune(self, now: datetime) -> int:
        days = self._history_days(now)
        work: list[tuple[str, int]] = []
        for kept_s, ids in retention.by_retention(days).items():
            old = set(self.store.job_ids_with_runs_before(retention.cutoff(now, kept_s)))
            work += [(job_id, kept_s) for job_id in ids if job_id in old]
        default_s = retention.DEFAULT_HISTORY_DAYS * retention.DAY_S
        old = self.store.job_ids_with_runs_before(retention.cutoff(now, default_s))
        work += [(job_id, default_s) for job_id in retention.unknown_jobs(old, days)]
        return sum(self._prune_job(job_id, retention.cutoff(now, kept_s), kept_s) for job_id, kept_s in work)

    def _history_days(self, now: datetime) -> dict[str, int]:
        """`history_days` of every job that may have runs to prune. The loop's specs give
        the carried jobs'; only the jobs with runs older than the shortest retention and no
        spec here (removed, or carried by other nodes) are read from the store, one by one
        while they are few. Reading every stored job each round (100,000 rows) held the
        interpreter for seconds and left the heap larger after every round."""
        known = self.known_specs() if self.known_specs is not None else None
        if known is None:
            return {row.job_id: row.spec.history_days for row in self.store.jobs(include_removed=True)}
        days = {job_id: spec.history_days for job_id, spec in known.items()}
        old = self.store.job_ids_with_runs_before(retention.cutoff(now, MIN_HISTORY_DAYS * retention.DAY_S))
        others = [job_id for job_id in old if job_id not in days]
        if len(others) > READ_ONE_BY_ONE:
            rows = self.store.jobs(include_removed=True, known=known)
            return {row.job_id: row.spec.history_days for row in rows}
        for job_id in others:
            row = self.store.get_job(job_id)
            if row is not None:
                days[job_id] = row.spec.history_days
        return days

    def _prune_job(self, job_id: str, before: datetime, kept_s: int) -> int:
        total = 0
        while not self._stop.is_set():
            n = self.store.prune_runs(job_id, before, kept_s=kept_s, limit=self.batch)
            total += n
            if self.metrics is not None and n:
                self.metrics.pruned.inc(n)
            if n < self.batch:
                break
            self._stop.wait(self.pause_s)
        return total

    def _measure(self) -> None:
        if self.metrics is None:
            return
        summary = self.store.metrics()
        if summary.get("database_bytes") is not None:
            self.metrics.database_bytes.set(summary["database_bytes"])
        counts = summary["runs_by_state"]
        for state in sorted({*ACTIVE_STATES, *TERMINAL_STATES, *counts}):  # a state that emptied reads 0
            self.metrics.stored_runs.labels(state=state).set(counts.get(state, 0))
