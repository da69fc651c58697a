"""One occurrence of a job on a node: its key, jitter, fire time and run id.

The rule, in full (every command and the daemon use these functions, nothing else):

- job key: the job id for `run_on: any` jobs, `"<id>@<node>"` for jobs that run on each node;
- jitter offset: `int.from_bytes(sha256(key.encode()).digest()[:8], "big") % tolerance_s`
  (0 when `tolerance_s` is 0); `fire_at = scheduled_at + offset` seconds;
- run id: `sha256((key + "|" + T).encode()).hexdigest()[:16]`, T the nominal (pre-jitter)
  `scheduled_at` in UTC as `YYYY-MM-DDTHH:MM:SSZ`: the same on every retry and every node;
- manual run id: the same with `"|manual|"` between key and T, T the request time, so a
  manual run never takes the id of a scheduled occurrence;
- next occurrence after an instant: the first whose FIRE time is after it (an occurrence
  scheduled just before the instant but jittered past it still counts).

A `Placement` is a job on one node (the key and offset its occurrences hang on); an
`Occurrence` is one nominal point of its schedule there.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, NamedTuple, Protocol

from chronod.core.model import JobSpec

MANUAL = "|manual|"


class _Schedule(Protocol):
    def next_after(self, after: datetime) -> datetime | None: ...


def job_key(job_id: str, run_on_each: bool, node: str | None) -> str:
    """`id` for jobs that run once per fleet, `id@node` for jobs that run on each node."""
    if run_on_each:
        if not node:
            raise ValueError(f"job {job_id!r} runs on each node: its key needs the node name")
        return f"{job_id}@{node}"
    return job_id


def node_of_key(key: str) -> str | None:
    """The node part of an `id@node` job key, None for fleet-wide keys."""
    return key.split("@", 1)[1] if "@" in key else None


def jitter_offset(key: str, tolerance_s: int) -> int:
    """Seconds added to every scheduled time of `key`; stable across days, nodes and restarts."""
    if tolerance_s <= 0:
        return 0
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % tolerance_s


def utc_stamp(at: datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SSZ` of an aware datetime, in UTC."""
    if at.tzinfo is None:
        raise ValueError("run identity needs an aware datetime")
    u = at if at.tzinfo is timezone.utc else at.astimezone(timezone.utc)
    # what strftime("%Y-%m-%dT%H:%M:%SZ") gives (glibc leaves a year under 1000 unpadded),
    # at a third of its cost: a month's report of a 5-minute job makes 8,640 of these
    return f"{u.year}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"


def run_id(key: str, scheduled_at: datetime) -> str:
    """The identity of one occurrence: the same on every retry and every node."""
    return hashlib.sha256(f"{key}|{utc_stamp(scheduled_at)}".encode()).hexdigest()[:16]


