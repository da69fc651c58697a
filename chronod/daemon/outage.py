"""Database outages: go offline with backoff, keep `each` jobs running with the spool as
their record (chronod.fleet.spool), hold `any` jobs back for catch-up, and on reconnect
replay the spool (the loop then re-reads what is stored).

`Connectivity` alone holds the outage (since when, the first error, the backoff and the
next retry), the occurrences made while offline, whether a reload waits for the
database, when takeovers may begin again, and the spool."""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path
from typing import Any

from chronod.core import accounts, outputs, policy
from chronod.core.clock import Clock
from chronod.core.model import RunState, Trigger
from chronod.daemon.endings import output_budget
from chronod.daemon.occurrences import Occurrences
from chronod.daemon.registry import Registry
from chronod.daemon.runs import Active, Job, fell_due_cancelled
from chronod.daemon.seams import Accounts, Log, Metrics
from chronod.daemon.starter import Starter
from chronod.daemon.timeline import Timeline
from chronod.fleet.lease import Lease
from chronod.fleet.spool import Spool
from chronod.runner.api import Outcome
from chronod.store.api import Run, Store, StoreError

OUTAGE_BACKOFF_S = (0.5, 30.0)  # first retry, longest wait between retries


class Connectivity:
    """Offline or not; the spool; what reconnecting must write."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: Store,
        node: str,
        lease: Lease,
        log: Log,
        metrics: Metrics,
        rng: random.Random,
        fleet: bool,
        lease_ttl_s: float,
        spool_path: Path,
        registry: Registry,
        occurrences: Occurrences,
        timeline: Timeline,
        starter: Starter,
        accounts: Accounts,
    ) -> None:
        self.clock, self.store, self.node, self.lease, self.log = clock, store, node, lease, log
        self.metrics, self.rng, self.fleet, self.lease_ttl_s = metrics, rng, fleet, lease_ttl_s
        self.registry, self.occurrences, self.timeline, self.starter = registry, occurrences, timeline, starter
        self._outage: tuple[float, str] | None = None  # (monotonic start, first error)
        self._retry_at = 0.0  # monotonic
        self._backoff_s = OUTAGE_BACKOFF_S[0]
        self._offline_new: dict[str, Run] = {}  # occurrences materialized during an outage
        self._held_any: dict[str, tuple[Job, Run]] = {}  # job id -> its first `any` occurrence held back offline
        self._takeover_after = 0.0  # monotonic; no takeovers before (see `reconnecting`)
        self._reload_wanted = False  # a reload or request arrived during an outage
        self._spool = Spool(spool_path)
        self._kept = False  # the spool holds records a lapsed lease kept from being written
        self.accounts = accounts

    @property
    def offline(self) -> bool:
        return self._outage is not None

    def retry_at(self) -> float:
        """When (monotonic) to try the database again."""
        return self._retry_at

    def may_take_over(self, mono: float) -> bool:
        return mono >= self._takeover_after

    def went_offline(self, e: StoreError) -> None:
        """The database failed: log once per outage, then retry with backoff."""
        mono = self.clock.monotonic()
        if self._outage is None:
            self._outage = (mono, str(e))
            self._backoff_s = OUTAGE_BACKOFF_S[0]
            self.metrics.store_up.set(0)
            self.log(
                "store.unreachable",
                "error",
                message=str(e),
                note="each jobs keep running and are spooled; any jobs wait and catch up",
            )
        else:
            # in a fleet, back within a third of a lease of the database: the others wait
            # one lease after their own return before they take this node's work over
            longest = min(OUTAGE_BACKOFF_S[1], self.lease_ttl_s / 3) if self.fleet else OUTAGE_BACKOFF_S[1]
            self._backoff_s = min(self._backoff_s * 2, max(longest, OUTAGE_BACKOFF_S[0]))
        self._retry_at = mono + self._backoff_s * self.rng.uniform(0.8, 1.2)

    def want_reload(self) -> None:
        """A reload or a request arrived while offline: the reconnect does it."""
        self._reload_wanted = True

    def reload_wanted(self, busy: bool) -> bool:
        """Whether the reconnect must reload (`busy`: one prepared across the outage may have failed)."""
        self._reload_wanted |= busy
        return self._reload_wanted

    def reconnecting(self) -> None:
        """The database answers again; the other nodes lost it too and may not have renewed
        yet: a lease that lapsed during the outage says nothing about its node until it had
        a lease's time to come back (a takeover now would re-run work that finished and is
        spooled). Then store the occurrences made offline."""
        self._takeover_after = self.clock.monotonic() + self.lease_ttl_s

    def store_offline_new(self) -> None:
        if self._offline_new:
            self.store.insert_runs([r for r in self._offline_new.values() if r.state == RunState.PENDING])

    def reconnected(self) -> None:
        """The reconnect wrote everything: online again."""
        assert self._outage is not None
        started, first = self._outage
        self._offline_new = {}
        self._held_any = {}
        self._reload_wanted = False
        self._outage = None
        self.metrics.store_up.set(1)
        self.log("store.reachable", outage_s=round(self.clock.monotonic() - started, 1), first_error=first)

    def run_due_offline(self) -> None:
        """Start due `each` runs; hold `any` runs back (they come back from the database at
        reconnect; out of the timeline meanwhile, so that the loop sleeps until the next
        `each` fire or retry)."""
        now = self.clock.now()
        jobs = self.registry.jobs
        for run in self.timeline.due(now):
            job = jobs.get(run.job_id)
            if job is None:
                continue
            self.timeline.take(run.run_id)
            if job.spec.run_on.each:
                self.launch_offline(job, run, now)  # a late fire beats a double fire: `any` waits
            elif run.state == RunState.PENDING and run.trigger == Trigger.SCHEDULE:
                self._held_any.setdefault(run.job_id, (job, run))

    def record_removed_held(self) -> None:
        """The reconnect's reload removed jobs whose `any` occurrences fell due offline: the
        removal cancelled the stored one, and those after it, never materialized (the
        catch-up would have), are recorded cancelled too, up to now, when the removal is
        recorded: none that fell due while its job was registered is silent. A job another
        node of a fleet still carries is left to that node's catch-up."""
        now = self.clock.now()
        runs: list[Run] = []
        for job_id, (job, first) in sorted(self._held_any.items()):
            row = self.store.get_job(job_id) if job_id not in self.registry.jobs else None
            if job_id in self.registry.jobs or (row is not None and row.removed_at is None):
                continue
            why = f"{policy.REMOVED_FROM_REGISTRY}; it fell due while the database was unreachable"
            runs.extend(fell_due_cancelled(job, first.scheduled_at, now, why))
        if runs:
            self.store.insert_runs(runs)  # the stored one is left as the removal settled it
            for run in runs:
                self.metrics.runs.labels(run.job_id, RunState.CANCELLED).inc()
            self.log("runs.cancelled", jobs=len({r.job_id for r in runs}), count=len(runs), why="job removed")
        self._held_any = {}

    def launch_offline(self, job: Job, run: Run, now: datetime) -> None:
        """Start an `each` run with no database: the spool is its record until replay. The
        overlap rule is the one online (chronod.core.policy.overlap)."""
        nxt = self.occurrences.next_run(job, now)
        if nxt is not None:
            self._offline_new[nxt.run_id] = nxt
            self.timeline.track(nxt)
        spec = job.spec
        action = policy.overlap(spec, self.starter.going(spec.id))
        if action == policy.Overlap.SKIP:
            self._spool.append(
                "skip",
                run=run.as_dict(),
                state=RunState.SKIPPED_OVERLAP,
                error="previous run still running; overlap: forbid (database unreachable)",
            )
            return
        why = accounts.refusal(self.accounts.account(spec.user), now) if spec.user else None
        if why is not None:  # the account check is the one online (Admission.account_refuses)
            self._spool.append("skip", run=run.as_dict(), state=RunState.SKIPPED_ACCOUNT, error=why)
            return
        if action == policy.Overlap.REPLACE:
            self.starter.cancel(self.starter.running(spec.id), by=run)
        run.attempts += 1
        run.state, run.node, run.started_at = RunState.RUNNING, self.node, now
        self._spool.append("start", run=run.as_dict())
        self.starter.start_offline(job, run, now)

    def spool_outcomes(self, ended: list[tuple[Active, Outcome]]) -> set[str]:
        """Outcomes while offline go to the spool; returns the run ids kept there."""
        for active, outcome in ended:
            self.spool_outcome(active, outcome)
        return {active.run.run_id for active, _ in ended}

    def spool_outcome(self, active: Active, outcome: Outcome) -> None:
        run = active.run
        tail, note = outputs.within_budget(outcome.output_tail, output_budget())
        self._spool.append(
            "finish",
            run_id=run.run_id,
            attempt=run.attempts,
            state=outcome.state,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            output_tail=tail,
            output_bytes=outcome.output_bytes,
            error=outputs.with_note(outcome.error, note),
            finished_at=outcome.finished_at or self.clock.now(),
        )
        self.log(
            "run.finished",
            job=run.job_id,
            run=run.run_id,
            attempt=run.attempts,
            state=outcome.state,
            exit_code=outcome.exit_code,
            spooled=True,
        )

    def replay_finish(self, rec: dict[str, Any]) -> bool:
        """Store one spooled outcome; in a database that is full, without its output (a
        note says so), so that a replay never retries a large write forever."""

        def write(tail: str | None, error: str | None) -> bool:
            return bool(
                self.store.finish(
                    rec["run_id"],
                    rec["attempt"],
                    rec["state"],
                    exit_code=rec["exit_code"],
                    signal=rec["signal"],
                    output_tail=tail,
                    output_bytes=rec["output_bytes"],
                    error=error,
                    token=self.lease.token,
                    finished_at=rec["finished_at"],
                )
            )

        try:
            return write(rec["output_tail"], rec["error"])
        except Exception as e:
            if not rec["output_tail"] or not outputs.is_database_full(e):
                raise
            self.log("store.full", "warning", runs=1, what="run output dropped, outcome kept")
            return write(None, outputs.with_note(rec["error"], outputs.DB_FULL_NOTE))

    def replay_kept(self) -> None:
        """Write what a lease that lapsed during the last replay kept from being written."""
        if self._kept:
            self.replay_spool()

    def replay_spool(self) -> None:
        """Write what happened while the database was unreachable, oldest first. A node
        stopped during the replay past its lease has its writes refused (stale token): the
        records not written stay in the spool for the next token (`replay_kept`), or the
        store would keep a run that started offline as one still waiting to start."""
        records = self._spool.records()
        if not records:
            self._kept = False
            return
        unwritten = []
        for rec in records:
            kind = rec["kind"]
            if kind == "start":
                run = Run(**rec["run"])
                ok = self.store.claim_offline(run, self.node, self.lease.token) is not None
                if ok:
                    self.starter.stored_offline(run.run_id)
            elif kind == "finish":
                self.store.adopt(rec["run_id"], rec["attempt"], node=self.node, token=self.lease.token)
                ok = self.replay_finish(rec)
                if ok:
                    stored = self.store.get_run(rec["run_id"])
                    self.metrics.runs.labels(stored.job_id if stored else "", rec["state"]).inc()
            else:
                run = Run(**rec["run"])
                self.store.insert_runs([run])
                ok = self.store.settle(
                    run.run_id, rec["state"], error=rec["error"], next_run=None, node=self.node, token=self.lease.token
                )
            if not ok:
                unwritten.append(rec)
        self._kept = bool(unwritten) and not self.lease.ok()
        if self._kept:
            self._spool.keep(unwritten)
            self.log(
                "spool.kept",
                "warning",
                records=len(records),
                kept=len(unwritten),
                why="the lease lapsed during the replay; written under the renewed or next token",
            )
            return
        self._spool.clear()
        self.log("spool.replayed", records=len(records), written=len(records) - len(unwritten))
