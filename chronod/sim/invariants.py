"""The promises a simulation checks, each from the simulation's own record of what ran
(chronod.sim.world.Proc: what the simulated runner really started and how it ended),
never from the daemon's opinion of it. The store is read only for the terminal state
each occurrence was given, which is what the promise is about.

Each check returns its counterexamples, oldest first; a promise holds when there are none.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from chronod.core import blackout, identity
from chronod.core.model import ACTIVE_STATES, JobSpec, RunState
from chronod.core.policy import ON_TIME_GRACE_S, may_retry
from chronod.core.schedule import compile_schedule
from chronod.sim.driver import Outcome, Version
from chronod.sim.world import Proc
from chronod.store.api import Run

LAG_S = 2.0  # a daemon that is up, not stalled and has its database starts a fire this soon
EDGE_S = 10.0  # occurrences this close to a definition change may belong to either version
SETTLE_S = 3600.0  # occurrences due this close to the end may not have settled yet
TERMINAL = {
    RunState.SUCCEEDED,
    RunState.FAILED,
    RunState.TIMED_OUT,
    RunState.CANCELLED,
    RunState.LOST,
    RunState.SKIPPED_OVERLAP,
    RunState.SKIPPED_OUTAGE,
    RunState.SKIPPED_PAUSED,
    RunState.SKIPPED_BLACKOUT,
    RunState.SKIPPED_RESOURCE,
    RunState.SKIPPED_ACCOUNT,
}
RAN = {RunState.SUCCEEDED, RunState.FAILED, RunState.TIMED_OUT, RunState.CANCELLED, RunState.LOST}


@dataclass(frozen=True)
class Counterexample:
    """The first sign of a broken promise: where to look and what went wrong."""

    at: datetime
    job: str
    run_id: str
    what: str

    def as_dict(self) -> dict[str, str]:
        return {"time": self.at.isoformat(), "job": self.job, "run_id": self.run_id, "what": self.what}


@dataclass(frozen=True)
class Expected:
    """An occurrence the daemon had to account for."""

    job: str
    version: Version
    scheduled_at: datetime
    fire_at: datetime
    run_id: str


class Facts:
    """What the invariants read, indexed once."""

    def __init__(self, out: Outcome):
        self.out = out
        self.procs: list[Proc] = sorted(out.world.procs.values(), key=lambda p: (p.started_mono, p.pid))
        self.by_run: dict[str, list[Proc]] = defaultdict(list)
        self.by_job: dict[str, list[Proc]] = defaultdict(list)
        for p in self.procs:
            self.by_run[p.run_id].append(p)
            self.by_job[p.job_id].append(p)
        self.rows = {r.run_id: r for r in out.store.runs()}
        self.backfilled = {rid for rid, r in self.rows.items() if r.trigger == "backfill"}
        self.horizon = out.end - timedelta(seconds=SETTLE_S)
        self.expected = list(self._expected())
        self.spans = [out.world.wall_span(d) for d in out.world.disturbances]
        self.windows = _windows(out.cfg.blackouts)
        self._hulls: dict[tuple[str, int], tuple[datetime, datetime]] = {}
        self._spans: dict[str, tuple[list[datetime], list[tuple[datetime, datetime, int]], timedelta]] = {}
        self._spells: dict[str, list[tuple[Proc, datetime, datetime]]] = {}
        self._spell_starts: dict[str, tuple[list[datetime], list[int], timedelta]] = {}
        self._holding: dict[str, tuple[list[datetime], list[tuple[datetime, datetime]], timedelta]] = {}
        self.asked: Callable[[Proc], str | None] | None = None  # `_asked_for`, once computed
        self._missed: dict[str, tuple[str, datetime]] | None = None
        self._pending: dict[str, list[Run]] | None = None  # `waiting_at_end`, once computed

    def missed(self) -> dict[str, tuple[str, datetime]]:
        """What `missed` lists at the end (chronod.sim.audit.missed_now), asked once: two
        invariants judge it, and it reads every run of the simulation."""
        if self._missed is None:
            from chronod.sim.audit import missed_now

            self._missed = missed_now(self.out)
        return self._missed

    def hull(self, p: Proc) -> tuple[datetime, datetime]:
        """The wall times the process ran over (`World.wall_hull`), computed once: the
        invariants ask it of the same processes again and again."""
        key = (p.run_id, p.attempt)
        got = self._hulls.get(key)
        if got is None:
            got = self._hulls[key] = self.out.world.wall_hull(p.started_mono, p.end_mono())
        return got

    def spells(self, job: str) -> list[tuple[Proc, datetime, datetime]]:
        """The job's runs as they held its line, computed once per job: (the process of the
        attempt a spell began with, the wall time it started, the end of its last
        attempt). A spell is one attempt, or several of one run back to back: the next
        attempt of the same run, started for the same reason (the schedule, a manual run,
        a backfill: `_asked_for`) within the job's longest retry backoff (and, for a job
        with a resource, its wait for a slot) of the end of the one before, or of when a
        daemon could first read that end (`noticed`), or later when a crash, stall or
        outage, or a maintenance window that defers the retry, fell in between: the daemon
        waits for the retry; a backfill that reopens an ended run much later begins a
        spell of its own. A run whose retry never started (its job removed, a pause, no
        slot) ends its spell when it was settled, at most a backoff after its last attempt."""
        got = self._spells.get(job)
        if got is not None:
            return got
        versions = self.out.versions.get(job)
        spec = versions[-1].spec if versions else None
        retry = spec.retry if spec else None
        # a retry waits for a slot of its resource up to its catch-up window after it fell due
        slot = spec.catchup_window_s if spec and spec.resource else 0
        longest = timedelta(seconds=(retry.max_backoff_s * 1.2 + slot if retry and retry.attempts > 1 else 0) + LAG_S)
        asked = _asked_for(self)
        runs: dict[str, list[Proc]] = defaultdict(list)
        for p in self.by_job.get(job, []):
            runs[p.run_id].append(p)
        got = []
        for procs in runs.values():
            procs.sort(key=lambda p: (p.attempt, p.started_mono))
            first, (a, b) = procs[0], self.hull(procs[0])
            for prev, p in itertools.pairwise(procs):
                c, d = self.hull(p)
                # a retry a crash, stall or outage kept from starting in time was still
                # waited for: its run is going all the while (the daemon says so)
                seen = self.noticed(b)
                if (
                    p.attempt == prev.attempt + 1
                    and asked(p) == asked(prev)
                    and (c - seen <= longest or self.disturbed(seen, c) or (spec and self.blacked_out(spec, seen, c)))
                ):
                    b = max(b, d)
                    continue
                got.append((first, a, b))
                first, a, b = p, c, d
            row, last = self.rows.get(first.run_id), procs[-1]
            if self.retry_pending(first.run_id):
                b = max(b, self.out.end)  # still going at the end: its retry is to come
            elif spec and row and row.finished_at and may_retry(spec, last.attempt, last.final_state()):
                # a retry owed and never started (its job removed, a pause, no slot): the
                # run went on waiting for it until the daemon gave it up, within a backoff
                b = max(b, min(row.finished_at, self.noticed(b) + longest))
            got.append((first, a, b))
        self._spells[job] = got
        return got

    def spells_meeting(self, job: str, lo: datetime, hi: datetime) -> list[tuple[Proc, datetime, datetime]]:
        """The job's spells (`spells`) that meet [lo, hi], in their order: a bisection over
        their starts, as `overlapping` does for processes."""
        spells = self.spells(job)
        got = self._spell_starts.get(job)
        if got is None:
            order = sorted(range(len(spells)), key=lambda i: spells[i][1])
            longest = max((b - a for _, a, b in spells), default=timedelta(0))
            got = self._spell_starts[job] = ([spells[i][1] for i in order], order, longest)
        starts, order, longest = got
        first, last = bisect.bisect_left(starts, lo - longest), bisect.bisect_right(starts, hi)
        return [spells[i] for i in sorted(i for i in order[first:last] if spells[i][2] >= lo)]

    def retry_pending(self, run_id: str) -> bool:
        """Whether the run waits at the end for its retry: it has not ended, and its retry
        falls due after the end (it always starts: the simulation ended first), or fell due
        inside a maintenance window of its job still open at the end (a retry waits for the
        window's end, whatever the policy: docs/maintenance.md), or fell due and waits for a
        slot of its job's resource, every slot taken since whenever a daemon could have
        given it one (`slots_full`, as a waiting occurrence's line)."""
        row = self.rows.get(run_id)
        if row is None or row.state != RunState.RETRY_WAIT or row.next_attempt_at is None:
            return False
        due, end = row.next_attempt_at, self.out.end
        if due > end - timedelta(seconds=LAG_S):
            return True
        versions = self.out.versions.get(row.job_id)
        if not versions:
            return False
        spec = versions[-1].spec
        if any(a <= due and end <= b for _, a, b in self.window_spans(spec, due, end)):
            return True
        return self.slots_full(row.job_id, spec, due)

    def noticed(self, t: datetime) -> datetime:
        """The earliest a daemon could act on what happened at wall time `t`: after every
        crash, stall or outage that was going on then (a retry's backoff counts from when
        the daemon read its attempt's end)."""
        for a, b in sorted(self.spans):
            if a <= t <= b:
                t = b
        return t

    def window_spans(
        self, spec: JobSpec, start: datetime, end: datetime
    ) -> list[tuple[blackout.Window, datetime, datetime]]:
        """The job's maintenance windows over this span, as far as a daemon carried them: a
        daemon started while the file that defines them was broken has no last good
        version of it (docs/reference.md), and holds nothing."""
        spans = blackout.spans(spec, self.windows, start, end)
        carried = self.out.windows_carried
        if carried is None:
            return list(spans)
        out = []
        for w, a, b in spans:
            for c, d in carried:
                lo, hi = max(a, c), min(b, d) if d is not None else b
                if lo < hi:
                    out.append((w, lo, hi))
        return out

    def blacked_out(self, spec: JobSpec, start: datetime, end: datetime) -> bool:
        """Whether a maintenance window of the job covered some instant of this span."""
        return any(a < end and start < b for _, a, b in self.window_spans(spec, start, end))

    def _expected(self) -> Iterable[Expected]:
        for job, versions in self.out.versions.items():
            for v in versions:
                spec = v.spec
                if not spec.enabled:
                    continue
                sched = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
                if sched.kind == "reboot":
                    continue
                key = identity.job_key(spec.id, spec.run_on.each, self.out.nodes[0])
                offset = timedelta(seconds=identity.jitter_offset(key, spec.tolerance_s))
                lo = v.since + timedelta(seconds=EDGE_S)
                hi = min(v.until - timedelta(seconds=EDGE_S) if v.until else self.horizon, self.horizon)
                if hi <= lo:
                    continue
                for at in sched.fires(lo - offset, hi - offset):
                    if lo < at + offset <= hi:
                        yield Expected(job, v, at, at + offset, identity.run_id(key, at))

    def disturbed(self, start: datetime, end: datetime) -> bool:
        """Whether a crash, stall, outage or clock step touched this wall-time span."""
        return any(a <= end and start <= b for a, b in self.spans)

    def paused(self, job: str, start: datetime, end: datetime) -> bool:
        for a, b in self.out.paused.get(job, []):
            if a <= end and (b is None or start <= b):
                return True
        return False

    def going_at_end(self, p: Proc) -> bool:
        """Whether the process still ran when the simulation ended."""
        return p.end_mono() > self.out.world.mono()

    def in_draining_backlog(self, e: Expected) -> bool:
        """Whether the occurrence may rightly still wait at the end behind its job's catch-up
        backlog (docs/reference.md, Catch-up: `catchup: all` runs every occurrence inside
        the window one after another, and those that fall due meanwhile queue behind
        them). A job whose runs take longer than its period never drains such a backlog:
        its occurrences wait up to `catchup_window_s`, however long the simulation
        settles. True only while the line moves: its window is not over, and at the end a
        run of the job scheduled before it is still going, waits for its retry
        (`retry_pending`), or waits for a slot of the job's resource in a full line
        (`in_full_line`): the line waits for it as for a run going."""
        spec = e.version.spec
        if spec.catchup != "all" or spec.overlap == "allow":
            return False  # no line: `allow` starts a whole backlog at once
        if e.fire_at + timedelta(seconds=spec.catchup_window_s) <= self.out.end:
            return False  # it waited its whole window: skipped_outage
        if any(
            p.scheduled_at < e.scheduled_at and self.going_at_end(p) and p.run_id not in self.backfilled
            for p in self.by_job.get(e.job, [])
        ):
            return True
        return any(
            r.scheduled_at < e.scheduled_at
            and (self.waits_in_full_line(r, spec) if r.state == RunState.PENDING else self.retry_pending(r.run_id))
            for r in self.waiting_at_end(e.job)
        )

    def waiting_at_end(self, job: str) -> list[Run]:
        """The job's scheduled occurrences still pending or waiting for a retry at the end."""
        if self._pending is None:
            self._pending = defaultdict(list)
            for r in self.rows.values():
                if r.state in (RunState.PENDING, RunState.RETRY_WAIT) and r.trigger == "schedule":
                    self._pending[r.job_id].append(r)
        return self._pending.get(job, [])

    def held_at_end(self, e: Expected) -> bool:
        """Whether the occurrence may rightly still be pending at the end, held by a
        maintenance window (docs/maintenance.md, skip or defer: a `defer` job's occurrence
        stays pending and is released when the window ends). True only while its row says
        a window defers it until after the end, and a window of the job the daemon carried
        was open at the end."""
        spec, row = e.version.spec, self.rows.get(e.run_id)
        if spec.blackout != "defer" or row is None or not (row.error or "").startswith(blackout.DEFERRED_BY):
            return False
        if row.next_attempt_at is None or row.next_attempt_at <= self.out.end:
            return False  # its window ended before the end: it should have been released
        return self.blacked_out(spec, self.out.end - timedelta(seconds=1), self.out.end)

    def in_full_line(self, e: Expected) -> bool:
        """Whether the occurrence may rightly still wait at the end for a slot of its
        resource (docs/reference.md, Resources: a run waiting for a slot stays `pending`,
        in line, until it gets one or its catch-up window is over). A resource whose runs
        take longer than the slots it has keeps such a line to the end. True only while
        the line is full: the row says it waits for a slot, its window is not over, and
        from its fire time to the end every slot was taken (`slots_full`)."""
        row = self.rows.get(e.run_id)
        return row is not None and self.waits_in_full_line(row, e.version.spec)

    def waits_in_full_line(self, row: Run, spec: JobSpec) -> bool:
        """`in_full_line` of a stored run of the job with definition `spec`."""
        if spec.resource is None or not (row.error or "").startswith(blackout.WAITING_FOR):
            return False
        if row.next_attempt_at is None or row.next_attempt_at <= self.out.end:
            return False  # its window is over: it should have ended skipped_resource
        return self.slots_full(row.job_id, spec, row.fire_at)

    def slots_full(self, job: str, spec: JobSpec, since: datetime) -> bool:
        """Whether every slot of the job's resource was taken from `since` to the end
        whenever a daemon could have given one (`_free_moment`: not down, stalled or
        without its database, and no pause or window of the job holding it)."""
        from chronod.sim.scenario import RESOURCES

        if spec.resource is None:
            return False
        end = self.out.end
        held = [(a, b) for a, b, _ in _holds(self, job, spec, since, end)]
        spans = self.holding(spec.resource, since, end)
        return _free_moment(self, spans, RESOURCES[spec.resource], since, end, held) is None

    def overlapping(self, job: str, lo: datetime, hi: datetime) -> list[Proc]:
        """The job's processes whose hull meets [lo, hi], in `by_job` order. A bisection
        over the hulls sorted by start, not a walk over all of the job's processes: a job
        every 20 s has thousands a day, and the checks ask this for each of them."""
        starts, entries, longest = self._spans_of(job)
        procs = self.by_job.get(job, [])
        first, last = bisect.bisect_left(starts, lo - longest), bisect.bisect_right(starts, hi)
        return [procs[i] for i in sorted(i for _, b, i in entries[first:last] if b >= lo)]

    def holding(self, resource: str, lo: datetime, hi: datetime) -> list[tuple[datetime, datetime]]:
        """The hulls of the resource's processes that meet [lo, hi]: a bisection over them
        by start, as `overlapping` does for a job's (every run skipped for its resource
        asks it, and a resource has thousands of processes a day)."""
        got = self._holding.get(resource)
        if got is None:
            entries = sorted(self.hull(p) for p in self.procs if p.resource == resource)
            longest = max((b - a for a, b in entries), default=timedelta(0))
            got = self._holding[resource] = ([a for a, _ in entries], entries, longest)
        starts, entries, longest = got
        first, last = bisect.bisect_left(starts, lo - longest), bisect.bisect_right(starts, hi)
        return [(a, b) for a, b in entries[first:last] if b >= lo]

    def _spans_of(self, job: str) -> tuple[list[datetime], list[tuple[datetime, datetime, int]], timedelta]:
        """The job's hulls as (start, end, index in `by_job`) by start, their starts, and
        the longest hull (no hull that starts before `lo - longest` reaches `lo`)."""
        got = self._spans.get(job)
        if got is None:
            entries = sorted(((*self.hull(p), i) for i, p in enumerate(self.by_job.get(job, []))), key=lambda e: e[0])
            longest = max((b - a for a, b, _ in entries), default=timedelta(0))
            got = self._spans[job] = ([a for a, _, _ in entries], entries, longest)
        return got


def one_terminal_state(f: Facts) -> list[Counterexample]:
    """Every occurrence from when its job was known until removed has exactly one terminal
    state, and it is the one the policies require."""
    out = []
    for e in f.expected:
        row = f.rows.get(e.run_id)
        ran = f.by_run.get(e.run_id, [])
        why = _wrong_state(f, e, row.state if row else None, ran)
        if why:
            out.append(Counterexample(e.fire_at, e.job, e.run_id, why))
    return out


def _wrong_state(f: Facts, e: Expected, state: str | None, ran: list[Proc]) -> str | None:
    spec = e.version.spec
    if state is None:
        return "no record at all"
    if state == RunState.RUNNING and ran and f.going_at_end(ran[-1]):
        return None  # its process still runs: it cannot have ended (fire_lag_bounded judges its start)
    if state == RunState.PENDING and f.in_draining_backlog(e):
        return None  # it waits its turn behind a catch-up backlog that drains to the end
    if state == RunState.PENDING and f.in_full_line(e):
        return None  # it waits for a slot of its resource, every slot taken to the end
    if state == RunState.PENDING and f.held_at_end(e):
        return None  # a window holds it past the end: it is released when the window ends
    if state == RunState.RETRY_WAIT and f.retry_pending(e.run_id):
        return None  # its retry falls due after the end
    if state not in TERMINAL:
        return f"still {state} long after it fell due"
    if ran:
        last = ran[-1]
        if last.end_mono() > f.out.world.mono() or state == last.final_state():
            return None
        if state == RunState.LOST and spec.idempotency_class == "unsafe":
            return None
        return f"recorded {state}, but its last attempt ended {last.final_state()}"
    if state == RunState.CANCELLED and _went_with_its_version(f, e):
        return None
    if state in RAN - {RunState.LOST}:
        return f"recorded {state}, but no process was ever started"
    span = (e.fire_at - timedelta(seconds=1), e.fire_at + timedelta(seconds=ON_TIME_GRACE_S + LAG_S))
    if state == RunState.SKIPPED_OUTAGE and not f.disturbed(*span):
        if (f.rows[e.run_id].error or "").startswith("this node was"):
            return None  # shed by the node's start admission, named as such (fire_lag_bounded judges the node)
        if spec.catchup == "all":
            return None  # the backlog rule: see catchup_all_in_order
        return "recorded skipped_outage while chronod was up, not stalled and had its database"
    if state == RunState.SKIPPED_PAUSED and not f.paused(
        e.job, e.scheduled_at - timedelta(seconds=1), e.fire_at + timedelta(seconds=spec.catchup_window_s)
    ):
        return "recorded skipped_paused, but the job was not paused"
    if state == RunState.SKIPPED_OVERLAP and (
        # a run waiting for its retry is going too (`Facts.spells`)
        spec.overlap == "allow"
        or not f.spells_meeting(e.job, span[0], span[1] + timedelta(seconds=spec.catchup_window_s))
    ):
        return f"recorded skipped_overlap (overlap: {spec.overlap}), but no run of the job was running"
    if state == RunState.SKIPPED_BLACKOUT and not f.blacked_out(
        spec, e.fire_at - timedelta(seconds=1), e.fire_at + timedelta(seconds=spec.catchup_window_s)
    ):
        row = f.rows[e.run_id]
        if row.finished_at is not None and f.disturbed(*span) and f.blacked_out(spec, e.fire_at, row.finished_at):
            return None  # due while chronod could not run it, then held by a window it came back into
        if _held_after_a_step_back(f, spec, e):
            return None
        return "recorded skipped_blackout, but no maintenance window held the job"
    if state == RunState.CANCELLED:
        return "cancelled, though the job and its schedule were unchanged"
    return None


def _windows(docs: tuple[dict[str, object], ...]) -> list[blackout.Window]:
    """The simulation's maintenance windows, read the way the daemon reads them."""
    if not docs:
        return []
    import yaml

    from chronod.core.validate import validate_document
    from chronod.specfile import parse_text

    text = yaml.safe_dump({"blackouts": [dict(d) for d in docs], "jobs": []})
    return list(validate_document(parse_text(text, "blackouts.yaml"), now=datetime.now().astimezone()).blackouts)


def blackout_honoured(f: Facts) -> list[Counterexample]:
    """No scheduled run starts (first attempt or retry) while a maintenance window of its
    job is open; manual runs are not held."""
    out = []
    specs = {job: vs[-1].spec for job, vs in f.out.versions.items()}
    for p in f.procs:
        spec = specs.get(p.job_id)
        if spec is None or p.run_id in f.out.manual:
            continue
        t = p.started_wall
        spans = f.window_spans(spec, t, t + timedelta(seconds=1))
        hit = next(((w, a, b) for w, a, b in spans if a <= t < b), None)
        if hit is not None:
            what = f"attempt {p.attempt} started inside window {hit[0].describe()} ({hit[1]:%H:%M}Z-{hit[2]:%H:%M}Z)"
            out.append(Counterexample(t, p.job_id, p.run_id, what))
    return out


def _went_with_its_version(f: Facts, e: Expected) -> bool:
    """An occurrence still waiting (a catch-up backlog, a resource) when its job's
    definition changed or went is cancelled with it, when that was recorded."""
    row, until = f.rows.get(e.run_id), e.version.until
    if row is None or until is None or row.finished_at is None:
        return False
    return row.finished_at >= until - timedelta(seconds=EDGE_S)


def unsafe_at_most_once(f: Facts) -> list[Counterexample]:
    """No `unsafe` occurrence is started twice, across crashes."""
    out = []
    for run_id, procs in f.by_run.items():
        if procs[0].unsafe and len(procs) > 1:
            p = procs[1]
            out.append(Counterexample(p.started_wall, p.job_id, run_id, f"unsafe run started {len(procs)} times"))
    return out


def fire_lag_bounded(f: Facts) -> list[Counterexample]:
    """A daemon that is up, not stalled and has its database starts each occurrence
    within its tolerance plus LAG_S (jobs that wait for a resource or a catch-up backlog
    excepted). Under `overlap: forbid` an occurrence that falls due while only runs an
    operator asked for (a backfill, a manual run) are going waits its turn behind them
    (docs/backfill.md, "the schedule comes first"): its bound counts from when the runs
    ahead of it in that line ended."""
    out = []
    asked = _asked_for(f)
    for e in f.expected:
        spec = e.version.spec
        if spec.resource or spec.catchup == "all":
            continue
        if f.windows and f.blacked_out(spec, e.fire_at - timedelta(seconds=1), e.fire_at + timedelta(seconds=1)):
            continue  # held by a window (blackout_honoured)
        first = f.by_run.get(e.run_id, [None])[0]
        if first is None or first.attempt != 1 or e.run_id in f.backfilled:
            continue  # a backfill starts an occurrence late on purpose
        lag = (first.started_wall - e.scheduled_at).total_seconds()
        bound = spec.tolerance_s + LAG_S
        ready = _line_cleared(f, e, asked)
        if ready is not None:
            bound = max(bound, (ready - e.scheduled_at).total_seconds() + LAG_S)
        if lag > bound and not f.disturbed(e.scheduled_at - timedelta(seconds=1), first.started_wall):
            behind = f"; the runs ahead of it ended at {ready:%H:%M:%S.%f}" if ready is not None else ""
            out.append(
                Counterexample(
                    e.fire_at,
                    e.job,
                    e.run_id,
                    f"started {lag:.1f}s after its scheduled time "
                    f"(tolerance_s={spec.tolerance_s}) while nothing was disturbed{behind}",
                )
            )
        elif lag < -0.001 and not f.disturbed(first.started_wall, e.scheduled_at):
            out.append(Counterexample(e.fire_at, e.job, e.run_id, f"started {-lag:.1f}s before its scheduled time"))
    return out


def _line_cleared(f: Facts, e: Expected, asked: Callable[[Proc], str | None]) -> datetime | None:
    """When a scheduled occurrence that waited its turn behind an operator's run could
    start: under `overlap: forbid`, when only runs an operator asked for were going as it
    fell due, the moment the last run ahead of it in the job's line ended (the operator's
    runs started before it fell due, and the older scheduled occurrences that waited with
    it, one after another: a backfill run started after it fell due is not ahead of it,
    the backfill yields). None when it did not wait in such a line."""
    if e.version.spec.overlap != "forbid":
        return None
    going = _going_at(f, e.job, e.fire_at, but=e.run_id)
    if not going or not all(asked(p) for p, _ in going):
        return None
    ready = e.fire_at
    while True:
        ahead = [
            end
            for p, end in _going_at(f, e.job, ready, but=e.run_id)
            if (asked(p) and p.started_wall <= e.fire_at + INSTANT)
            or (not asked(p) and p.scheduled_at < e.scheduled_at)
        ]
        end = max(ahead, default=ready)
        if end <= ready:
            return ready
        ready = end


def catchup_all_in_order(f: Facts) -> list[Counterexample]:
    """A `catchup: all` job starts its backlog in scheduled order, never beyond `overlap`."""
    out = []
    specs = {job: vs[-1].spec for job, vs in f.out.versions.items()}
    for job, procs in f.by_job.items():
        spec = specs.get(job)
        if spec is None or spec.catchup != "all":
            continue
        firsts = [p for p in procs if p.attempt == 1 and p.run_id not in f.out.manual and p.run_id not in f.backfilled]
        for a, b in itertools.pairwise(firsts):
            if b.scheduled_at < a.scheduled_at and not _held_across_a_step_back(f, spec, a, b):
                out.append(
                    Counterexample(
                        b.started_wall,
                        job,
                        b.run_id,
                        f"occurrence of {b.scheduled_at:%H:%M:%S} started after the one of {a.scheduled_at:%H:%M:%S}",
                    )
                )
                break
        if spec.overlap == "forbid":
            out += _overlapping(job, procs)
    return sorted(out, key=lambda c: c.at)


def _held_across_a_step_back(f: Facts, spec: JobSpec, a: Proc, b: Proc) -> bool:
    """Whether `b`, scheduled before `a` but started after it, was held by a window when the
    wall clock stepped back before `a` started: a window's hold lasts until the end it
    named (docs/maintenance.md), while on the stepped clock the window had not opened yet,
    and `a`, due then, started (seed 17 of a quarter day of 1,000 jobs)."""
    w = f.out.world
    due = w.first_mono_from(b.scheduled_at, 0.0)
    stepped = due is not None and any(s < 0 and due <= m <= a.started_mono for m, s in w.steps)
    return stepped and f.blacked_out(spec, b.scheduled_at, b.started_wall)


def _held_after_a_step_back(f: Facts, spec: JobSpec, e: Expected) -> bool:
    """Whether a window held the occurrence after it fell due: the wall clock stepped back
    into a window of the job, which held the catch-up line the occurrence waited in, up
    to the end it named (docs/maintenance.md; seed 113 of a quarter day of 1,000 jobs)."""
    row, w = f.rows.get(e.run_id), f.out.world
    if row is None or not (row.error or "").startswith(blackout.DEFERRED_BY):
        return False
    due = w.first_mono_from(e.fire_at, 0.0)
    return due is not None and any(
        s < 0 and due <= m and f.blacked_out(spec, w.wall_at(m), w.wall_at(m, after_step=False)) for m, s in w.steps
    )


def _overlapping(job: str, procs: list[Proc]) -> list[Counterexample]:
    running: list[Proc] = []
    for p in procs:
        running = [q for q in running if q.end_mono() > p.started_mono]
        if running:
            return [
                Counterexample(
                    p.started_wall, job, p.run_id, f"started while {running[0].run_id} still ran (overlap: forbid)"
                )
            ]
        running.append(p)
    return []


def resource_limit_held(f: Facts) -> list[Counterexample]:
    """A resource's max_concurrency is never exceeded."""
    from chronod.sim.scenario import RESOURCES

    out = []
    by_res: dict[str, list[Proc]] = defaultdict(list)
    for p in f.procs:
        if p.resource:
            by_res[p.resource].append(p)
    for res, procs in by_res.items():
        running: list[Proc] = []
        for p in procs:
            running = [q for q in running if q.end_mono() > p.started_mono]
            running.append(p)
            if len(running) > RESOURCES[res]:
                out.append(
                    Counterexample(
                        p.started_wall,
                        p.job_id,
                        p.run_id,
                        f"{len(running)} runs of resource {res} at once (max_concurrency {RESOURCES[res]})",
                    )
                )
                break
    return out


def watchdog_pinged(f: Facts) -> list[Counterexample]:
    """While a daemon lives, systemd's watchdog is pinged at least every WATCHDOG_USEC/2."""
    out = []
    interval = f.out.cfg.watchdog_usec / 2e6
    w = f.out.world
    stalls = [d for d in w.disturbances if d.kind == "stall"]
    for life in w.lives:
        end = life.ended if life.ended is not None else w.mono()
        times = [life.started, *life.pings, end]
        for a, b in itertools.pairwise(times):
            stalled = sum(max(0.0, min(b, d.end) - max(a, d.start)) for d in stalls)
            if b - a - stalled > interval + 0.01:
                at = f.out.end - timedelta(seconds=w.mono() - a)
                out.append(
                    Counterexample(
                        at, "-", "-", f"no watchdog ping for {b - a - stalled:.1f}s (WATCHDOG_USEC/2 = {interval:.1f}s)"
                    )
                )
                break
    return out


DID_IT_RUN_SAMPLE = 60  # `did-it-run --at` questions per simulation (three queries each)
SCHEDULE_FIELDS = ("schedule", "timezone", "dst_gap", "dst_repeat", "tolerance_s", "run_on")


def audit_agrees(f: Facts) -> list[Counterexample]:
    """`missed`, `report` and `did-it-run` agree with the record: each names an expected
    occurrence as succeeded exactly when its last attempt succeeded, and none expects an
    occurrence from when its job was unknown."""
    from chronod.sim.audit import did_it_run_at, report_now

    said, reports = f.missed(), report_now(f.out)
    out = []

    def wrong(e: Expected, command: str, what: str, ok: bool) -> None:
        truth = "it succeeded" if ok else "it did not succeed"
        out.append(Counterexample(e.fire_at, e.job, e.run_id, f"`{command}` {what}, the record says {truth}"))

    def succeeded(e: Expected) -> bool:
        ran = f.by_run.get(e.run_id, [])
        return bool(ran) and not f.going_at_end(ran[-1]) and ran[-1].final_state() == RunState.SUCCEEDED

    def going(e: Expected) -> bool:
        ran = f.by_run.get(e.run_id, [])
        return bool(ran) and (f.going_at_end(ran[-1]) or f.retry_pending(e.run_id))

    for e in f.expected:
        ok = succeeded(e)
        if going(e):
            if e.run_id in said:  # still running: not missed, not (yet) succeeded
                wrong(e, "missed", "calls it missed", ok)
        elif ok == (e.run_id in said):
            wrong(e, "missed", "calls it missed" if ok else "does not list it", ok)
        rep = reports.get(e.job)
        if rep is None or not _same_schedule(rep["spec"], e.version.spec):
            continue  # `report` reads the job's stored definition: another version's times are not its
        line = rep["lines"].get(e.run_id)
        if line is None:
            wrong(e, "report", "does not list it", ok)
        elif (line[0] == RunState.SUCCEEDED) != ok:
            wrong(e, "report", f"says {line[0]}", ok)
    step = max(1, len(f.expected) // DID_IT_RUN_SAMPLE)
    for e in f.expected[::step]:
        ok = succeeded(e)
        answer = did_it_run_at(f.out, e.job, e.scheduled_at)
        if answer is not None and answer.occurrence is not None and answer.occurrence.run_id == e.run_id:
            if answer.yes != ok:
                wrong(e, "did-it-run --at", f"answers {'yes' if answer.yes else 'no'} ({answer.state})", ok)
    known = {e.run_id for e in f.expected}
    listed = [("missed", rid, job, at) for rid, (job, at) in said.items()]
    listed += [
        ("report", rid, job, at)
        for job, rep in reports.items()
        for rid, (state, at) in rep["lines"].items()
        if state == "missing"
    ]
    edge = timedelta(seconds=EDGE_S)
    for command, rid, job, at in listed:
        if rid in known or rid in f.rows or not f.out.start < at < f.horizon:
            continue
        # From the job's first definition to its removal: between two versions (a daemon
        # that restarted while the job's file was broken does not run it) the job is still
        # registered, and an occurrence nothing ran is rightly called missing.
        versions = f.out.versions.get(job, [])
        first = min((v.since for v in versions), default=None)
        last = max((v.until or f.out.end for v in versions), default=None)
        for d, (a, b) in zip(f.out.world.disturbances, f.spans, strict=True):
            if last is not None and d.kind == "down" and a - edge <= last <= b:
                last = b  # dropped when a daemon died: still registered until the next one starts
        if first is None or last is None or not first - edge <= at <= last + edge:
            out.append(Counterexample(at, job, rid, f"`{command}` lists an occurrence from when the job was unknown"))
    return sorted(out, key=lambda c: c.at)


def _same_schedule(a: JobSpec, b: JobSpec) -> bool:
    return all(getattr(a, k) == getattr(b, k) for k in SCHEDULE_FIELDS)


def backfill_completes(f: Facts) -> list[Counterexample]:
    """A stored backfill finishes across crashes: it ends `done` (unless it still waits at
    the end for its turn, for a pause or a window, or for its own run, having never been
    starved while its line stood idle: `_starved`); every occurrence it opened
    ran (a process the backfill started: `_asked_for`) and ended; they started oldest
    first, one at a time, never while a pause held the job (docs/backfill.md) and never
    beside another run of a job that forbids overlap, nor another run beside them."""
    out = []
    specs = {job: vs[-1].spec for job, vs in f.out.versions.items()}
    asked = _asked_for(f)
    for bf_id in f.out.backfills:
        bf = f.out.store.get_backfill(bf_id)
        assert bf is not None, f"backfill {bf_id} the simulation stored is gone"
        at = bf.created_at
        if bf.state == "cancelled" and _dropped_since(f, bf.job_id, at):
            continue  # docs/backfill.md: a backfill of a job removed from the registry ends cancelled
        # docs/backfill.md: a paused job's backfill waits until it is resumed, and one waits
        # its turn while its job's line is busy (the schedule comes first); it may still be
        # waiting at the end, unless its line stood idle with nothing to hold it
        starved = None
        if bf.state == "running":
            starved = _starved(f, bf_id, bf.job_id, bf.run_ids, specs.get(bf.job_id), f.out.world.mono())
        waiting = bf.state == "running" and starved is None
        if bf.state != "done" and not waiting:
            idle = f" (its line stood idle from {starved.isoformat()})" if starved else ""
            out.append(Counterexample(at, bf.job_id, "-", f"backfill {bf_id} still {bf.state} at the end{idle}"))
            continue
        starts = []
        for rid in bf.run_ids[: bf.started] if waiting else bf.run_ids:
            row = f.rows.get(rid)
            if waiting and (row is None or row.state not in TERMINAL):
                continue  # started before the hold, or opened as it began: it waits with the rest
            if row is None or row.state not in TERMINAL:
                out.append(
                    Counterexample(
                        at, bf.job_id, rid, f"backfill {bf_id} left it {row.state if row else 'without a row'}"
                    )
                )
                continue
            if row.trigger != "backfill" or row.state == RunState.SKIPPED_RESOURCE:
                continue  # in flight when its turn came, or it found no slot of its resource
            ran = [p for p in f.by_run.get(rid, []) if p.started_wall >= at and asked(p) == "backfill"]
            if not ran:
                out.append(
                    Counterexample(at, bf.job_id, rid, f"backfill {bf_id} recorded {row.state} but never started it")
                )
                continue
            starts.append(ran[0])
            if f.paused(bf.job_id, ran[0].started_wall, ran[0].started_wall):
                out.append(
                    Counterexample(
                        ran[0].started_wall, bf.job_id, rid, f"backfill {bf_id} started it while its job was paused"
                    )
                )
        for a, b in itertools.pairwise(starts):
            if b.started_mono < a.end_mono():
                out.append(
                    Counterexample(
                        b.started_wall, bf.job_id, b.run_id, f"backfill {bf_id} started it before {a.run_id} ended"
                    )
                )
        spec = specs.get(bf.job_id)
        if spec is not None and spec.overlap == "forbid":
            for p in starts:
                beside = [
                    q for q in f.by_job[bf.job_id] if q is not p and q.started_mono < p.started_mono < q.end_mono()
                ]
                if beside:
                    out.append(
                        Counterexample(
                            p.started_wall,
                            bf.job_id,
                            p.run_id,
                            f"backfill {bf_id} started it while {beside[0].run_id} ran (overlap: forbid)",
                        )
                    )
            # nor does another run of the job start while one of its attempts goes (a retry
            # of a run that waited for it always starts: the backfill must wait for it)
            for p in (q for s in starts for q in f.by_run[s.run_id] if q.started_mono >= s.started_mono):
                during = [
                    q
                    for q in f.by_job[bf.job_id]
                    if q.run_id != p.run_id
                    and q.run_id not in f.out.manual
                    and p.started_mono < q.started_mono < p.end_mono()
                ]
                if during:
                    q = during[0]
                    out.append(
                        Counterexample(
                            q.started_wall,
                            bf.job_id,
                            q.run_id,
                            f"attempt {q.attempt} started while backfill {bf_id}'s run {p.run_id} ran (overlap: forbid)",
                        )
                    )
    return sorted(out, key=lambda c: c.at)


def _starved(f: Facts, bf_id: int, job: str, run_ids: list[str], spec: JobSpec | None, end: float) -> datetime | None:
    """When a backfill running until `end` (monotonic) was starved: its line stood idle for more
    than LAG_S while a daemon was up, not stalled and had its database, and no pause or
    window of the job touched that span. Its line is every run of its job under `forbid`
    and `replace`, its own runs under `allow` (the simulation stores one at a time); a
    run waiting for its retry holds it between attempts, and to the end while its row is
    still active. None when it waited its turn all along, the schedule first
    (docs/backfill.md), and the simulation ended first; a job with a resource limit is
    not judged here (its runs may wait in the resource's queue with no process)."""
    since = f.out.backfills_at.get(bf_id)
    if spec is None or since is None or spec.resource is not None:
        return None
    w, own = f.out.world, set(run_ids)
    attempts: dict[str, list[Proc]] = defaultdict(list)
    for p in f.by_job.get(job, []):
        if spec.overlap != "allow" or p.run_id in own:
            attempts[p.run_id].append(p)
    busy = [(d.start, d.end + LAG_S) for d in w.disturbances]
    for rid, ps in attempts.items():
        ps.sort(key=lambda p: p.attempt)
        busy += [(p.started_mono, p.end_mono()) for p in ps]
        busy += [(a.end_mono(), b.started_mono) for a, b in itertools.pairwise(ps)]
        row = f.rows.get(rid)
        if row is not None and row.state in ACTIVE_STATES:
            busy.append((ps[-1].end_mono(), end))
    t = since
    for a, b in [*sorted(busy), (end, end)]:
        a = min(a, end)
        if a > t + LAG_S:
            lo, hi = w.wall_hull(t, a)
            if not f.paused(job, lo, hi) and not f.blacked_out(spec, lo, hi):
                return w.wall_at(t)
        t = max(t, b)
    return None


def _dropped_since(f: Facts, job: str, at: datetime) -> bool:
    """Whether the daemons stopped carrying the job at some moment from `at` to the end (it
    was removed, or a daemon started while its file was broken): a version ended and no
    other began with it. An edit ends one version where the next begins: no gap."""
    versions = f.out.versions.get(job, [])
    for v, nxt in zip(versions, [*versions[1:], None], strict=True):
        if v.until is not None and (nxt is None or nxt.since > v.until) and (nxt.since if nxt else f.out.end) > at:
            return True
    return False


# --- the truth of what the notifier and the audit say --------------------------------------


def silence_truth(f: Facts) -> list[Counterexample]:
    """No silence notice for a job held by a window or a pause, for a gap inside its
    tolerance, or for time chronod itself was down.

    The simulation runs no notifier thread: the notifier's own decision
    (chronod.notify.core.decide) is replayed over each job's history as the store recorded
    it, with rounds at every run's end, at every silence deadline and at each edge of a
    hold, only while a daemon lives (a life's first round is told how long none lived).
    Each silence it calls is judged against the simulation's record: the processes that
    succeeded, its pauses and windows, the daemons' lives."""
    from chronod.core.model import RunState as S
    from chronod.notify import core as notify

    w = f.out.world
    lives = [(life.started, life.ended if life.ended is not None else w.mono()) for life in w.lives]
    rows_by_job, stored_wins = _stored_ends(f)
    ended: dict[tuple[str, int], float] = {}  # the monotonic end of each attempt's process
    wins: dict[str, list[float]] = defaultdict(list)  # ... of each success, by job
    for p in f.procs:
        if p.end_mono() > w.mono():
            continue
        ended[(p.run_id, p.attempt)] = p.end_mono()
        # a success chronod never learned of (an unsafe run recorded lost) is one_terminal_state's
        if p.final_state() == S.SUCCEEDED and (p.run_id, p.attempt) in stored_wins:
            wins[p.job_id].append(p.end_mono())
    out: list[Counterexample] = []
    for job_wins in wins.values():
        job_wins.sort()
    win_walls: dict[str, list[datetime]] = {}  # the wall times of each job's successes, sorted
    for job, versions in f.out.versions.items():
        for v in versions:
            spec = v.spec
            if not spec.enabled or not spec.max_silence_s:
                continue
            until = v.until or f.out.end
            first, last = w.last_mono_at(v.since), w.last_mono_at(until)
            ends = sorted(m for m in wins.get(job, []) if first <= m <= last)
            if all(b - a <= spec.max_silence_s for a, b in itertools.pairwise([first, *ends, last])):
                continue  # never a gap the switch could be asked about
            holds = [
                h for h in _holds(f, job, spec, v.since, until) if w.showed(h[0], h[1])
            ]  # a step may pass over one
            rows = sorted(
                (
                    (ended.get((r.run_id, r.attempts)) or w.last_mono_at(r.finished_at), r)
                    for r in rows_by_job.get(job, [])
                    if v.since <= r.finished_at <= until
                ),
                key=lambda mr: (mr[0], mr[1].finished_at, mr[1].run_id),
            )
            for now, what in _silences(w, notify, spec, v.since, until, rows, holds, lives):
                if job not in win_walls:
                    win_walls[job] = sorted(w.wall_at(m) for m in wins.get(job, []))
                why = _false_silence(w, spec, now, wins.get(job, []), win_walls[job], holds, lives, v.since)
                if why:
                    out.append(Counterexample(w.wall_at(now), job, "-", f"silence notice ({what}) {why}"))
                    break
    return sorted(out, key=lambda c: c.at)


def _stored_ends(f: Facts) -> tuple[dict[str, list[Any]], set[tuple[str, int]]]:
    """Every end of a run the store recorded, by job, as the notifier read it when it was
    recorded; and the (run id, attempt) of each recorded success. A backfill opens a run
    that ended again (docs/backfill.md, Recording): its row then shows the last attempt
    only, but the notifier saw the earlier success when it ended (the attempts table keeps
    it); a replay over the final rows alone would call a silence the notifier never saw."""
    ends: dict[str, list[Any]] = defaultdict(list)
    wins: set[tuple[str, int]] = set()
    for r in f.rows.values():
        if r.finished_at is not None and r.state in TERMINAL:
            ends[r.job_id].append(r)
            if r.state == RunState.SUCCEEDED:
                wins.add((r.run_id, r.attempts))
        if r.attempts < 2:
            continue  # the row is its only attempt
        for a in f.out.store.attempts(r.run_id):
            if a.attempt < r.attempts and a.state == RunState.SUCCEEDED and a.finished_at is not None:
                # a success ends the run: the row showed it until the backfill opened it again
                ends[r.job_id].append(
                    replace(r, state=a.state, attempts=a.attempt, started_at=a.started_at, finished_at=a.finished_at)
                )
                wins.add((r.run_id, a.attempt))
    return ends, wins


def _holds(f: Facts, job: str, spec: JobSpec, start: datetime, end: datetime) -> list[tuple[datetime, datetime, str]]:
    """(from, to, what) of every pause of the job and every window of its in [start, end]."""
    spans = [(a, b or f.out.end, "a pause") for a, b in f.out.paused.get(job, [])]
    spans += [(a, b, f"window {wd.name}") for wd, a, b in f.window_spans(spec, start, end)]
    return sorted(spans, key=lambda s: s[0])


def _silences(
    w: Any,
    notify: Any,
    spec: JobSpec,
    start: datetime,
    end: datetime,
    rows: list[tuple[float, Any]],
    holds: list[tuple[datetime, datetime, str]],
    lives: list[tuple[float, float]],
) -> list[tuple[float, str]]:
    """The notifier's rounds for one job over [start, end]: (monotonic time, detail) of
    each silence notice its decision gives. The rounds go in monotonic order, as the
    notifier's did, each told the wall clock of its instant: after a step back the wall
    clock shows some times twice, and a replay in wall order would see a success before
    it happened. `rows` are the recorded ends with the monotonic time each was known,
    `lives` the daemons' lives (one boot: a life's first round measures the time none
    lived as the notifier does, `notify.downtime_s`)."""
    first, last = w.last_mono_at(start), w.last_mono_at(end)
    edges = sorted(
        {
            *(m for m, _ in rows),
            *(m for a, b, _ in holds for t in (a, b) for m in w.monos_at(t)),
            *(m for m, _ in w.steps),  # a step may move the clock into or out of a hold
            *(a for a, _ in lives),  # each daemon's notifier decides as it starts
            first,
        }
    )
    edges = [m for m in edges if first <= m < last] + [last]
    state = notify.NotifyState()
    said: list[tuple[float, str]] = []
    was_held, last_round, i = False, None, 0
    tick = timedelta(milliseconds=1)

    def life_of(m: float) -> int | None:
        return next((k for k, (a, b) in enumerate(lives) if a <= m <= b), None)

    holding = _Cover([(a, b) for a, b, _ in holds], False)  # (a round of a month's 20 s job each ended run)

    def round_at(m: float) -> None:
        nonlocal state, was_held, last_round, i
        k = life_of(m)
        if k is None:
            return  # no daemon, no notifier
        t = w.wall_at(m)
        down, before = 0.0, life_of(last_round) if last_round is not None else None
        if before is not None and before != k:  # none decided since the life of the last round ended
            alive = {"at": w.wall_at(lives[before][1]).isoformat(), "mono": lives[before][1], "boot": "sim"}
            down = notify.downtime_s(alive, w.wall_at(lives[k][0]), lives[k][0], "sim")
        ended = []
        while i < len(rows) and rows[i][0] <= m:
            ended.append(rows[i][1])
            i += 1
        held = holding.count(t) > 0  # some hold has a <= t < b
        # a window that held the job while no notifier decided ended unseen: the notifier
        # reads it from the windows (a pause that came and went then leaves no trace)
        since = t - timedelta(seconds=down)
        unseen = down > 0 and any(a < t and since < b for a, b, what in holds if what.startswith("window"))
        notices, state = notify.decide(
            spec,
            ended,
            state,
            t,
            known_since=start,
            paused=held,
            resumed=not held and (was_held or unseen),
            down_s=down,
            news={r.run_id for r in ended},  # each row is read once, at its end (chronod.notify.reads)
        )
        said.extend((m, n.detail) for n in notices if n.event == "silence")
        was_held, last_round = held, m

    for m in edges:
        while True:  # the rounds the silence deadline wakes before the next edge
            deadline = notify.silence_deadline(spec, state)
            if deadline is None or deadline < start:
                break
            due = w.first_mono_from(deadline + tick, first if last_round is None else last_round)
            if due is None or due >= m:
                break
            round_at(due)
            if notify.silence_deadline(spec, state) == deadline:
                break  # not decided (no daemon then): the next edge decides
        round_at(m)
    return said


def _false_silence(
    w: Any,
    spec: JobSpec,
    now: float,
    wins: list[float],
    walls: list[datetime],
    holds: list[tuple[datetime, datetime, str]],
    lives: list[tuple[float, float]],
    since: datetime,
) -> str | None:
    """Why a silence called at the monotonic instant `now` is false by the record, or None
    when it is true: the time since the last success (or the job's start, or a hold's end)
    without the time no daemon lived was shorter than the allowance by both clocks.
    `wins` are the monotonic ends of the job's successes, sorted, `walls` their wall times,
    sorted (after a step back the two orders differ): the latest of each up to `now` is a
    bisection, not a walk over the job's whole history at each notice.

    The notifier counts by the wall clock, as an operator reads it: a step forward is time
    without a success on every dashboard, and a silence it calls is true by the wall. After
    a step back the wall clock shows some times twice, and a success before the step shows
    a later wall time than those after it: by the monotonic clock that silence is true."""
    at = w.wall_at(now)
    hold = next((what for a, b, what in holds if a <= at < b), None)
    if hold is not None:
        return f"while {hold} held the job"
    allowed = (spec.max_silence_s or 0) + spec.tolerance_s
    downs = [(a[1], b[0]) for a, b in itertools.pairwise(lives) if b[0] > a[1]]
    basis = max(
        [
            w.last_mono_at(since, now),
            *_latest(wins, now),
            *(w.last_mono_at(b, now) for _, b, _ in holds if b <= at),
        ]
    )
    down = sum(max(0.0, min(b, now) - max(a, basis)) for a, b in downs)
    quiet = now - basis - down
    wall_basis = max([since, *_latest(walls, at), *(b for _, b, _ in holds if b <= at)])
    wall_downs = [(w.wall_at(a), w.wall_at(b)) for a, b in downs]
    wall_down = sum(max(0.0, (min(b, at) - max(a, wall_basis)).total_seconds()) for a, b in wall_downs)
    if max(quiet, (at - wall_basis).total_seconds() - wall_down) >= allowed - 0.001:
        return None  # at the instant the allowance runs out the switch may trip
    return (
        f"after {quiet:.1f}s without a success (max_silence_s {spec.max_silence_s} + tolerance_s "
        f"{spec.tolerance_s}; chronod down {down:.1f}s of it, the last success or hold end at {w.wall_at(basis):%H:%M:%S})"
    )


def _latest(ordered: list[Any], upto: Any) -> list[Any]:
    """The last of a sorted list at or before `upto`, as a list of it (empty: none)."""
    k = bisect.bisect_right(ordered, upto)
    return ordered[k - 1 : k] if k else []


def audit_truth(f: Facts) -> list[Counterexample]:
    """What the audit says of occurrences is true, beyond audit_agrees (succeeded or not):
    `missed` does not list an occurrence its job's definition withdrew before it fell due,
    and `did-it-run`, asked while the daemons ran about an occurrence due and not started
    (chronod.sim.audit.probe), says what holds it: the pause that was open, the resource
    whose slots were all taken; it never calls a resource wait of a resource with a free
    slot, nor a plain late occurrence, a wait."""
    out = []
    said = f.missed()
    for rid, (job, _) in said.items():
        row = f.rows.get(rid)
        if row is None or row.state != RunState.CANCELLED or f.by_run.get(rid) or row.started_at is not None:
            continue
        changed = [
            v.until
            for v in f.out.versions.get(job, [])
            if v.until is not None and row.fire_at - timedelta(days=1) <= v.until < row.fire_at
        ]
        if changed and row.finished_at is not None and row.finished_at < row.fire_at:
            out.append(
                Counterexample(
                    row.fire_at,
                    job,
                    rid,
                    f"`missed` lists it, but the job's definition changed at {changed[-1]:%H:%M:%S} "
                    "before it fell due and withdrew it",
                )
            )
    for p in f.out.probes:
        truth = _holder(f, p)
        if truth is not None and (p.hold_kind, p.hold_name) != truth[:2]:
            out.append(
                Counterexample(
                    p.at, p.job, p.run_id, f"`did-it-run` says {p.state} ({p.reason!r}) while {truth[2]} held it"
                )
            )
        elif (
            p.hold_kind == "resource"
            and (p.hold_name != p.resource or p.going < p.limit)
            and not f.disturbed(p.fire_at - timedelta(seconds=1), p.at)
        ):
            out.append(
                Counterexample(
                    p.at,
                    p.job,
                    p.run_id,
                    f"`did-it-run` says it waits for resource {p.hold_name}, but {p.going} of its "
                    f"{p.limit} slots were taken",
                )
            )
    return sorted(out, key=lambda c: c.at)


def _in_window(f: Facts, p: Any) -> bool:
    versions = f.out.versions.get(p.job, [])
    spec = versions[-1].spec if versions else None
    return spec is not None and f.blacked_out(spec, p.fire_at - timedelta(seconds=1), p.at + timedelta(seconds=1))


def _holder(f: Facts, p: Any) -> tuple[str, str, str] | None:
    """(hold kind, name, in words) of what held a probed occurrence by the record, when it
    is unambiguous (None: nothing did, or the record cannot tell)."""
    if p.paused:
        return ("pause", "job", "a pause of the job")
    if f.disturbed(p.fire_at - timedelta(seconds=1), p.at):
        return None  # a daemon restarted or stalled since: it may not have reached it yet
    if p.hold_kind == "window" or (f.windows and _in_window(f, p)):
        return None  # a window's deferral (blackout_honoured and the audit's own tests)
    if p.resource and p.going >= p.limit and not p.job_going and not p.earlier_pending:
        return ("resource", p.resource, f"every slot of resource {p.resource} taken")
    return None


# --- the record's reasons against what happened ------------------------------------------

INSTANT = timedelta(milliseconds=1)


def _going_at(f: Facts, job: str, at: datetime, but: str = "") -> list[tuple[Proc, datetime]]:
    """The runs of the job (other than run `but`) going at wall time `at`, each as the
    process of the attempt it began with and the end of its last attempt: an attempt's
    process running, or a run waiting for its next attempt between two of them (its
    retry always starts, so under `overlap: forbid` the job's line waits for it:
    docs/backfill.md; `Facts.spells`)."""
    return [(first, b) for first, _, b in f.spells_meeting(job, at - INSTANT, at + INSTANT) if first.run_id != but]


def _asked_for(f: Facts) -> Callable[[Proc], str | None]:
    """Which processes an operator asked for: "manual" for a manual run, "backfill" for a
    run a backfill started (a backfill reruns an occurrence under its own run id: only
    the processes started after the backfill was stored are its, and only those told a
    fire time from then on, CHRONO_FIRE_AT, when it opened the run: an occurrence the
    backfill names that first falls due, or is caught up after a restart, once it was
    stored runs as scheduled first). Computed once."""
    if f.asked is None:
        f.asked = _asked(f)
    return f.asked


def _asked(f: Facts) -> Callable[[Proc], str | None]:
    since: dict[str, datetime] = {}
    for bf_id in f.out.backfills:
        bf = f.out.store.get_backfill(bf_id)
        if bf is not None:
            for rid in bf.run_ids:
                since[rid] = min(since.get(rid, bf.created_at), bf.created_at)

    def kind(p: Proc) -> str | None:
        if p.run_id in f.out.manual:
            return "manual"
        at = since.get(p.run_id)
        # CHRONO_FIRE_AT is whole seconds
        if at is not None and p.started_wall >= at and (p.fire_at is None or p.fire_at >= at.replace(microsecond=0)):
            return "backfill"
        return None

    return kind


def _specs(f: Facts) -> dict[str, JobSpec]:
    return {job: vs[-1].spec for job, vs in f.out.versions.items()}


def reason_truth(f: Facts) -> list[Counterexample]:
    """Every skipped state agrees with what happened when it was recorded:
    `skipped_overlap` only while a run of the job was running (the simulation's processes,
    not the daemon's opinion); `skipped_outage` only if chronod was down, stalled, without
    its database or its clock stepped between the fire time and the record (or, behind a
    catch-up backlog, within the catch-up window before it); `skipped_resource` only if
    the resource was full the whole time the run waited."""
    from chronod.sim.scenario import RESOURCES

    out = []
    specs = _specs(f)
    for rid, row in f.rows.items():
        at = row.finished_at
        spec = specs.get(row.job_id)
        if at is None or spec is None or row.fire_at is None or row.fire_at > f.horizon:
            continue
        if row.state == RunState.SKIPPED_OVERLAP:
            if not _going_at(f, row.job_id, at, but=rid) and not f.disturbed(row.fire_at - timedelta(seconds=1), at):
                out.append(
                    Counterexample(
                        row.fire_at,
                        row.job_id,
                        rid,
                        f"recorded skipped_overlap at {at:%H:%M:%S.%f} ({row.error}), "
                        "but no run of the job was running then",
                    )
                )
        elif row.state == RunState.SKIPPED_OUTAGE:
            back = spec.catchup_window_s if "backlog" in (row.error or "") else 1.0
            since = row.fire_at - timedelta(seconds=back)
            until = max(at, row.fire_at + timedelta(seconds=ON_TIME_GRACE_S + LAG_S))
            if (row.error or "").startswith("this node was"):
                continue  # the start limit, named as such (fire_lag_bounded judges the node)
            if not f.disturbed(since, until):
                out.append(
                    Counterexample(
                        row.fire_at,
                        row.job_id,
                        rid,
                        f"recorded skipped_outage ({row.error}), but chronod was up, not stalled and had its database",
                    )
                )
        elif row.state == RunState.SKIPPED_RESOURCE and spec.resource:
            # until its deadline: a slot free after it (chronod came back too late) was no slot for it
            until = min(at, row.fire_at + timedelta(seconds=spec.catchup_window_s))
            # a pause or a window held it then: it waited for no slot; nor, under `forbid`,
            # while another run of its job was going (its line held it, `spells`)
            held = [(a, b) for a, b, _ in _holds(f, row.job_id, spec, row.fire_at, until)]
            if spec.overlap == "forbid":
                held += [(a, b) for p, a, b in f.spells_meeting(row.job_id, row.fire_at, until) if p.run_id != rid]
            spans = f.holding(spec.resource, row.fire_at, until)
            free = _free_moment(f, spans, RESOURCES[spec.resource], row.fire_at, until, held)
            if free is not None:
                out.append(
                    Counterexample(
                        row.fire_at,
                        row.job_id,
                        rid,
                        f"recorded skipped_resource, but resource {spec.resource} "
                        f"had a free slot at {free:%H:%M:%S} while it waited",
                    )
                )
    return sorted(out, key=lambda c: c.at)


def _free_moment(
    f: Facts,
    spans: list[tuple[datetime, datetime]],
    limit: int,
    start: datetime,
    end: datetime,
    held: list[tuple[datetime, datetime]],
) -> datetime | None:
    """A moment of [start, end] (not disturbed, nor `held`: a pause or a maintenance
    window held the run, which then waited for no slot) when fewer than `limit` runs held
    the resource (`spans`: the hulls of its processes that meet [start, end], `Facts.holding`).
    A disturbance spares only itself and the LAG_S after it (a daemon back from it acts
    within that), not the whole stretch between two of the resource's starts or ends."""
    settled, edges = _settling(f)
    points = sorted(
        {
            start,
            end,
            *(t for a, b in [*spans, *held] for t in (a, b) if start <= t <= end),
            *edges[bisect.bisect_left(edges, start) : bisect.bisect_right(edges, end)],
        }
    )
    # how many spans hold each midpoint, by bisection over their sorted ends (a walk over
    # every span for every point took a third of a two-day run of 1,000 jobs whose resource
    # line was days long): a span [a, b] holds m when a <= m, less those with b < m
    covering, holds = _Cover(spans, True), _Cover(held, False)
    for x, y in itertools.pairwise(points):
        mid = x + (y - x) / 2
        if y - x <= 2 * INSTANT or settled.count(mid) or holds.count(mid):
            continue
        if covering.count(mid) < limit:
            return mid
    return None


def _settling(f: Any) -> tuple[_Cover, list[datetime]]:
    """The disturbances with the LAG_S after each (`_free_moment`), counted by `_Cover`, and
    their ends sorted: built once for the checks, not for each run skipped for its resource
    (a month has hundreds of disturbances and thousands of such runs)."""
    got = getattr(f, "_settling", None)
    if got is None:
        settling = [(a, b + timedelta(seconds=LAG_S)) for a, b in f.spans]
        got = (_Cover(settling, True), sorted(t for a, b in settling for t in (a, b)))
        f._settling = got
    return got


class _Cover:
    """How many of some spans hold a moment: [a, b] (`closed`) or [a, b)."""

    def __init__(self, spans: list[tuple[datetime, datetime]], closed: bool) -> None:
        spans = [(a, b) for a, b in spans if a < b or (closed and a == b)]  # (none holds an empty one)
        self._starts = sorted(a for a, _ in spans)
        self._ends = sorted(b for _, b in spans)
        self._closed = closed

    def count(self, at: datetime) -> int:
        began = bisect.bisect_right(self._starts, at)
        over = bisect.bisect_left(self._ends, at) if self._closed else bisect.bisect_right(self._ends, at)
        return began - over


def schedule_first(f: Facts) -> list[Counterexample]:
    """A backfill or a manual run never makes a scheduled occurrence skip: a scheduled
    occurrence recorded `skipped_overlap` while only runs an operator asked for were
    running broke the promise (unless one of them ran through its whole catch-up window,
    or, under `catchup: latest` or `none`, a newer occurrence fell due while it waited and
    took its place: only the newest waits); and under `overlap: forbid` the backfill yields: none of its runs starts while a
    scheduled occurrence that fell due before it still waits to start."""
    out = []
    specs = _specs(f)
    asked = _asked_for(f)
    rows_by_job: dict[str, list[Run]] = defaultdict(list)
    for r in f.rows.values():
        rows_by_job[r.job_id].append(r)
    for rid, row in f.rows.items():
        if row.trigger != "schedule" or row.state != RunState.SKIPPED_OVERLAP or row.finished_at is None:
            continue
        spec = specs.get(row.job_id)
        alive = [p for p, _ in _going_at(f, row.job_id, row.finished_at, but=rid)]
        ops = [p for p in alive if asked(p)]
        if not alive or len(ops) < len(alive):
            continue
        window = timedelta(seconds=spec.catchup_window_s if spec else 0)
        if row.finished_at >= row.fire_at + window - timedelta(seconds=1):
            continue  # it waited its whole window behind a run already going
        if spec is not None and spec.catchup != "all" and _newer_fell_due(rows_by_job[row.job_id], row):
            continue  # `latest` and `none`: a newer occurrence that fell due as it waited took its place
        out.append(
            Counterexample(
                row.fire_at,
                row.job_id,
                rid,
                f"scheduled occurrence recorded skipped_overlap behind {asked(ops[0])} run {ops[0].run_id}",
            )
        )
    firsts: dict[str, Proc] = {}
    rerun: dict[str, Proc] = {}  # run id -> the first attempt a backfill started (a rerun's counts on)
    for p in f.procs:
        firsts.setdefault(p.run_id, p)
        if asked(p) == "backfill":
            rerun.setdefault(p.run_id, p)
    for job, procs in f.by_job.items():
        spec = specs.get(job)
        if spec is None or spec.overlap != "forbid":
            continue
        if not any(rerun.get(p.run_id) is p for p in procs):
            continue
        # only an occurrence that started more than LAG_S late can have waited while a
        # backfill run started (a month of a job every 20 s is 130,000 that did not)
        lag = timedelta(seconds=LAG_S)
        waiting = [
            (r.fire_at, firsts[rid])
            for r in rows_by_job.get(job, ())
            if (rid := r.run_id) in firsts
            and r.trigger == "schedule"
            and r.fire_at is not None
            and firsts[rid].started_wall > r.fire_at + lag
            and not asked(firsts[rid])
        ]
        for p in procs:
            if rerun.get(p.run_id) is not p:
                continue  # a retry of a backfilled run always starts
            for fire, first in waiting:
                if fire + timedelta(seconds=LAG_S) < p.started_wall < first.started_wall and not f.disturbed(
                    fire - timedelta(seconds=1), first.started_wall
                ):
                    out.append(
                        Counterexample(
                            p.started_wall,
                            job,
                            p.run_id,
                            f"backfill run started while the scheduled occurrence "
                            f"{first.run_id} of {first.scheduled_at:%H:%M:%S} waited (it started at "
                            f"{first.started_wall:%H:%M:%S})",
                        )
                    )
                    break
    return sorted(out, key=lambda c: c.at)


def _newer_fell_due(rows: list[Run], row: Run) -> bool:
    """Whether a newer scheduled occurrence of the row's job fell due between the row's fire
    time and its record (a backfill's rerun of one counts: it fell due as scheduled).
    Under `latest` and `none` such an occurrence replaces one still waiting its turn
    behind an operator's run (chronod.core.policy.newest_waiting)."""
    assert row.finished_at is not None
    for r in rows:
        if r.scheduled_at <= row.scheduled_at or r.trigger not in ("schedule", "backfill"):
            continue
        fell_due = r.fire_at if r.trigger == "schedule" and r.fire_at is not None else r.scheduled_at
        if fell_due <= row.finished_at + INSTANT:
            return True
    return False


def held_order(f: Facts) -> list[Counterexample]:
    """Occurrences a maintenance window held (`blackout: defer`) start in scheduled order
    when it ends, the one that falls due as it ends after them."""
    out: list[Counterexample] = []
    specs = _specs(f)
    if not f.windows:
        return out
    firsts = [p for p in f.procs if p.attempt == 1 and p.run_id not in f.out.manual and p.run_id not in f.backfilled]
    by_job: dict[str, list[Proc]] = defaultdict(list)
    for p in firsts:
        by_job[p.job_id].append(p)
    for job, procs in by_job.items():
        spec = specs.get(job)
        if spec is None or spec.blackout != "defer" or not procs:
            continue
        lo, hi = procs[0].scheduled_at - timedelta(days=1), procs[-1].started_wall + timedelta(seconds=1)
        for _, a, b in f.window_spans(spec, lo, hi):
            held = [p for p in procs if a <= p.scheduled_at < b and p.started_wall >= b - INSTANT]
            if not held:
                continue
            last = max(p.scheduled_at for p in held)
            after = [p for p in procs if b <= p.scheduled_at and p.started_wall >= b - INSTANT]
            group = sorted(held + after, key=lambda p: (p.started_mono, p.pid))
            for x, y in itertools.pairwise(group):
                if y.scheduled_at < x.scheduled_at and y.scheduled_at <= last:
                    out.append(
                        Counterexample(
                            y.started_wall,
                            job,
                            y.run_id,
                            f"held occurrence of {y.scheduled_at:%H:%M:%S} started "
                            f"after the one of {x.scheduled_at:%H:%M:%S} (window ended {b:%H:%M:%S})",
                        )
                    )
                    break
    return sorted(out, key=lambda c: c.at)


INVARIANTS: dict[str, Callable[[Facts], list[Counterexample]]] = {
    "one_terminal_state": one_terminal_state,
    "unsafe_at_most_once": unsafe_at_most_once,
    "fire_lag_bounded": fire_lag_bounded,
    "catchup_all_in_order": catchup_all_in_order,
    "resource_limit_held": resource_limit_held,
    "watchdog_pinged": watchdog_pinged,
    "audit_agrees": audit_agrees,
    "blackout_honoured": blackout_honoured,
    "backfill_completes": backfill_completes,
    "silence_truth": silence_truth,
    "audit_truth": audit_truth,
    "reason_truth": reason_truth,
    "schedule_first": schedule_first,
    "held_order": held_order,
}


def check(out: Outcome, names: Iterable[str] | None = None) -> dict[str, list[Counterexample]]:
    """Every invariant (or the named ones) over one simulation's outcome."""
    facts = Facts(out)
    return {name: INVARIANTS[name](facts) for name in (names or INVARIANTS)}
