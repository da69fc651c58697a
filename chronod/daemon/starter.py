"""Claims and launches: `Starter` alone holds the runs in flight on this node (launched,
adopted or started offline). It claims runs in the store (a wake-up's claims in chunks,
one transaction each, under the start limit), starts their processes, and hands back the
ones whose supervisors ended. Others ask it how many runs of a job or a resource are
going; they never touch a run in flight."""

from __future__ import annotations

from datetime import datetime
from operator import attrgetter
from types import MappingProxyType
from typing import Callable, Mapping, ValuesView

from chronod.core import occurrence
from chronod.core.clock import Clock
from chronod.core.model import Trigger
from chronod.daemon.ledger import Ledger
from chronod.daemon.runs import Active, ActiveRuns, Batch, Job
from chronod.daemon.seams import Log, Metrics, NotifyService, Runner, Waker
from chronod.daemon.startlimit import StartLimit
from chronod.daemon.timeline import Timeline
from chronod.fleet.lease import Lease
from chronod.runner.api import Handle, LaunchRequest, Outcome
from chronod.store.api import Run, RunLedger

_HANDLE = attrgetter("handle")

CLAIM_CHUNK = 50  # runs claimed per transaction: the first ones start before the rest are claimed
LAUNCH_SLICE_S = 0.5  # a wake-up starts runs for at most this long, then collects children again

Pids = tuple[str, int, int, int]  # run id, attempt, job pid, supervisor pid


