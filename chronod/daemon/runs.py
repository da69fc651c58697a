"""What the daemon holds in memory about jobs and runs: a carried job with its compiled
schedule and identity, a run in flight, one wake-up's writes, and the in-flight index."""

from __future__ import annotations

import fnmatch
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable

from chronod.core import occurrence, policy
from chronod.core.model import JobSpec, RunState, Trigger
from chronod.core.schedule import Schedule, compile_schedule, is_reboot
from chronod.store.api import Run


class Job:
    """A carried job: its spec, compiled schedule and identity on this node (in slots: one per job).

    The schedule may be compiled at its first use (`Job.on(..., compiled=False)`): a warm
    start of 100,000 unchanged jobs, whose stored occurrences need no schedule, would
    otherwise spend seconds before READY compiling them. So is a new job's whose file was
    validated by the load that brought it: the load computed its identity and first
    occurrence there (`JobSpec.hold_first`), which the job keeps until the occurrences
    take it (`take_first`). Its jitter offset may wait for its first use (`offset`
    None): a warm start reads its stored occurrences with their fire times, and hashes
    the key of a job only when one of its occurrences is made or read."""

    __slots__ = ("spec", "key", "_offset", "_schedule", "_first")

    def __init__(
        self,
        spec: JobSpec,
        schedule: Schedule | None,
        key: str,
        offset: int | None,
        first: occurrence.First | None = None,
    ) -> None:
        self.spec, self._schedule, self.key, self._offset, self._first = spec, schedule, key, offset, first

    @classmethod
    def on(cls, spec: JobSpec, node: str, *, compiled: bool = True) -> "Job":
        """The job `spec` carried by `node`: its schedule compiled (at its first use when
        not `compiled`: only for a spec whose schedule is known to compile), its key and
        jitter offset there (chronod.core.occurrence: what `placement` gives, without
        building a `Placement` for each of 100,000 jobs at start-up). A spec holding its
        first occurrence on `node` (its load computed it) gives its key and offset, and
        its schedule, known to compile, is compiled at its first use."""
        first = spec.take_first()
        if first is not None and first.node == node:
            return cls(spec, None, first.key, first.offset_s, first)
        key = occurrence.job_key(spec.id, spec.run_on.each, node)
        if compiled:
            schedule = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
            return cls(spec, schedule, key, occurrence.jitter_offset(key, spec.tolerance_s))
        return cls(spec, None, key, None)

    @property
    def offset(self) -> int:
        """Seconds added to each scheduled time (`occurrence.jitter_offset`)."""
        offset = self._offset
        if offset is None:
            offset = self._offset = occurrence.jitter_offset(self.key, self.spec.tolerance_s)
        return offset

    def take_first(self) -> occurrence.First | None:
        """The first occurrence its load computed (`Job.on`), let go of (None: none)."""
        first, self._first = self._first, None
        return first

    @property
    def schedule(self) -> Schedule:
        schedule = self._schedule
        if schedule is None:
            spec = self.spec
            schedule = self._schedule = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
        return schedule

    @property
    def reboot(self) -> bool:
        """Whether it is an @reboot job (told without compiling its schedule)."""
        return is_reboot(self.spec.schedule)

    def __repr__(self) -> str:
        return f"Job({self.spec.id!r}, key={self.key!r}, offset={self.offset})"


@dataclass
class Active:
    """A run this daemon is watching (launched here or adopted)."""

    run: Run
    handle: Any
    job: Job
    disowned: bool = False  # another node took the run over; the process is being terminated
    offline: bool = False  # started while the database was unreachable; spooled


