"""A schedule explained: what `chronoctl explain` says of a job or a bare cron expression,
as a typed answer that a web console or the simulation can ask too.

The answer, before the code: the schedule in words and its class (docs/reference.md,
Time zones and daylight saving time: fixed-time, wildcard, interval, calendar, reboot) with what a
DST change does to it and the DST policy in force; the job key, the jitter offset and the
rule that makes it (`chronod.core.occurrence`); how the first next fire's run id is made;
the next fires, each with the maintenance window that holds it; for a job that runs on
each node, its first fire on every node; the windows that hold the job, with their next
spans in the coming `WINDOW_LOOKAHEAD_DAYS`; and every date of the coming year on which
a clock change alters what the schedule does.

Pure: the schedule, its placement, the nodes and the windows are given (`Target`), and
so is the instant the explanation starts from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Sequence

from chronod.core import blackout, occurrence
from chronod.core.blackout import Hit, Window
from chronod.core.model import JobSpec
from chronod.core.occurrence import Occurrence, Placement
from chronod.core.schedule import DstEvent, Schedule

FIRES = 5  # next fires an explanation lists
WINDOW_LOOKAHEAD_DAYS = 35  # how far ahead a maintenance window's spans are looked for
WINDOW_SPANS = 3  # spans of each window listed
DST_LOOKAHEAD = timedelta(days=365)
JITTER_FORMULA = "int.from_bytes(sha256(job_key).digest()[:8], 'big') % tolerance_s (0 when tolerance_s is 0)"

_GAP_TEXT = {
    "shift": "when a DST change skips its time it fires at the moment the clock jumps, once for each skipped time",
    "skip": "when a DST change skips its time it does not run that day",
}
_REPEAT_TEXT = {
    "first": "when a DST change repeats its time it fires only in the first pass",
    "last": "when a DST change repeats its time it fires only in the second pass",
    "both": "when a DST change repeats its time it fires in each pass, each its own occurrence and run id",
}
_CLASS_TEXT = {
    "fixed-time": "fixed-time (minute and hour are fixed): {gap}; {repeat}",
    "wildcard": (
        "wildcard (minute or hour starts with '*'): times skipped by a DST change are simply skipped; "
        "times repeated by a DST change fire in both passes"
    ),
    "interval": "interval (@every): fires at UTC multiples of the interval since the epoch; DST changes nothing",
    "reboot": "@reboot: once each time the daemon starts after a boot; no clock times",
    "calendar": (
        "systemd calendar (@calendar): systemd's DST rules: a time a DST change skips is not run; "
        "a repeated time runs in the pass the search is in (the first, unless it starts in the second)"
    ),
}


@dataclass(frozen=True)
class Target:
    """A schedule with its identity: the job (None for a bare expression), where its
    occurrences live (`place`: key, node and jitter offset), for a job that runs on each
    node its placement on every node known (`fleet`), and the registry's maintenance
    windows."""

    job: JobSpec | None
    expr: str
    tz: str
    schedule: Schedule
    place: Placement
    tolerance_s: int
    fleet: tuple[Placement, ...] = ()
    windows: tuple[Window, ...] = ()

    @property
    def key(self) -> str:
        return self.place.key

    @property
    def offset_s(self) -> int:
        return self.place.offset_s


def expression_target(expr: str, tz: str, schedule: Schedule) -> Target:
    """A bare cron expression: no jitter, and the expression itself as the run-id key."""
    return Target(None, expr, tz, schedule, occurrence.expression(expr), 0)


def job_target(
    spec: JobSpec, schedule: Schedule, node: str, nodes: Iterable[str] = (), windows: Sequence[Window] = ()
) -> Target:
    """The job `spec` (compiled as `schedule`) on `node`; a job that runs on each node is
    also placed on every one of `nodes`."""
    fleet = tuple(occurrence.placements(spec, nodes)) if spec.run_on.each else ()
    place = occurrence.placement(spec, node)
    return Target(spec, spec.schedule, spec.timezone, schedule, place, spec.tolerance_s, fleet, tuple(windows))


@dataclass(frozen=True)
class DstPolicyInForce:
    """A fixed-time schedule's DST policy, and whether it is cron's."""

    dst_gap: str
    dst_repeat: str

    @property
    def as_cron(self) -> bool:
        return (self.dst_gap, self.dst_repeat) == ("shift", "first")


@dataclass(frozen=True)
class NodeFires:
    """A job that runs on each node, on one node: its key, jitter and first next fire."""

    place: Placement
    next: tuple[Occurrence, ...]


@dataclass(frozen=True)
class RunIdExample:
    """How one run id is made: the hash of `input` (key and scheduled time in UTC)."""

    scheduled_at: datetime
    input: str
    run_id: str


@dataclass(frozen=True)
class Fire:
    """One next fire, with the maintenance window that holds it (None: it runs)."""

    occurrence: Occurrence
    window: Hit | None


@dataclass(frozen=True)
class WindowShown:
    """A maintenance window that holds the job, with its next spans."""

    window: Window
    spans: tuple[tuple[datetime, datetime], ...]


@dataclass(frozen=True)
class Explanation:
    """Everything `explain` says, as values (`after`: the instant it starts from)."""

    target: Target
    after: datetime
    schedule_class: str
    class_meaning: str
    dst_policy: DstPolicyInForce | None
    nodes: tuple[NodeFires, ...]
    run_id_example: RunIdExample | None
    next: tuple[Fire, ...]
    dst_events: tuple[DstEvent, ...]
    windows: tuple[WindowShown, ...]

    @property
    def job(self) -> JobSpec | None:
        return self.target.job


def schedule_class(schedule: Schedule) -> str:
    """`fixed-time`, `wildcard`, `interval`, `calendar` or `reboot`."""
    if schedule.kind == "reboot":
        return "reboot"
    if schedule.kind == "every":
        return "interval"
    if schedule.kind == "calendar":
        return "calendar"
    return "fixed-time" if schedule.is_fixed_time else "wildcard"


def class_meaning(klass: str, schedule: Schedule) -> str:
    """What a DST change does to a schedule of class `klass`, in one sentence."""
    text = _CLASS_TEXT[klass]
    if klass != "fixed-time":
        return text
    return text.format(gap=_GAP_TEXT[schedule.dst_gap], repeat=_REPEAT_TEXT[schedule.dst_repeat])


def dst_policy(schedule: Schedule, klass: str) -> DstPolicyInForce | None:
    """The DST policy in force; None when none applies (only fixed-time schedules have one)."""
    if klass != "fixed-time":
        return None
    return DstPolicyInForce(schedule.dst_gap, schedule.dst_repeat)


def explanation(target: Target, start: datetime, count: int = FIRES) -> Explanation:
    """The explanation of `target` from `start`: its next `count` fires, the DST dates of
    the year after `start`, the windows' spans in the `WINDOW_LOOKAHEAD_DAYS` after it."""
    fires = target.place.upcoming(target.schedule, start, count)
    klass = schedule_class(target.schedule)
    first = fires[0] if fires else None
    job = target.job
    return Explanation(
        target=target,
        after=start,
        schedule_class=klass,
        class_meaning=class_meaning(klass, target.schedule),
        dst_policy=dst_policy(target.schedule, klass),
        nodes=tuple(NodeFires(p, tuple(p.upcoming(target.schedule, start, 1))) for p in target.fleet),
        run_id_example=None
        if first is None
        else RunIdExample(first.scheduled_at, f"{target.key}|{occurrence.utc_stamp(first.scheduled_at)}", first.run_id),
        next=tuple(Fire(o, blackout.blackout_at(job, target.windows, o.fire_at) if job else None) for o in fires),
        dst_events=tuple(target.schedule.dst_events(start, start + DST_LOOKAHEAD)),
        windows=tuple(windows_shown(job, target.windows, start, start + timedelta(days=WINDOW_LOOKAHEAD_DAYS)))
        if job is not None
        else (),
    )


def windows_shown(
    spec: JobSpec, windows: Sequence[Window], start: datetime, end: datetime, limit: int = WINDOW_SPANS
) -> list[WindowShown]:
    """The maintenance windows that hold `spec`, in registry order, each with its first
    `limit` spans that overlap [start, end)."""
    return [WindowShown(w, tuple(w.spans(start, end, limit=limit))) for w in blackout.windows_for(spec, windows)]
