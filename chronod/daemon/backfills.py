"""Backfills: start a stored backfill's occurrences, oldest first, as their turn comes.

A backfill is stored by `chronoctl backfill` (chronod.store.backfills) with its
occurrences already chosen (chronod.core.backfill.choose); this part of the daemon only
starts them. Each wake-up with a backfill running reads how many of its runs are still in
flight, and while `backfill.may_start` allows (pause, overlap, --max-concurrency) opens
the next occurrence under its own run id with trigger `backfill` and hands it to the
normal path (`Admission.start_or_queue`: overlap, resource, retries, recording). The store counts
an occurrence started in the same transaction that opens its run, so a daemon killed in
the middle resumes with the next one; a run it opened but never started is pending and is
started like any other after the restart. In a fleet, the node that dispatches the job
drives its backfills (it looks for new ones at each heartbeat: the request that announced
one may have woken another node); for a job that runs on each node, each node starts the
occurrences of its own key when their turn comes. A backfill of a job removed from the
registry ends `cancelled`.

`Backfills` alone holds whether a backfill may be running, the end of the hold it set the
loop to wake at, and how far each backfill's occurrences are known to have ended.
"""

from __future__ import annotations

from datetime import datetime

from chronod.core import backfill
from chronod.core.clock import Clock
from chronod.core.model import ACTIVE_STATES, JobSpec, RunState
from chronod.daemon.admission import Admission
from chronod.daemon.fleetview import FleetView
from chronod.daemon.gate import Gate
from chronod.daemon.quarantine import Quarantine
from chronod.daemon.registry import Registry
from chronod.daemon.runs import Job, new_run
from chronod.daemon.seams import Log
from chronod.daemon.starter import Starter
from chronod.daemon.timeline import Timeline
from chronod.daemon.waits import Lines
from chronod.store.api import Store
from chronod.store.backfills import Backfill

WAKE = "backfill-wake"


class Backfills:
    """Driving stored backfills."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: Store,
        log: Log,
        quarantine: Quarantine,
        registry: Registry,
        timeline: Timeline,
        gate: Gate,
        starter: Starter,
        placement: FleetView,
        admission: Admission,
        lines: Lines,
    ) -> None:
        self.clock, self.store, self.log, self.quarantine = clock, store, log, quarantine
        self.registry, self.timeline, self.gate, self.starter = registry, timeline, gate, starter
        self.placement, self.admission, self.lines = placement, admission, lines
        # look on the next wake-up; cleared when no backfill is running, set again by a
        # `backfill` request and, in a fleet, by every heartbeat (another node may have taken
        # the request)
        self._looking = True
        self._wake: datetime | None = None  # the end of a hold the loop is already set to wake at
        self._ended: dict[int, int] = {}  # backfill id -> how many of its runs are known to have ended

    def look(self) -> None:
        """A backfill may have been stored (a request, or another node's at a heartbeat)."""
        self._looking = True

    def drive_backfills(self) -> None:
        """Start what the running backfills may start now; end those that are done."""
        if not self._looking:
            return
        running = self.store.backfills(active_only=True)
        self._looking = bool(running)
        for bf in reversed(running):  # oldest first
            job = self.registry.jobs.get(bf.job_id)
            if job is None:
                self.end_if_removed(bf)
                continue
            if bf.job_id in self.quarantine or not self.placement.owns(job):
                continue
            with self.quarantine.guard(job.spec, "backfill"):
                self.drive_backfill(job, bf)

    def held(self, spec: JobSpec) -> bool:
        """Whether a pause (of the job, its tag or its resource) or a maintenance window
        holds the job now; the loop then wakes when it ends by itself."""
        held, until = self.gate.held_now(spec, self.clock.now())
        if until is not None and until != self._wake:
            self._wake = until
            self.timeline.wake_at(until, WAKE)  # no such run: only a wake-up
        return held

    def in_flight(self, bf: Backfill) -> int:
        """How many of the backfill's started occurrences are still in flight. The ones
        before the first still in flight have ended and are not read again (a backfill of
        10,000 occurrences would otherwise read them all on every wake-up)."""
        lo = self._ended.get(bf.id, 0)
        ids = bf.run_ids[lo : bf.started]
        states = self.store.run_states(ids)
        active = [i for i, rid in enumerate(ids) if states.get(rid, RunState.PENDING) in ACTIVE_STATES]
        self._ended[bf.id] = lo + (active[0] if active else len(ids))
        return len(active)

    def retrying(self, job_id: str) -> int:
        """How many of the job's runs wait for their next attempt. Such a run still holds its
        job's line: its retry always starts, so a backfill run started during the backoff
        would run beside it."""
        return len(self.timeline.retrying(job_id))

    def end_if_removed(self, bf: Backfill) -> None:
        """A backfill of a job gone from the registry ends `cancelled` (one carried by
        other nodes only is theirs to drive)."""
        row = self.store.get_job(bf.job_id)
        if row is not None and row.removed_at is None:
            return
        if self.store.end_backfill(bf.id, "cancelled", "its job was removed from the registry"):  # (a backfill state)
            self.log("backfill.cancelled", "warning", backfill=bf.id, job=bf.job_id, why="job removed")

    def drive_backfill(self, job: Job, bf: Backfill) -> None:
        """Start the backfill's next occurrences while `may_start` allows."""
        spec, started = job.spec, bf.started
        in_flight = self.in_flight(bf)
        held = self.held(spec)
        while started < len(bf.items):
            # a scheduled occurrence waiting its turn (or for a slot of its resource) goes
            # first: the backfill yields
            ahead = self.starter.going(spec.id) + self.lines.queued(spec.id) + self.lines.waiting_for_slot(job)
            allowed = backfill.may_start(
                spec,
                paused=held,
                in_flight=in_flight,
                job_running=ahead or self.retrying(spec.id),
                max_concurrency=bf.max_concurrency,
            )
            rid, key, at, _ = bf.items[started]
            if not allowed or key != job.key:
                return
            run = new_run(job, at, trigger=backfill.TRIGGER, rid=rid)
            run.fire_at = self.clock.now()  # a resource's wait counts from now, not from the occurrence
            opened = self.store.open_backfill_run(bf.id, started, run)
            started += 1
            if opened is None:
                now = self.store.get_backfill(bf.id)
                if now is None or now.state != "running":  # cancelled meanwhile (chronoctl backfill --cancel)
                    self.log("backfill.stopped", backfill=bf.id, job=spec.id, state=now.state if now else "gone")
                    return
                self.log("backfill.passed", backfill=bf.id, job=spec.id, run=rid, why="in flight already")
                continue
            in_flight += 1
            self.log("backfill.started", backfill=bf.id, job=spec.id, run=rid, at=at, n=started, of=len(bf.items))
            self.admission.start_or_queue(job, opened)
        if in_flight == 0 and self.store.end_backfill(bf.id, "done"):
            done = backfill.progress(self.store.run_states(bf.run_ids), bf.run_ids, started)
            self.log("backfill.done", "info", backfill=bf.id, job=spec.id, **done)
