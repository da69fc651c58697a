"""Answers about the past: did an occurrence run, what was missed, how long since a success.

Pure: the schedule says which occurrences fell due, the runs say what happened to them,
and `now` is an argument. An occurrence that fell due and has no row at all is a finding
in its own right ("no record"): the daemon was down and nothing caught it up, or the
database was restored from an older copy.

Runs are read by attribute only (`run_id`, `job_id`, `job_key`, `scheduled_at`,
`fire_at`, `state`, `attempts`, `node`, `exit_code`, `signal`, `error`, `trigger`,
`started_at`, `finished_at`, `next_attempt_at`), so the store's `Run` and test doubles
both fit.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

from chronod.core import occurrence, retention
from chronod.core.blackout import DEFERRED_BY, WAITING_FOR, Hold, pause_hold, paused
from chronod.core.durations import format_duration
from chronod.core.model import ACTIVE_STATES, JobSpec, RunState
from chronod.core.occurrence import Occurrence, node_of_key

GRACE_S = 60  # a due occurrence without a row is only "missing" after this much lag
NO_RECORD = "no_record"  # fell due, no row in the history
NOT_DUE = "not_due"  # the occurrence's fire time is still ahead
NO_OCCURRENCE = "no_occurrence"  # the schedule had nothing due in the question's window
NOT_REGISTERED = "not_registered"  # fell due while the job was not registered: never expected
DEFERRED = "deferred"  # due, held by a maintenance window (blackout: defer) until it ends
HELD_PAUSED = "paused"  # due, not started, and its job is paused: it will not start while the pause lasts
WAITING = "waiting"  # due, not started: it waits in the line of its resource for a free slot
MAX_WALK = 100_000  # did-it-run --since looks at most at this many of the latest occurrences

Span = tuple[datetime, "datetime | None"]
"""When a job definition was known: from its registration to its removal (None: still registered)."""


@dataclass(frozen=True)
class Answer:
    """The answer to "did it run?": yes or no, the state behind it, and why in words."""

    yes: bool
    state: str  # a run state, or NO_RECORD / NOT_DUE / NO_OCCURRENCE
    reason: str
    run: Any | None = None
    occurrence: Occurrence | None = None
    hold: Hold | None = None


@dataclass(frozen=True)
class Miss:
    """An occurrence in a window that did not succeed, or fell due and has no row."""

    job_id: str
    owner: str
    job_key: str
    node: str | None
    scheduled_at: datetime
    fire_at: datetime
    run_id: str
    state: str  # a terminal state, "pending" (overdue), DEFERRED, HELD_PAUSED, WAITING or NO_RECORD
    reason: str
    run: Any | None = None
    hold: Hold | None = None


@dataclass(frozen=True)
class Silence:
    """Time since the last success against the job's dead man's switch."""

    last_success: datetime | None
    age_s: float | None  # None: no success known and no start point to count from
    max_silence_s: int | None
    silent: bool


@dataclass(frozen=True)
class SilentJob:
    """A job past its dead man's switch: no success for longer than `max_silence_s`."""

    job_id: str
    owner: str
    last_success: datetime | None  # None: it never succeeded
    silence_s: float  # since the last success, or since the job was known
    max_silence_s: int
    silent_since: datetime  # when the switch tripped


def iso(at: datetime | None) -> str | None:
    """An aware datetime as ISO-8601 in UTC with an explicit offset ("+00:00")."""
    if at is None:
        return None
    return at.astimezone(timezone.utc).isoformat()