class Starter:
    """The runs in flight here, and how they start."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: RunLedger,
        runner: Runner,
        node: str,
        lease: Lease,
        renew: Callable[[], None],
        waker: Waker,
        metrics: Metrics,
        log: Log,
        ledger: Ledger,
        limit: StartLimit,
        timeline: Timeline,
        notify: NotifyService | None,
        fleet: bool,
    ) -> None:
        self.clock, self.store, self.runner, self.node, self.lease = clock, store, runner, node, lease
        self.renew, self.waker, self.metrics, self.log, self.notify = renew, waker, metrics, log, notify
        self.ledger, self.limit, self.timeline, self.fleet = ledger, limit, timeline, fleet
        self._active = ActiveRuns()  # run_id -> running here (launched or adopted)

    # ------------------------------------------------------------------ reads
    def __len__(self) -> int:
        return len(self._active)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._active

    def runs(self) -> ValuesView[Active]:
        return self._active.values()

    def view(self) -> Mapping[str, Active]:
        """The runs in flight by run id, read-only."""
        return MappingProxyType(self._active)

    def handles(self) -> list[Handle]:
        """The handles of the runs in flight, in the order they started here (asked at every
        wake-up: picked without a Python step per run)."""
        return list(map(_HANDLE, self._active.values()))

    def known(self) -> list[tuple[str, int]]:
        return [(r, a.run.attempts) for r, a in self._active.items()]

    def running(self, job_id: str) -> list[Active]:
        """The job's runs going here (not those being terminated for another node)."""
        return [a for a in self._active.for_job(job_id) if not a.disowned]

    def any_running(self, job_id: str) -> bool:
        return bool(self._active.for_job(job_id))

    def going(self, job_id: str) -> int:
        """Runs of the job going here: started, or claimed by this wake-up and starting."""
        return self._active.count_live(job_id) + self.ledger.claims_of(job_id)

    def any_going(self, job_id: str) -> bool:
        """Whether a run of the job is going here (`going` above 0), without counting them:
        a catch-up line asks at every wake-up and after every ending."""
        return self._active.any_live(job_id) or self.ledger.claims_of(job_id) > 0

    def going_runs(self, job_id: str) -> list[Run]:
        """The job's runs going here: started, or claimed by this wake-up and starting."""
        return [a.run for a in self.running(job_id)] + self.ledger.claim_runs(job_id)

    def going_ids(self, job_id: str) -> set[str]:
        """The run ids of the job started here or claimed by this wake-up."""
        return {a.run.run_id for a in self._active.for_job(job_id)} | self.ledger.claim_ids(job_id)

    def used(self, resource: str) -> int:
        """Slots of `resource` taken here."""
        return sum(1 for a in self._active.holding(resource) if not a.disowned)

    def lease_ok(self) -> bool:
        """Whether the lease holds, renewed first when it may have lapsed."""
        if not self.lease.ok():
            self.renew()
        return self.lease.ok()

    # ------------------------------------------------------------------ starting
    def claim(self, job: Job, run: Run, next_run: Run | None, limit: int) -> tuple[Run | None, bool]:
        """Dispatch in the store; in a fleet, a `resource` limit holds across every node.
        Returns the claimed run and whether the fleet's resource was full."""
        spec = job.spec
        if self.fleet and spec.resource:
            claimed, full = self.store.dispatch_in_group(
                run.run_id, self.node, self.lease.token, next_run, resource=spec.resource, limit=limit
            )
            return (None, True) if full else (claimed, False)
        claimed = self.store.dispatch(run.run_id, self.node, self.lease.token, next_run)
        if claimed is None and not self.fleet:
            self.log("dispatch.lost_race", "warning", job=spec.id, run=run.run_id)
        return claimed, False

    def claim_group(self, resource: str, limit: int, runs: list[tuple[Job, Run]]) -> set[str]:
        """Claim runs of `resource` together, in one transaction that counts the resource's
        runs on every node, and start them; returns the run ids claimed."""
        claimed, _ = self.store.dispatch_group(
            [r.run_id for _, r in runs], self.node, self.lease.token, [], resource=resource, limit=limit
        )
        jobs = {r.run_id: j for j, r in runs}
        started = [self.start_process(jobs[c.run_id], c, record=False) for c in claimed]
        self.store.set_processes([p for p in started if p is not None], self.lease.token)
        return {c.run_id for c in claimed}

    def flush(self, batch: Batch) -> None:
        """Write what a wake-up collected in one transaction with the first claims, then
        start the claimed runs, a chunk at a time: a node busy forking leaves the rest of
        a burst to the other nodes instead of holding all of it."""
        inserts = list({r.run_id: r for r in batch.inserts}.values())
        settles = batch.settles
        claims = self.limit.admit_starts(batch.claims, settles)  # the start limit; the rest wait or are skipped
        jobs = {run.run_id: job for job, run in claims}
        until = self.clock.monotonic() + LAUNCH_SLICE_S
        i = 0
        while inserts or settles or i < len(claims):
            if i and self.clock.monotonic() > until:
                # a node that cannot start them all in time collects its children first;
                # the rest wait one wake-up (or another node rescues them)
                self.limit.give_back(claims[i:])
                return
            if not self.lease.ok():
                self.renew()
            if self.waker.stop_requested or not self.lease.ok():
                # SIGTERM or a doubtful lease: store what must be stored, start nothing;
                # what is not claimed stays pending for the other nodes or the next start
                self.store.commit_wakeup(inserts, settles, [], self.node, self.lease.token)
                for _, run in claims[i:] + self.limit.take_backlog():
                    self.timeline.track(run)
                return
            began = self.clock.monotonic()
            chunk = [run.run_id for _, run in claims[i : i + CLAIM_CHUNK]]
            if chunk and self.notify is not None:
                self.notify.launching()  # its next round waits for the burst to be started
            claimed = self.store.commit_wakeup(inserts, settles, chunk, self.node, self.lease.token)
            self.limit.refund(len(chunk) - len(claimed))  # another node had them: no start spent
            if len(claimed) < len(chunk) and not self.lease.ok():
                # refused because this node was stopped past its lease during the write: what it
                # did not claim still waits (a `run_on: each` occurrence of this node's for no one
                # else), and is decided again, as a claim put off for a doubtful lease is (above)
                got = {c.run_id for c in claimed}
                for _, run in claims[i : i + CLAIM_CHUNK]:
                    if run.run_id not in got:
                        self.timeline.track(run)
            # start in the order decided (a catch-up backlog oldest first), not the database's
            pos = {rid: k for k, rid in enumerate(chunk)}
            claimed = sorted(claimed, key=lambda c: pos.get(c.run_id, len(pos)))
            inserts, settles, i = [], [], i + CLAIM_CHUNK
            started = [self.start_process(jobs[c.run_id], c, record=False) for c in claimed]
            self.store.set_processes([p for p in started if p is not None], self.lease.token)
            self.limit.started(len(claimed), self.clock.monotonic() - began)

    def start_process(self, job: Job, claimed: Run, record: bool = True) -> Pids | None:
        """Start the process of a claimed attempt and watch it; store its process ids now,
        or (`record=False`) return them for the caller to store with others."""
        env = occurrence.environment(
            job.spec, claimed.run_id, claimed.scheduled_at, claimed.fire_at, claimed.attempts, self.node
        )
        handle = self.runner.launch(LaunchRequest(claimed.run_id, claimed.attempts, job.spec, env))
        now = self.clock.now()
        lag = (now - claimed.fire_at).total_seconds()
        if claimed.attempts == 1 and claimed.trigger == Trigger.SCHEDULE:
            self.metrics.fire_lag.observe(max(lag, 0.0))
        self._active[claimed.run_id] = Active(claimed, handle, job)
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

    def start_offline(self, job: Job, run: Run, now: datetime) -> None:
        """Start an attempt with no database (the spool is its record until replay)."""
        env = occurrence.environment(job.spec, run.run_id, run.scheduled_at, run.fire_at, run.attempts, self.node)
        handle = self.runner.launch(LaunchRequest(run.run_id, run.attempts, job.spec, env))
        self._active[run.run_id] = Active(run, handle, job, offline=True)
        self.log(
            "run.started",
            job=job.spec.id,
            run=run.run_id,
            attempt=run.attempts,
            offline=True,
            lag_ms=round((now - run.fire_at).total_seconds() * 1000, 1),
        )

    def cancel(self, actives: list[Active], by: Run) -> None:
        """Terminate runs replaced by `by` (overlap: replace)."""
        for a in actives:
            self.log("run.replacing", job=a.job.spec.id, run=a.run.run_id, by=by.run_id)
            self.runner.cancel(a.handle)

    # ------------------------------------------------------------------ endings, recovery
    def ended(self, handles: list[Handle]) -> list[tuple[Active, Outcome]]:
        """The runs whose supervisors ended, with their outcomes; they are no longer in flight."""
        ended = []
        for handle in handles:
            active = self._active.get(handle.run_id)
            if active is not None and active.handle is not handle:
                active = None
            outcome = self.runner.collect(handle)
            if active is None or outcome is None:
                continue
            del self._active[active.run.run_id]
            ended.append((active, outcome))
        return ended

    def adopted(self, run: Run, handle: Handle, job: Job) -> None:
        """A run a previous chronod left, still going: watch it here."""
        self._active[run.run_id] = Active(run, handle, job)

    def stored_offline(self, run_id: str) -> None:
        """A run started offline is in the store now, under the current token."""
        active = self._active.get(run_id)
        if active is not None:
            active.run.token = self.lease.token
            active.offline = False

    def rejoin(self) -> None:
        """After a new lease: keep the runs nobody took over, terminate the ones another node
        now owns (offline runs are not stored yet: the spool replay claims them)."""
        for rid, a in list(self._active.items()):
            if a.disowned or a.offline:
                continue
            if self.store.adopt(rid, a.run.attempts, node=self.node, token=self.lease.token):
                a.run.token = self.lease.token
                continue
            a.disowned = True
            self.runner.cancel(a.handle)
            self.log(
                "run.disowned",
                "warning",
                job=a.job.spec.id,
                run=rid,
                attempt=a.run.attempts,
                why="taken over by another node while this node's lease had lapsed; terminating it here",
            )
