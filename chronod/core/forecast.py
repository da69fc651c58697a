"""The herd forecast behind `chronoctl forecast`: how many jobs fire in each bucket of a
window of time, before and after jitter, the busiest buckets, and the maintenance windows
that hold some of those fires.

The rule, before the code:

- Every enabled job with clock times (`@reboot` has none) counts. A job's *scheduled*
  instants are its schedule's nominal points; its *fire* instants are those plus its
  jitter offset on the node asked about (`chronod.core.occurrence`).
- The window [start, end) is cut into buckets of `bucket_s` seconds from `start`. A
  scheduled instant in the window counts in its bucket "before jitter"; a fire instant
  in the window counts in its bucket "after jitter", even when its scheduled instant fell
  before the window.
- The peaks are the fullest buckets, fullest first, then earliest.
- A maintenance window's span in [start, end) holds the enabled jobs it applies to; it
  says how many of their fire instants fall inside it (the daemon skips or defers those).
  At most `MAX_SPANS` spans of one window are listed (one open every second has 604,800 a
  week); `more` marks the last one listed when there were more.

Pure: the jobs, their compiled schedules, the windows and the window of time are
arguments. chronoctl renders the answer as a chart or JSON; anything else that wants a
forecast (a web console, the simulation) asks the same `forecast`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Iterable, Literal, Mapping, NamedTuple, Sequence

from chronod.core import occurrence
from chronod.core.blackout import Window
from chronod.core.model import JobSpec
from chronod.core.schedule import Schedule

MAX_SPANS = 100  # spans of one maintenance window a forecast lists
CHART_ROWS = 48  # rows of the chart: a long window shows the busiest bucket of each row

Which = Literal["after", "before"]


class JobFires(NamedTuple):
    """One job's scheduled instants that may count in the window, and its jitter offset."""

    job_id: str
    scheduled: list[datetime]
    offset_s: int


@dataclass(frozen=True)
class Peak:
    """One of the busiest buckets: when it starts, how many fires, of which jobs."""

    start: datetime
    count: int
    by_job: dict[str, int]  # job id -> fires in the bucket, by job id

    @property
    def jobs(self) -> list[str]:
        return list(self.by_job)


@dataclass(frozen=True)
class HeldSpan:
    """A span of a maintenance window in the forecast's window, with the jobs it holds and
    how many of their fires fall inside it (`by_job`: only jobs with some)."""

    name: str
    reason: str
    start: datetime  # UTC
    end: datetime  # UTC
    jobs: list[str]
    fires_held: int
    by_job: dict[str, int]
    more: bool  # the last span listed of a window that opens more than MAX_SPANS times


class ChartRow(NamedTuple):
    """One row of the chart: its first bucket's start and the busiest bucket in it."""

    start: datetime
    before: int
    after: int


@dataclass(frozen=True)
class Forecast:
    """Fires per bucket before and after jitter over [start, end), and the maintenance
    windows' spans in it (`held`). Bucket `i` starts at `start + i * bucket_s`; buckets
    with no fire are absent from the counts."""

    start: datetime
    end: datetime
    bucket_s: int
    jobs: int  # the jobs counted
    before: dict[int, int]  # bucket index -> scheduled instants in it
    after: dict[int, int]  # bucket index -> fire instants in it
    after_jobs: dict[int, Counter[str]]  # bucket index -> job id -> fires in it
    before_jobs: dict[int, Counter[str]]
    held: tuple[HeldSpan, ...] = ()

    @property
    def fires_before(self) -> int:
        return sum(self.before.values())

    @property
    def fires_after(self) -> int:
        return sum(self.after.values())

    def bucket_start(self, index: int) -> datetime:
        return self.start + timedelta(seconds=index * self.bucket_s)

    def buckets(self) -> list[int]:
        """The indexes of the buckets with a fire before or after jitter, in order."""
        return sorted(set(self.before) | set(self.after))

    def peaks(self, which: Which = "after", top: int = 5) -> list[Peak]:
        """The `top` fullest buckets before or after jitter, fullest first, then earliest."""
        counts, names = (self.after, self.after_jobs) if which == "after" else (self.before, self.before_jobs)
        best = sorted((i for i, n in counts.items() if n), key=lambda i: (-counts[i], i))[:top]
        return [Peak(self.bucket_start(i), counts[i], dict(sorted(names[i].items()))) for i in best]