@dataclass
class Batch:
    """What one wake-up writes together (`Store.commit_wakeup`): occurrences to store,
    waiting runs to settle (run_id, state, error), runs to claim and start."""

    inserts: list[Run] = field(default_factory=list)
    settles: list[tuple[str, str, str | None]] = field(default_factory=list)
    claims: list[tuple[Job, Run]] = field(default_factory=list)
    per_job: Counter[str] = field(default_factory=Counter)  # claims of each job, not yet started
    # the claims of each job: a wake-up that carries a backlog of thousands asks for a
    # job's claims at each of its due occurrences (the overlap rule), and scanning every
    # claim each time made a node past its ceiling slower the further behind it was
    by_job: dict[str, list[Run]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for job, run in self.claims:
            self.per_job[job.spec.id] += 1
            self.by_job.setdefault(job.spec.id, []).append(run)

    def claim(self, job: Job, run: Run) -> None:
        """Start `run` with this wake-up's claims."""
        self.claims.append((job, run))
        self.per_job[job.spec.id] += 1
        self.by_job.setdefault(job.spec.id, []).append(run)


class ActiveRuns(dict[str, Active]):
    """run_id -> Active, with an index by job so that overlap checks stay O(1) per launch
    when a thousand runs are in flight."""

    def __init__(self) -> None:
        super().__init__()
        self._by_job: dict[str, dict[str, Active]] = {}
        # and by resource: the slots taken are counted on every wake-up, for every line
        self._by_resource: dict[str, dict[str, Active]] = {}

    def __setitem__(self, run_id: str, active: Active) -> None:
        if run_id in self:
            del self[run_id]
        super().__setitem__(run_id, active)
        self._by_job.setdefault(active.job.spec.id, {})[run_id] = active
        if active.job.spec.resource:
            self._by_resource.setdefault(active.job.spec.resource, {})[run_id] = active

    def __delitem__(self, run_id: str) -> None:
        active = self[run_id]
        super().__delitem__(run_id)
        runs = self._by_job.get(active.job.spec.id, {})
        runs.pop(run_id, None)
        if not runs:
            self._by_job.pop(active.job.spec.id, None)
        resource = active.job.spec.resource
        if resource:
            held = self._by_resource.get(resource, {})
            held.pop(run_id, None)
            if not held:
                self._by_resource.pop(resource, None)

    def pop(self, run_id: str, *default: Any) -> Any:
        if run_id not in self:
            if default:
                return default[0]
            raise KeyError(run_id)
        active = self[run_id]
        del self[run_id]
        return active

    def for_job(self, job_id: str) -> list[Active]:
        """The runs of one job in flight here."""
        return list(self._by_job.get(job_id, {}).values())

    def count_live(self, job_id: str) -> int:
        """How many runs of the job are in flight here, not being terminated for another node
        (asked for every job waiting in a line at every wake-up: no list is built)."""
        runs = self._by_job.get(job_id)
        return sum(1 for a in runs.values() if not a.disowned) if runs else 0

    def any_live(self, job_id: str) -> bool:
        """Whether `count_live` is above 0, found at the first such run."""
        runs = self._by_job.get(job_id)
        return runs is not None and any(not a.disowned for a in runs.values())

    def holding(self, resource: str) -> Iterable[Active]:
        """The runs in flight here of jobs that take a slot of `resource`."""
        return self._by_resource.get(resource, {}).values()


def carries(spec: JobSpec, node: str) -> bool:
    """Whether this node runs the job at all (`run_on: {nodes: [globs]}` restricts)."""
    if spec.run_on.each or not spec.run_on.nodes:
        return True
    return any(fnmatch.fnmatchcase(node, g) for g in spec.run_on.nodes)


def new_run(job: Job, scheduled_at: datetime, trigger: Trigger = Trigger.SCHEDULE, rid: str | None = None) -> Run:
    """A pending occurrence of `job` at `scheduled_at` (fired at its jitter offset)."""
    return Run(
        run_id=rid or occurrence.run_id(job.key, scheduled_at),
        job_id=job.spec.id,
        job_key=job.key,
        scheduled_at=scheduled_at,
        fire_at=scheduled_at + timedelta(seconds=job.offset),
        state=RunState.PENDING,
        trigger=trigger,
    )


def fell_due_cancelled(job: Job, first: datetime | None, now: datetime, why: str) -> list[Run]:
    """The occurrences of a removed job from `first` on that fell due by `now`, recorded
    cancelled with `why`: no catch-up will run them, and none that fell due while its job
    was registered may go without a record. As the catch-up does, a very long gap of a very
    frequent job keeps the newest `policy.MAX_BACKLOG_RECORDS`."""
    kept: deque[Run] = deque(maxlen=policy.MAX_BACKLOG_RECORDS)
    at = first
    while at is not None and (run := new_run(job, at)).fire_at <= now:
        run.state, run.finished_at, run.error = RunState.CANCELLED, now, why
        kept.append(run)
        at = job.schedule.next_after(at)
    return list(kept)