def _z(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def occurrences(
    spec: JobSpec, schedule: Any, start: datetime, end: datetime, nodes: Iterable[str] = ()
) -> list[Occurrence]:
    """Every occurrence whose nominal time is in (start, end], ascending."""
    if schedule.kind == "reboot" or not spec.enabled:
        return []
    places = occurrence.placements(spec, nodes)
    return [p.at(at) for at in schedule.fires(start, end) for p in places]


def _nodes_from_runs(runs: Iterable[Any]) -> set[str]:
    return {n for key in {r.job_key for r in runs} if (n := node_of_key(key))}


def registered(spans: Sequence[Span] | None, fire_at: datetime) -> bool:
    """Whether an occurrence firing at `fire_at` is expected: inside one of the job's spans
    (start and end included). No record of the spans at all (None): always expected."""
    if spans is None:
        return True
    return any(start <= fire_at and (end is None or fire_at <= end) for start, end in spans)


def describe_unregistered(spans: Sequence[Span] | None, fire_at: datetime) -> str:
    """Why an occurrence was not expected, naming the registration it fell outside of."""
    spans = spans or []
    before = [s for s in spans if fire_at < s[0]]
    if not spans:
        return "not registered: the store has no record of this job being registered"
    if before and before[0] is spans[0]:
        return f"not registered: it fell due at {_z(fire_at)}, before the job was first registered ({_z(spans[0][0])})"
    ended = max((e for _, e in spans if e is not None and e < fire_at), default=None)
    if ended is not None and not before:
        return f"not registered: it fell due at {_z(fire_at)}, after the job was removed ({_z(ended)})"
    return f"not registered: it fell due at {_z(fire_at)}, while the job was removed from the registry"


_DEFERRAL = re.compile(r"(?P<name>.*?) \((?P<reason>.*)\) until (?P<until>\S+)$", re.DOTALL)
_SLOT_WAIT = re.compile(r"(?P<name>\S+) \((?P<reason>.*)\) since (?P<since>\S+)$", re.DOTALL)


def hold_of(run: Any, spec: JobSpec | None, pauses: Iterable[Any], now: datetime) -> Hold | None:
    """Why a due occurrence that has not started waits on purpose, or None: a pause that
    holds its job now (`pauses`: chronod.core.blackout.Pause, a job's own first), else the
    maintenance window that deferred it, as the daemon wrote it on the row
    (`blackout.Hit.deferral`, with the window's end in `next_attempt_at`), else the line of
    the resource it waits in (`blackout.slot_wait`, its deadline in `next_attempt_at`)."""
    if run is None or run.state != RunState.PENDING or run.fire_at > now:
        return None
    p = paused(spec, pauses, now) if spec is not None else None
    if p is not None:
        return pause_hold(p)
    error = run.error or ""
    if error.startswith(WAITING_FOR):
        w = _SLOT_WAIT.match(error[len(WAITING_FOR) :])
        if w is None:
            return None
        since = datetime.strptime(w["since"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        return Hold("resource", w["name"], w["reason"], run.next_attempt_at, since=since)
    m = _DEFERRAL.match(error[len(DEFERRED_BY) :]) if error.startswith(DEFERRED_BY) else None
    if m is None:
        return None
    until = run.next_attempt_at or datetime.strptime(m["until"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return Hold("window", m["name"], m["reason"], until)


def verdict(hold: Hold) -> str:
    """The audit's state for a held occurrence."""
    return {"window": DEFERRED, "resource": WAITING}.get(hold.kind, HELD_PAUSED)


def _attempts(n: int) -> str:
    return f"{n} attempt" if n == 1 else f"{n} attempts"


def describe_run(run: Any, now: datetime, spec: JobSpec | None = None) -> str:
    """Why a run is in its state, in one sentence an operator can act on; a run a backfill
    started says so."""
    text = _describe(run, now, spec)
    return f"{text} (run by a backfill)" if getattr(run, "trigger", None) == "backfill" else text


def _describe(run: Any, now: datetime, spec: JobSpec | None) -> str:
    s, err = run.state, (f": {run.error}" if run.error else "")
    on = f" on {run.node}" if run.node else ""
    if s == RunState.SUCCEEDED:
        when = f" at {_z(run.finished_at)}" if run.finished_at else ""
        return f"succeeded{when}{on} (attempt {run.attempts})"
    if s == RunState.FAILED:
        tries = _attempts(run.attempts)
        if run.exit_code is not None:
            extra = "" if run.error == f"exit code {run.exit_code}" else err
            return f"failed with exit code {run.exit_code} after {tries}{on}{extra}"
        if run.signal is not None:
            extra = "" if (run.error or "").startswith(f"killed by signal {run.signal}") else err
            return f"failed: killed by signal {run.signal} after {tries}{on}{extra}"
        return f"failed{on}{err or ': could not start'}"
    if s == RunState.TIMED_OUT:
        limit = f" of {format_duration(spec.timeout_s)}" if spec and spec.timeout_s else ""
        return f"timed out: killed after its timeout{limit}{on}"
    if s == RunState.CANCELLED:
        return f"cancelled{on}{err or ' (by overlap: replace or by an operator)'}"
    if s == RunState.SKIPPED_OVERLAP:
        return f"skipped by the overlap policy{err or ' (forbid): the previous run was still going'}"
    if s == RunState.SKIPPED_OUTAGE:
        policy = f" (catchup: {spec.catchup})" if spec else ""
        return f"skipped by the catch-up policy{policy}{err or ': it fell due while nothing could run it'}"
    if s == RunState.SKIPPED_PAUSED:
        reason = (run.error or "").removeprefix("job paused: ").removeprefix("paused: ")
        return (
            f"skipped: the job was paused when it fell due (reason: {reason})"
            if reason
            else "skipped: the job was paused when it fell due"
        )
    if s == RunState.SKIPPED_BLACKOUT:
        why = run.error or "inside a maintenance window"
        return f"skipped: it fell due {why}" if why.startswith("inside") else f"skipped: {why}"
    if s == RunState.SKIPPED_RESOURCE:
        res = f" {spec.resource!r}" if spec and spec.resource else ""
        return f"skipped: it waited for a slot of its resource{res} and got none inside its catch-up window{err}"
    if s == RunState.SKIPPED_ACCOUNT:
        return f"skipped: {run.error or 'its account is locked or expired'}"
    if s == RunState.LOST:
        return f"lost: the outcome cannot be known (its node died mid-run){err}"
    if s == RunState.RUNNING:
        since = f" since {_z(run.started_at)}" if run.started_at else ""
        return f"still running{on}{since} (attempt {run.attempts})"
    if s == RunState.RETRY_WAIT:
        nxt = f"; next attempt at {_z(run.next_attempt_at)}" if run.next_attempt_at else ""
        code = f" (exit code {run.exit_code})" if run.exit_code is not None else ""
        return f"retrying: attempt {run.attempts} failed{code}{nxt}"
    if s == RunState.PENDING:
        if run.fire_at > now:
            return f"not due yet: fires at {_z(run.fire_at)}"
        if (hold := hold_of(run, None, (), now)) is not None:
            return hold.describe(run.fire_at)
        return f"due at {_z(run.fire_at)} but not started yet (late by {format_duration((now - run.fire_at).total_seconds())})"
    return f"{s}{err}"


def _judge(
    occ: Occurrence,
    run: Any | None,
    now: datetime,
    spec: JobSpec,
    spans: Sequence[Span] | None = None,
    pruned: Any | None = None,
    pauses: Iterable[Any] = (),
) -> tuple[str, str]:
    """(state, reason) for one occurrence given its row (or its absence), when the job
    was registered (`spans`, None: unknown) and its pruning watermark (`pruned`, a
    store.api.Pruned or None)."""
    if run is not None:
        if run.state == RunState.PENDING and run.fire_at > now:
            return NOT_DUE, describe_run(run, now, spec)
        if (hold := hold_of(run, spec, pauses, now)) is not None:
            return verdict(hold), hold.describe(run.fire_at)
        return run.state, describe_run(run, now, spec)
    if not registered(spans, occ.fire_at):
        return NOT_REGISTERED, describe_unregistered(spans, occ.fire_at)
    if pruned is not None and retention.was_pruned(occ.scheduled_at, pruned):
        return retention.PRUNED, (
            f"{retention.pruned_reason(pruned.kept_s)}: its row was deleted with the "
            f"runs up to {_z(pruned.through)}; what happened to it is no longer known"
        )
    if occ.fire_at > now:
        return NOT_DUE, f"not due yet: fires at {_z(occ.fire_at)}"
    return NO_RECORD, (
        f"no record: it fell due at {_z(occ.fire_at)} but the history has no row for it "
        f"(run id {occ.run_id}); the daemon was down and nothing caught it up, "
        "or the database was restored from an older copy"
    )


def _answer_for(
    occs: Sequence[Occurrence],
    by_id: Mapping[str, Any],
    now: datetime,
    spec: JobSpec,
    spans: Sequence[Span] | None = None,
    pruned: Any | None = None,
    pauses: Iterable[Any] = (),
) -> Answer:
    pauses = list(pauses)
    judged = [(o, by_id.get(o.run_id), *_judge(o, by_id.get(o.run_id), now, spec, spans, pruned, pauses)) for o in occs]
    if not judged:
        return Answer(False, NO_RECORD, "no node is known to carry this job, so no occurrence can be expected")
    bad = [j for j in judged if j[2] != RunState.SUCCEEDED]
    if not bad:
        o, r, state, reason = judged[-1]
        return Answer(True, state, reason, r, o)
    o, r, state, reason = bad[0]
    if o.node:
        reason = f"on {o.node}: {reason}"
    return Answer(False, state, reason, r, o, hold_of(r, spec, pauses, now))


def _scheduled(spec: JobSpec, schedule: Any) -> bool:
    return bool(schedule.kind != "reboot")


def did_it_run(
    spec: JobSpec,
    runs: Iterable[Any],
    *,
    now: datetime,
    at: datetime | None = None,
    since: datetime | None = None,
    schedule: Any = None,
    nodes: Iterable[str] = (),
    spans: Sequence[Span] | None = None,
    pruned: Any | None = None,
    pauses: Iterable[Any] = (),
) -> Answer:
    """Did the occurrence run?

    - `at`: the occurrence nominally at or just before `at`; yes when it succeeded (for
      `run_on: each`, on every node).
    - `since`: yes when any run scheduled in (since, now] succeeded (manual runs count).
    - neither: the latest occurrence whose fire time is at or before `now`, while the job
      was registered.
    `runs` are the job's runs around the question (the caller picks the window);
    `nodes` are the node names an `each` job runs on (nodes seen in `runs` are added);
    `spans` say when the job was registered: occurrences outside them are not expected;
    `pruned` is the job's pruning watermark: an occurrence there without a row was pruned;
    `pauses` are the pauses set now: a due occurrence of a job one holds is `paused`.
    """
    if at is not None and since is not None:
        raise ValueError("ask about one occurrence (at) or a window (since), not both")
    runs = list(runs)
    schedule = schedule if schedule is not None else _compile(spec)
    nodes = set(nodes) | _nodes_from_runs(runs)
    if since is not None:
        return _did_it_run_since(spec, runs, schedule, since, now, nodes, spans, pruned, pauses)
    if not _scheduled(spec, schedule):
        return _latest_run_answer(runs, now, spec, "@reboot: it runs once per boot")
    nominal = _occurrence_before(spec, schedule, at, now, nodes)
    by_id = {r.run_id: r for r in runs}
    if at is None and nominal is not None and not _any_expected(spec, nominal, nodes, by_id, spans):
        return _nothing_since_registered(schedule, spans, now)
    if nominal is None:
        return Answer(False, NO_OCCURRENCE, "the schedule has no occurrence at or before that time")
    return _answer_for(occurrence.at_each(spec, nominal, nodes), by_id, now, spec, spans, pruned, pauses)


def _any_expected(
    spec: JobSpec, nominal: datetime, nodes: Iterable[str], by_id: Mapping[str, Any], spans: Sequence[Span] | None
) -> bool:
    occs = occurrence.at_each(spec, nominal, nodes)
    return not occs or any(o.run_id in by_id or registered(spans, o.fire_at) for o in occs)


def _nothing_since_registered(schedule: Any, spans: Sequence[Span] | None, now: datetime) -> Answer:
    """The latest occurrence fell due while the job was not registered: none is expected yet."""
    last = (spans or [(now, None)])[-1]
    if last[1] is not None:
        return Answer(
            False,
            NOT_REGISTERED,
            f"the job was removed from the registry at {_z(last[1])}; nothing is expected of it since",
        )
    nxt = schedule.next_after(now)
    when = f"; the next occurrence is at {_z(nxt)}" if nxt else ""
    return Answer(False, NO_OCCURRENCE, f"nothing has fallen due since the job was registered at {_z(last[0])}{when}")


def _occurrence_before(
    spec: JobSpec, schedule: Any, at: datetime | None, now: datetime, nodes: Iterable[str]
) -> datetime | None:
    if at is not None:
        before: datetime | None = schedule.prev_at_or_before(at)
        return before
    nominal: datetime | None = schedule.prev_at_or_before(now)
    occs = occurrence.at_each(spec, nominal, nodes) if nominal else []
    if nominal is not None and occs and all(o.fire_at > now for o in occs):
        # Jitter pushed the latest nominal time past now: the one before it is the latest due.
        nominal = schedule.prev_at_or_before(nominal - timedelta(seconds=1))
    return nominal


def _walk_start(schedule: Any, since: datetime, now: datetime) -> datetime:
    """Where a window's walk through the schedule starts: `since`, or later when the window
    holds more than MAX_WALK occurrences (ten years of a job that fires every second would
    hold hundreds of millions; the latest ones answer the question)."""
    gap = schedule.min_gap_s()
    if (
        not gap or (now - since).total_seconds() <= gap * MAX_WALK
    ):  # compared in seconds: no date arithmetic past the calendar
        return since
    return now - timedelta(seconds=gap * MAX_WALK)


def _latest_run_answer(runs: list[Any], now: datetime, spec: JobSpec, what: str) -> Answer:
    if not runs:
        return Answer(False, NO_RECORD, f"no record of any run ({what})")
    latest = max(runs, key=lambda r: r.scheduled_at)
    return Answer(latest.state == RunState.SUCCEEDED, latest.state, describe_run(latest, now, spec), latest)


def _did_it_run_since(
    spec: JobSpec,
    runs: list[Any],
    schedule: Any,
    since: datetime,
    now: datetime,
    nodes: set[str],
    spans: Sequence[Span] | None = None,
    pruned: Any | None = None,
    pauses: Iterable[Any] = (),
) -> Answer:
    window = [r for r in runs if since < r.scheduled_at <= now]
    wins = [r for r in window if r.state == RunState.SUCCEEDED]
    if wins:
        best = max(wins, key=lambda r: r.finished_at or r.scheduled_at)
        extra = " (a manual run)" if best.trigger.startswith("manual") else ""
        return Answer(True, RunState.SUCCEEDED, describe_run(best, now, spec) + extra, best)
    if not _scheduled(spec, schedule):
        return _latest_run_answer(window, now, spec, "@reboot: it runs once per boot")
    by_id = {r.run_id: r for r in window}
    walked = _walk_start(schedule, since, now)
    due = [
        o
        for o in occurrences(spec, schedule, walked, now, nodes)
        if o.fire_at <= now and (o.run_id in by_id or registered(spans, o.fire_at))
    ]
    if not due and not window:
        nxt = schedule.next_after(now)
        when = f"; the next occurrence is at {_z(nxt)}" if nxt else ""
        return Answer(False, NO_OCCURRENCE, f"nothing fell due between {_z(since)} and now{when}")
    if due:
        last = max(o.scheduled_at for o in due)
        answer = _answer_for([o for o in due if o.scheduled_at == last], by_id, now, spec, spans, pruned, pauses)
    else:
        answer = _latest_run_answer(window, now, spec, "")
    n = len({o.scheduled_at for o in due})
    if n > 1:
        many = f"the more than {MAX_WALK:,}" if walked > since else f"the {n}"
        answer = Answer(
            False,
            answer.state,
            f"none of {many} occurrences since {_z(since)} succeeded; the latest {answer.reason}",
            answer.run,
            answer.occurrence,
            answer.hold,
        )
    return answer


def _compile(spec: JobSpec) -> Any:
    from chronod.core.schedule import compile_schedule

    return compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)


class Mark(NamedTuple):
    """That a run exists: what `missed` needs of the runs that succeeded (the store's slim
    rows; a tuple because a day of a large fleet has tens of thousands)."""

    run_id: str
    job_id: str
    job_key: str
    scheduled_at: datetime
    state: str
    trigger: str


def missed(
    specs: Iterable[JobSpec],
    runs: Iterable[Any],
    *,
    since: datetime,
    now: datetime,
    nodes: Iterable[str] = (),
    known: Mapping[str, Sequence[Span]] | None = None,
    schedules: Mapping[str, Any] | None = None,
    grace_s: int = GRACE_S,
    marks: Iterable[Mark] | None = None,
    pruned: Mapping[str, Any] | None = None,
    pauses: Iterable[Any] = (),
) -> list[Miss]:
    """Every occurrence scheduled in (since, now] that did not succeed, plus every one that
    fell due (fire time + `grace_s` before `now`) and has no row at all.

    `runs` are the runs scheduled in the window (every job); with `marks` (every run in the
    window, slim), `runs` need only hold those that did not succeed. Running and retrying runs are
    not misses (yet); a pending row past its grace is ("due but not started").
    `known[job_id]`, when given, says when the job was registered (`Span`s): occurrences
    outside those spans are not expected (a job without an entry is expected throughout).
    `pruned[job_id]`, the job's pruning watermark: occurrences up to it without a row were
    pruned, not missed (`pruned_in` names them).
    A due occurrence a window deferred, or whose job a pause in `pauses` holds, is listed
    with its own state (DEFERRED, HELD_PAUSED), as is one waiting for a slot of its resource (WAITING).
    Runs of jobs missing from `specs` are reported under owner "".
    Sorted by owner, job, scheduled time.
    """
    runs = [r for r in runs if since < r.scheduled_at <= now]
    seen = runs if marks is None else [m for m in marks if since < m.scheduled_at <= now]
    by_id = {r.run_id: r for r in seen}
    all_nodes = set(nodes) | _nodes_from_runs(seen)
    spec_of = {s.id: s for s in specs}
    out: dict[str, Miss] = {}
    keyed = _scheduled_marks(seen)
    for spec in spec_of.values():
        schedule = (schedules or {}).get(spec.id) or _compile(spec)
        spans = (known or {}).get(spec.id) if known is not None else None
        start, end = _expected_window(spec, spans, since, now)
        mark = (pruned or {}).get(spec.id)
        if mark is not None:  # what retention deleted is not judged (pruned_in names it)
            start = min(max(start, mark.through), end)
        for occ in _unrecorded(spec, schedule, start, end, all_nodes, keyed, by_id):
            if occ.fire_at + timedelta(seconds=grace_s) < now and registered(spans, occ.fire_at):
                out[occ.run_id] = _miss(spec.id, spec.owner, occ, None, *_judge(occ, None, now, spec, spans))
    pauses = list(pauses)
    for r in runs:
        miss = _run_miss(r, spec_of.get(r.job_id), now, grace_s, pauses)
        if miss is not None:
            out[r.run_id] = miss
    return sorted(out.values(), key=lambda m: (m.owner, m.job_id, m.scheduled_at, m.job_key))


def pruned_in(pruned: Mapping[str, Any], since: datetime) -> list[Any]:
    """The watermarks that reach into a window starting at `since`: jobs whose occurrences
    after `since` may have been pruned (so `missed` could not judge them), by job id."""
    return sorted((m for m in pruned.values() if m.through > since), key=lambda m: m.job_id)


def _expected_window(
    spec: JobSpec, spans: Sequence[Span] | None, since: datetime, now: datetime
) -> tuple[datetime, datetime]:
    """The part of (since, now] in which the job's occurrences may be expected: from the
    first registration (less its jitter) to its removal, when it is removed for good."""
    if spans is None:
        return since, now
    if not spans:
        return now, now
    first = spans[0][0] - timedelta(seconds=spec.tolerance_s + 1)
    last_end = spans[-1][1]
    end = now if last_end is None else min(now, last_end)
    start = max(since, first)
    return (start, end) if start < end else (end, end)


def _scheduled_marks(runs: Iterable[Any]) -> dict[str, list[datetime]]:
    """Scheduled (not manual) run times per job key, ascending."""
    marks: dict[str, list[datetime]] = defaultdict(list)
    for r in runs:
        if r.trigger == "schedule" or not r.trigger.startswith("manual"):
            marks[r.job_key].append(r.scheduled_at)
    for times in marks.values():
        times.sort()
    return marks


def _unrecorded(
    spec: JobSpec,
    schedule: Any,
    start: datetime,
    now: datetime,
    nodes: set[str],
    marks: Mapping[str, list[datetime]],
    by_id: Mapping[str, Any],
) -> Iterator[Occurrence]:
    """Occurrences in (start, now] without a row, searching only the gaps between recorded
    runs that are wide enough to hide one (see `_gaps`)."""
    if schedule.kind == "reboot" or not spec.enabled:
        return
    for place in occurrence.placements(spec, nodes):
        for a, b in _gaps(marks.get(place.key, []), start, now, schedule):
            for at in schedule.fires(a, b):
                occ = place.at(at)
                if occ.run_id not in by_id:
                    yield occ


DST_MARGIN = timedelta(
    hours=3, seconds=1
)  # shifts of 3h or more are clock corrections (docs/reference.md, Time zones and daylight saving time)


def _gaps(times: list[datetime], start: datetime, now: datetime, schedule: Any) -> list[tuple[datetime, datetime]]:
    """The intervals (a, b] of the window in which an occurrence could be missing.

    Two occurrences are at least `min_gap_s` apart, less at most a DST shift in a zone
    with clock changes. So between two recorded runs closer than twice that, at the start
    of the window closer than once that to the first run, and at its end, nothing can be
    missing, and the schedule need not be evaluated there: with a full history this
    skips nearly every fire computation.
    """
    times = [t for t in times if start < t <= now]
    gap = schedule.min_gap_s()
    if not times or not gap:
        return [(start, now)]
    least = timedelta(seconds=gap) - (timedelta(0) if _steady(schedule) else DST_MARGIN)
    points = [start, *times, now]
    out = []
    for i, (a, b) in enumerate(zip(points, points[1:])):
        edge = i == 0 or i == len(points) - 2
        if b - a >= (least if edge else 2 * least):
            out.append((a, b))
    return out


def _steady(schedule: Any) -> bool:
    return schedule.kind == "every" or schedule.tz in ("UTC", "Etc/UTC", "GMT", "Etc/GMT")


def withdrawn(run: Any) -> bool:
    """An occurrence its job's definition took back before it fell due: cancelled without
    ever starting, at a time before its fire time (an edit or a reload changed the
    schedule, and the new one no longer has it). Nothing was missed: it was never due."""
    return bool(
        run.state == RunState.CANCELLED
        and run.started_at is None
        and run.finished_at is not None
        and run.finished_at < run.fire_at
    )


def _run_miss(r: Any, spec: JobSpec | None, now: datetime, grace_s: int, pauses: Sequence[Any] = ()) -> Miss | None:
    if r.state in (RunState.SUCCEEDED, RunState.RUNNING, RunState.RETRY_WAIT) or withdrawn(r):
        return None
    if r.state == RunState.PENDING and r.fire_at + timedelta(seconds=grace_s) >= now:
        return None
    occ = Occurrence(r.job_id, r.job_key, node_of_key(r.job_key), r.scheduled_at, r.fire_at, r.run_id)
    owner = spec.owner if spec else ""
    hold = hold_of(r, spec, pauses, now)
    if hold is not None:
        return _miss(r.job_id, owner, occ, r, verdict(hold), hold.describe(r.fire_at), hold)
    return _miss(r.job_id, owner, occ, r, r.state, describe_run(r, now, spec))


def _miss(
    job_id: str, owner: str, occ: Occurrence, run: Any, state: str, reason: str, hold: Hold | None = None
) -> Miss:
    return Miss(
        job_id, owner, occ.job_key, occ.node, occ.scheduled_at, occ.fire_at, occ.run_id, state, reason, run, hold
    )


def group_by_owner(misses: Iterable[Miss]) -> dict[str, list[Miss]]:
    """Misses keyed by owner, owners in order, each list in the order given."""
    groups: dict[str, list[Miss]] = defaultdict(list)
    for m in misses:
        groups[m.owner].append(m)
    return dict(sorted(groups.items()))


def success_streak(runs: Iterable[Any]) -> int:
    """How many terminal runs in a row, newest first, succeeded (active runs are skipped)."""
    streak = 0
    for r in sorted(runs, key=lambda r: r.scheduled_at, reverse=True):
        if r.state in ACTIVE_STATES:
            continue
        if r.state != RunState.SUCCEEDED:
            break
        streak += 1
    return streak


def last_success(runs: Iterable[Any]) -> Any | None:
    """The succeeded run that finished last, or None."""
    wins = [r for r in runs if r.state == RunState.SUCCEEDED]
    return max(wins, key=lambda r: r.finished_at or r.scheduled_at) if wins else None


def silence(
    spec: JobSpec, last_success_at: datetime | None, now: datetime, *, known_since: datetime | None = None
) -> Silence:
    """Time since the last success against `max_silence_s`. Without any success the age
    counts from `known_since` (when the job was first known), if given."""
    start = last_success_at or known_since
    age = (now - start).total_seconds() if start else None
    limit = spec.max_silence_s
    silent = bool(limit is not None and age is not None and age > silence_limit_s(spec))
    return Silence(last_success_at, age, limit, silent)


def silence_limit_s(spec: JobSpec) -> float:
    """How long the job may go without a success before it is silent: `max_silence_s`
    plus its `tolerance_s` (a run started late inside its tolerance is on time, so the gap
    it leaves is no silence). The notifier's dead man's switch and `status` both use it."""
    return float((spec.max_silence_s or 0) + spec.tolerance_s)


def latest_successes(runs: Iterable[Any]) -> dict[str, datetime]:
    """job_id -> when its latest success ended (finish time, else scheduled_at)."""
    out: dict[str, datetime] = {}
    for r in runs:
        if r.state == RunState.SUCCEEDED:
            t = r.finished_at or r.scheduled_at
            out[r.job_id] = max(t, out.get(r.job_id, t))
    return out


def watched(job: Any) -> bool:
    """Whether the dead man's switch applies to a registered job now: enabled, not
    paused (a pause is deliberate), with a `max_silence_s` (@reboot jobs have none)."""
    return bool(job.spec.enabled and not job.paused and job.spec.max_silence_s is not None)


def silence_suspects(jobs: Iterable[Any], recent: Iterable[Any], now: datetime) -> list[Any]:
    """The watched jobs that may be silent at `now`, judged from `recent` runs or marks
    (read by `job_id`, `state`, `scheduled_at`): all but those with a success scheduled
    within their `max_silence_s`. A run never finishes before its scheduled time, so such a
    job is surely not silent; the others need their true last success (`silent_jobs`)."""
    newest: dict[str, datetime] = {}
    for r in recent:
        if r.state == RunState.SUCCEEDED:
            seen = newest.get(r.job_id)
            if seen is None or r.scheduled_at > seen:
                newest[r.job_id] = r.scheduled_at
    out = []
    for j in jobs:
        seen = newest.get(j.job_id)
        if watched(j) and (seen is None or (now - seen).total_seconds() > j.spec.max_silence_s):
            out.append(j)
    return out


def known_since(spans: Sequence[Span] | None) -> datetime | None:
    """When the job's current registration began (the start of its open span, else of its
    last one): the silence clock of a job that never succeeded starts there, not at its
    last definition change. None: the store has no record of it."""
    if not spans:
        return None
    open_spans = [a for a, b in spans if b is None]
    return open_spans[-1] if open_spans else spans[-1][0]


def silent_jobs(
    jobs: Iterable[Any],
    last_success_at: Mapping[str, datetime],
    now: datetime,
    known: Mapping[str, Sequence[Span]] | None = None,
) -> list[SilentJob]:
    """The jobs that are silent at `now`, in job id order. `jobs` are registered jobs read
    by attribute (`job_id`, `spec`, `paused`, `updated_at`); `last_success_at` maps a job id
    to its latest success, and a job missing from it never succeeded: its silence counts
    from when it was registered (`known`: the store's known spans by job id; `known_since`),
    else from its last definition change (`updated_at`)."""
    out = []
    known = known or {}
    for j in sorted(jobs, key=lambda j: j.job_id):
        if not watched(j):
            continue
        since = known_since(known.get(j.job_id)) or j.updated_at
        q = silence(j.spec, last_success_at.get(j.job_id), now, known_since=since)
        if q.silent and q.age_s is not None:  # silent: counted from a success or from known_since
            basis = q.last_success or since
            out.append(
                SilentJob(
                    j.job_id,
                    j.spec.owner,
                    q.last_success,
                    q.age_s,
                    j.spec.max_silence_s,
                    basis + timedelta(seconds=silence_limit_s(j.spec)),
                )
            )
    return out


@dataclass(frozen=True)
class RunHeader:
    """What `logs` says before a run's output: which run, which attempt of how many, where,
    how it ended (exit code or signal), how long it took, and what killed it, if anything
    did (`killed_by`: "timeout", "replace" or "operator")."""

    run_id: str
    job_id: str
    scheduled_at: datetime
    attempt: int
    attempts_max: int
    node: str | None
    state: str
    exit_code: int | None
    signal: int | None
    started_at: datetime | None
    finished_at: datetime | None
    killed_by: str | None
    timeout_s: int | None

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


def run_header(run: Any, spec: JobSpec | None, attempt: int | None = None) -> RunHeader:
    """The header of `run` (attempt `attempt`, default its latest); `spec` its job, when
    known, for the number of attempts allowed, the timeout and the overlap policy."""
    killed = None
    if run.state == "timed_out":
        killed = "timeout"
    elif run.state == "cancelled" and run.started_at is not None:
        killed = "replace" if spec is not None and spec.overlap == "replace" else "operator"
    most = spec.retry.attempts if spec is not None else max(run.attempts, 1)
    return RunHeader(
        run.run_id,
        run.job_id,
        run.scheduled_at,
        attempt if attempt is not None else run.attempts,
        max(most, run.attempts),
        run.node,
        run.state,
        run.exit_code,
        run.signal,
        run.started_at,
        run.finished_at,
        killed,
        spec.timeout_s if spec is not None else None,
    )
