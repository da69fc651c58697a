"""Database outages: go offline with backoff, keep `each` jobs running with the spool as
their record (chronod.fleet.spool), hold `any` jobs back for catch-up, and on reconnect
replay the spool and re-read what is stored."""

from __future__ import annotations

import heapq
from datetime import datetime
from typing import Any

from chronod.core import occurrence
from chronod.daemon.runs import Active, Job
from chronod.daemon.waker import Wakeups
from chronod.store.api import Run, StoreError

OUTAGE_BACKOFF_S = (0.5, 30.0)  # first retry, longest wait between retries


class Outage:
    """Offline ticks, the spool, reconnect. Part of `Daemon` (chronod.daemon.loop)."""

    def went_offline(self, e: StoreError) -> None:
        """The database failed: log once per outage, then retry with backoff."""
        mono = self.clock.monotonic()
        if self.outage is None:
            self.outage = (mono, str(e))
            self.backoff_s = OUTAGE_BACKOFF_S[0]
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
            self.backoff_s = min(self.backoff_s * 2, max(longest, OUTAGE_BACKOFF_S[0]))
        self.retry_at = mono + self.backoff_s * self.rng.uniform(0.8, 1.2)

    def offline_tick(self, woke: Wakeups) -> None:
        """One wake-up without the database: record endings in the spool, start due `each`
        runs, hold `any` runs back, and try to reconnect when the backoff says so."""
        if woke.stop:
            self.stopping = True
            return
        self.children_exited(woke.children)
        self.reload_wanted |= woke.reload or woke.requests
        self.ping_watchdog()  # the process is healthy; the database is not
        if self.clock.monotonic() >= self.retry_at:
            self.reconnect()
            if self.outage is None:
                return
        self.run_due_offline()

    def reconnect(self) -> None:
        """The database answers again: rejoin (renew or a new token), replay the spool,
        re-read what is stored (the runs held back fall due and go through catch-up)."""
        started, first = self.outage
        # The other nodes lost the database too and may not have renewed yet: a lease that
        # lapsed during the outage says nothing about its node until it had a lease's time
        # to come back (a takeover now would re-run work that finished and is spooled).
        self.takeover_after = self.clock.monotonic() + self.lease_ttl_s
        self.heartbeat()
        if self.offline_new:
            self.store.insert_runs([r for r in self.offline_new.values() if r.state == "pending"])
        self.replay_spool()
        self.adopt()
        self.reload_wanted |= self.reloads.busy  # one prepared across the outage may have failed
        if self.reload_wanted:
            self.reload()
            self.take_requests()
        self.load_pending()
        self.reconcile()
        self.offline_new = {}
        self.reload_wanted = False
        self.outage = None
        self.metrics.store_up.set(1)
        self.log("store.reachable", outage_s=round(self.clock.monotonic() - started, 1), first_error=first)

    def run_due_offline(self) -> None:
        now = self.clock.now()
        held = []
        while self.heap and self.heap[0][0] <= now:
            entry = heapq.heappop(self.heap)
            run = self.pending.get(entry[2])
            job = self.jobs.get(run.job_id) if run is not None else None
            if job is None:
                continue
            if not job.spec.run_on.each:
                held.append(entry)  # a late fire beats a double fire: wait for the database
                continue
            self.pending.pop(run.run_id, None)
            self.launch_offline(job, run, now)
        # held `any` runs come back from the database at reconnect; keep them out of the heap
        # meanwhile so that the loop sleeps until the next `each` fire or retry
        for _, _, rid in held:
            self.pending.pop(rid, None)

    def launch_offline(self, job: Job, run: Run, now: datetime) -> None:
        """Start an `each` run with no database: the spool is its record until replay."""
        from chronod.runner.api import LaunchRequest

        nxt = self.next_run(job, now)
        if nxt is not None:
            self.offline_new[nxt.run_id] = nxt
            self.track(nxt)
        spec = job.spec
        if self.active.for_job(spec.id) and spec.overlap == "forbid":
            self.spool.append(
                "skip",
                run=run.as_dict(),
                state="skipped_overlap",
                error="previous run still running; overlap: forbid (database unreachable)",
            )
            return
        run.attempts += 1
        run.state, run.node, run.started_at = "running", self.node, now
        env = {
            "CHRONO_JOB_ID": spec.id,
            "CHRONO_RUN_ID": run.run_id,
            "CHRONO_SCHEDULED_AT": occurrence.utc_stamp(run.scheduled_at),
            "CHRONO_FIRE_AT": occurrence.utc_stamp(run.fire_at),
            "CHRONO_ATTEMPT": str(run.attempts),
            "CHRONO_OWNER": spec.owner,
            "CHRONO_NODE": self.node,
        }
        self.spool.append("start", run=run.as_dict())
        handle = self.runner.launch(LaunchRequest(run.run_id, run.attempts, spec, env))
        self.active[run.run_id] = Active(run, handle, job, offline=True)
        self.log(
            "run.started",
            job=spec.id,
            run=run.run_id,
            attempt=run.attempts,
            offline=True,
            lag_ms=round((now - run.fire_at).total_seconds() * 1000, 1),
        )

    def spool_outcome(self, active: Active, outcome: Any) -> None:
        run = active.run
        self.spool.append(
            "finish",
            run_id=run.run_id,
            attempt=run.attempts,
            state=outcome.state,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            output_tail=outcome.output_tail,
            output_bytes=outcome.output_bytes,
            error=outcome.error,
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

    def replay_spool(self) -> None:
        """Write what happened while the database was unreachable, oldest first."""
        records = self.spool.records()
        if not records:
            return
        written = 0
        for rec in records:
            kind = rec["kind"]
            if kind == "start":
                run = Run(**rec["run"])
                ok = self.store.claim_offline(run, self.node, self.lease.token) is not None
                if ok and run.run_id in self.active:
                    self.active[run.run_id].run.token = self.lease.token
                    self.active[run.run_id].offline = False
            elif kind == "finish":
                self.store.adopt(rec["run_id"], rec["attempt"], node=self.node, token=self.lease.token)
                ok = self.store.finish(
                    rec["run_id"],
                    rec["attempt"],
                    rec["state"],
                    exit_code=rec["exit_code"],
                    signal=rec["signal"],
                    output_tail=rec["output_tail"],
                    output_bytes=rec["output_bytes"],
                    error=rec["error"],
                    token=self.lease.token,
                    finished_at=rec["finished_at"],
                )
                if ok:
                    stored = self.store.get_run(rec["run_id"])
                    self.metrics.runs.labels(stored.job_id if stored else "", rec["state"]).inc()
            else:
                run = Run(**rec["run"])
                self.store.insert_runs([run])
                ok = self.store.settle(
                    run.run_id, rec["state"], error=rec["error"], next_run=None, node=self.node, token=self.lease.token
                )
            written += bool(ok)
        self.spool.clear()
        self.log("spool.replayed", records=len(records), written=written)
