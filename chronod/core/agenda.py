"""What fires next: the agenda behind `chronoctl next` without a job (and the web console).

The rule, before the code: every occurrence of every enabled, scheduled job whose fire
time (scheduled time plus the job's jitter on its node) lies in [start, end), in fire
order, one entry per occurrence, each with what holds it (`blackout.held`: a pause that
still holds the job then, else a maintenance window that covers it). A held occurrence is
listed, marked, not left out: an operator asking "what runs in the next hour?" must see
that the nightly export will *not*. `@reboot` jobs have no fire times and are not listed.

Pure: the jobs, pauses and windows are arguments, and so is the window of time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Mapping, Sequence

from chronod.core import occurrence
from chronod.core.blackout import Hold, Pause, Window, held
from chronod.core.model import JobSpec
from chronod.core.schedule import Schedule

MAX_ENTRIES = 10_000  # an agenda longer than this is cut (and says so): `@every 1s` over a day


@dataclass(frozen=True)
class Entry:
    """One occurrence on the agenda: which job, when it fires, its identity, what holds it."""

    job_id: str
    owner: str
    node: str | None  # set for `run_on: each` jobs only
    scheduled_at: datetime
    fire_at: datetime
    run_id: str
    jitter_s: int
    hold: Hold | None


@dataclass(frozen=True)
class Agenda:
    """The entries in [start, end), in fire order; `cut` when more fell in than MAX_ENTRIES."""

    start: datetime
    end: datetime
    entries: tuple[Entry, ...]
    cut: bool = False

    @property
    def held(self) -> int:
        return sum(1 for e in self.entries if e.hold is not None)


def selected(spec: JobSpec, tag: str | None = None, owner: str | None = None) -> bool:
    """Whether a job is on the agenda asked for: enabled, with the tag and owner asked."""
    return spec.enabled and (tag is None or tag in spec.tags) and (owner is None or spec.owner == owner)


def agenda(
    specs: Iterable[JobSpec],
    schedules: Mapping[str, Schedule],
    start: datetime,
    end: datetime,
    *,
    pauses: Sequence[Pause] = (),
    windows: Sequence[Window] = (),
    nodes: Iterable[str] = (),
    limit: int = MAX_ENTRIES,
) -> Agenda:
    """The agenda of `specs` (each with its compiled schedule in `schedules`, by job id)
    over [start, end); `nodes` are the node names jobs that run on each node fire on."""
    names = sorted(set(nodes))
    out: list[Entry] = []
    for spec in specs:
        schedule = schedules.get(spec.id)
        if schedule is None or schedule.kind == "reboot" or not spec.enabled:
            continue
        for place in occurrence.placements(spec, names):
            lo = start - timedelta(seconds=place.offset_s, microseconds=1)
            for at in schedule.fires(lo, end, limit=limit + 1):
                occ = place.at(at)
                if start <= occ.fire_at < end:
                    hold = held(spec, pauses, windows, occ.fire_at)
                    out.append(Entry(spec.id, spec.owner, occ.node, at, occ.fire_at, occ.run_id, place.offset_s, hold))
    out.sort(key=lambda e: (e.fire_at, e.job_id, e.node or ""))
    return Agenda(start, end, tuple(out[:limit]), cut=len(out) > limit)