def manual_run_id(key: str, requested_at: datetime) -> str:
    """The run id of a manual trigger requested at `requested_at` (to the second)."""
    return hashlib.sha256(f"{key}{MANUAL}{utc_stamp(requested_at)}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Occurrence:
    """One nominal point of a job's schedule on one job key, with its identity."""

    job_id: str
    job_key: str
    node: str | None  # set for `run_on: each` jobs only
    scheduled_at: datetime
    fire_at: datetime
    run_id: str


@dataclass(frozen=True)
class Placement:
    """A job on one node: the key its run ids hang on and its jitter offset there."""

    job_id: str
    key: str
    node: str | None  # set for `run_on: each` jobs only
    offset_s: int

    def at(self, scheduled_at: datetime) -> Occurrence:
        """The occurrence nominally at `scheduled_at`."""
        fire = scheduled_at + timedelta(seconds=self.offset_s)
        return Occurrence(self.job_id, self.key, self.node, scheduled_at, fire, run_id(self.key, scheduled_at))

    def next_after(self, schedule: _Schedule, after: datetime) -> Occurrence | None:
        """The first occurrence whose fire time is after `after` (None: the schedule ended)."""
        at = schedule.next_after(after - timedelta(seconds=self.offset_s))
        return None if at is None else self.at(at)

    def upcoming(self, schedule: _Schedule, after: datetime, count: int) -> list[Occurrence]:
        """The first `count` occurrences whose fire time is after `after`, in order."""
        out: list[Occurrence] = []
        nxt = self.next_after(schedule, after)
        while nxt is not None and len(out) < count:
            out.append(nxt)
            at = schedule.next_after(nxt.scheduled_at)
            nxt = None if at is None else self.at(at)
        return out


def placement(spec: JobSpec, node: str | None) -> Placement:
    """The job `spec` on `node` (ignored for jobs that run once per fleet)."""
    each = spec.run_on.each
    key = job_key(spec.id, each, node)
    return Placement(spec.id, key, node if each else None, jitter_offset(key, spec.tolerance_s))


def placements(spec: JobSpec, nodes: Iterable[str] = ()) -> list[Placement]:
    """Where the job's occurrences live: one placement for `any`, one per node (sorted) for `each`."""
    if not spec.run_on.each:
        return [placement(spec, None)]
    return [placement(spec, n) for n in sorted(set(nodes))]


class First(NamedTuple):
    """A job's key and jitter offset on `node`, and its first occurrence whose fire time is
    after `after` (`scheduled_at` and `run_id` None: its schedule has no more): what the
    daemon needs of a new job, computed where its file is validated (`first_after`)."""

    node: str
    after: datetime
    key: str
    offset_s: int
    scheduled_at: datetime | None
    run_id: str | None

    def holds_at(self, node: str, now: datetime) -> bool:
        """Whether this is also the job's first occurrence after `now` on `node`: the first
        whose fire time is after `after` is the first after any later instant it still
        fires after (none of the schedule's fires lies between); an earlier `now` (the
        clock stepped back) may have one between, so it is computed again."""
        if node != self.node or now < self.after:
            return False
        return self.scheduled_at is None or self.scheduled_at + timedelta(seconds=self.offset_s) > now


def first_after(spec: JobSpec, schedule: _Schedule, node: str, after: datetime) -> First:
    """The job `spec` on `node` and its first occurrence whose fire time is after `after`:
    what `placement(spec, node).next_after(schedule, after)` gives, without building a
    `Placement` and an `Occurrence` for each of 100,000 jobs."""
    key = job_key(spec.id, spec.run_on.each, node)
    offset = jitter_offset(key, spec.tolerance_s)
    at = schedule.next_after(after - timedelta(seconds=offset))
    return First(node, after, key, offset, at, None if at is None else run_id(key, at))


def expression(expr: str) -> Placement:
    """A bare schedule expression (`--cron`): its own text as the key, no jitter."""
    return Placement(expr, expr, None, 0)


def at_each(spec: JobSpec, scheduled_at: datetime, nodes: Iterable[str] = ()) -> list[Occurrence]:
    """The occurrence(s) of `spec` nominally at `scheduled_at` (one per node for `each`)."""
    return [p.at(scheduled_at) for p in placements(spec, nodes)]


def environment(
    spec: JobSpec, run_id: str, scheduled_at: datetime, fire_at: datetime, attempt: int, node: str
) -> dict[str, str]:
    """The CHRONO_* variables of one attempt (docs/reference.md): the one place they are
    built, for a launch with the database and one without (the runner adds the spec's
    `env` and the base environment)."""
    return {
        "CHRONO_JOB_ID": spec.id,
        "CHRONO_RUN_ID": run_id,
        "CHRONO_SCHEDULED_AT": utc_stamp(scheduled_at),
        "CHRONO_FIRE_AT": utc_stamp(fire_at),
        "CHRONO_ATTEMPT": str(attempt),
        "CHRONO_OWNER": spec.owner,
        "CHRONO_NODE": node,
    }