def forecast(
    specs: Iterable[JobSpec],
    schedules: Mapping[str, Schedule],
    windows: Sequence[Window],
    start: datetime,
    end: datetime,
    bucket_s: int,
    node: str,
) -> Forecast:
    """The forecast of `specs` (each with its compiled schedule in `schedules`, by job id;
    disabled jobs need none) over [start, end) on `node` (where jobs that run on each node
    take their jitter), with the spans of `windows` that fall in it."""
    jobs = sorted(specs, key=lambda s: s.id)
    entries = job_fires(jobs, schedules, start, end, node)
    return replace(
        build_forecast(entries, start, end, bucket_s), held=tuple(held_spans(jobs, windows, entries, start, end))
    )


def job_fires(
    specs: Iterable[JobSpec], schedules: Mapping[str, Schedule], start: datetime, end: datetime, node: str
) -> list[JobFires]:
    """Per enabled job with clock times, in the order given: the scheduled instants that may
    fire or be scheduled in [start, end), and its jitter offset on `node`."""
    out = []
    for spec in specs:
        if not spec.enabled:
            continue
        schedule = schedules[spec.id]
        if schedule.kind == "reboot":
            continue
        offset = occurrence.placement(spec, node).offset_s
        lo = start - timedelta(seconds=offset, microseconds=1)
        out.append(JobFires(spec.id, schedule.fires(lo, end), offset))
    return out


def build_forecast(entries: Sequence[JobFires], start: datetime, end: datetime, bucket_s: int) -> Forecast:
    """Bucket each job's scheduled instants (`before`) and fire instants, scheduled plus
    offset (`after`), that fall in [start, end)."""
    before: Counter[int] = Counter()
    after: Counter[int] = Counter()
    before_jobs: dict[int, Counter[str]] = defaultdict(Counter)
    after_jobs: dict[int, Counter[str]] = defaultdict(Counter)
    t0, t1 = start.timestamp(), end.timestamp()
    for job_id, scheduled, offset in entries:
        for s in scheduled:
            ts = s.timestamp()
            if t0 <= ts < t1:
                i = int((ts - t0) // bucket_s)
                before[i] += 1
                before_jobs[i][job_id] += 1
            if t0 <= ts + offset < t1:
                i = int((ts + offset - t0) // bucket_s)
                after[i] += 1
                after_jobs[i][job_id] += 1
    return Forecast(start, end, bucket_s, len(entries), dict(before), dict(after), after_jobs, before_jobs)


def _count_in(times: list[datetime], a: datetime, b: datetime) -> int:
    """How many of the sorted `times` lie in [a, b)."""
    return bisect_left(times, b) - bisect_left(times, a)


def held_spans(
    specs: Iterable[JobSpec],
    windows: Sequence[Window],
    entries: Sequence[JobFires],
    start: datetime,
    end: datetime,
) -> list[HeldSpan]:
    """Each span of a maintenance window in [start, end), by start then name: the enabled
    jobs it holds and how many of their fires (`entries`) fall inside it."""
    jobs = [s for s in specs if s.enabled]
    fires = {job_id: sorted(s + timedelta(seconds=off) for s in scheduled) for job_id, scheduled, off in entries}
    out = []
    for w in windows:
        held = sorted(j.id for j in jobs if w.applies_to(j))
        spans = w.spans(start, end, limit=MAX_SPANS + 1)
        for i, (a, b) in enumerate(spans[:MAX_SPANS]):
            inside = {j: _count_in(fires.get(j, []), a, b) for j in held}
            out.append(
                HeldSpan(
                    name=w.name,
                    reason=w.reason,
                    start=a.astimezone(timezone.utc),
                    end=b.astimezone(timezone.utc),
                    jobs=held,
                    fires_held=sum(inside.values()),
                    by_job={j: n for j, n in inside.items() if n},
                    more=i == MAX_SPANS - 1 and len(spans) > MAX_SPANS,
                )
            )
    return sorted(out, key=lambda h: (h.start, h.name))


def chart_rows(fc: Forecast, rows: int = CHART_ROWS) -> list[ChartRow]:
    """At most `rows` rows covering the window, each a whole number of buckets, each with
    the busiest bucket in it before and after jitter."""
    n_buckets = max(1, -(-int((fc.end - fc.start).total_seconds()) // fc.bucket_s))
    per_row = max(1, -(-n_buckets // rows))
    out = []
    for first in range(0, n_buckets, per_row):
        span = range(first, min(first + per_row, n_buckets))
        out.append(
            ChartRow(
                fc.bucket_start(first), max(fc.before.get(i, 0) for i in span), max(fc.after.get(i, 0) for i in span)
            )
        )
    return out


def floor(at: datetime, bucket_s: int) -> datetime:
    """`at` rounded down to a multiple of `bucket_s` since the epoch (UTC): where a
    forecast starts when it is not told."""
    ts = int(at.timestamp())
    return datetime.fromtimestamp(ts - ts % bucket_s, timezone.utc)
