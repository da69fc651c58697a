"""Backfill: which past occurrences of a job to run again, and when the next one may start.

The rule, in full:

- the range is every occurrence nominally in [from, to], both ends included, whose fire
  time has passed (`now` is an argument); oldest first; each keeps its own run id
  (chronod.core.occurrence), so a `keyed` job dedupes downstream;
- `--only missed` picks what `chronoctl missed` reports for the range (the same audit:
  chronod.core.history.missed): occurrences that did not succeed, and those that fell due
  with no record at all; an occurrence retention pruned is excluded (nobody knows any
  more whether it ran), and so is one that fell due while the job was not registered;
- `--only failed` picks the runs that ended `failed`, `timed_out` or `lost`;
- `--only all` picks every occurrence of the range, those that succeeded included;
- an occurrence whose run is still pending, running or waiting to retry is never picked:
  it is in flight already;
- an `unsafe` job (at most once) is refused unless the operator allows it and says why.

While a backfill runs, `may_start` says whether its next occurrence may start: never
while the job is held (paused, itself or by its tag or resource, or inside a maintenance
window); under `overlap: allow` while fewer than `max_concurrency` of the
backfill's runs are in flight; under `forbid` and `replace` only when no run of the job
is going at all (a backfill waits its turn: it never skips or cancels a run).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping, Sequence

from chronod.core import history, retention
from chronod.core.model import ACTIVE_STATES, JobSpec, RunState, Trigger
from chronod.core.occurrence import Occurrence

ONLY = ("missed", RunState.FAILED, "all")
FAILED_STATES = (RunState.FAILED, RunState.TIMED_OUT, RunState.LOST)
TRIGGER = Trigger.BACKFILL
MAX_OCCURRENCES = 10000  # one backfill runs at most this many occurrences
MAX_RANGE = 100_000  # and looks at most at this many occurrences of its range


@dataclass(frozen=True)
class Pick:
    """One occurrence a backfill runs: its identity and what its history said before."""

    occurrence: Occurrence
    was: str  # the run's state before, or history.NO_RECORD


@dataclass(frozen=True)
class Left:
    """One occurrence of the range a backfill does not run, and why in words."""

    occurrence: Occurrence
    state: str
    reason: str


@dataclass(frozen=True)
class Choice:
    """What a backfill runs (oldest first) and what it leaves out of its range."""

    picks: tuple[Pick, ...]
    left: tuple[Left, ...]


class Refused(ValueError):
    """A backfill that must not be stored; the message says why and what to do."""


def refusal(spec: JobSpec, *, allow_unsafe: bool, reason: str | None) -> str | None:
    """Why a backfill of `spec` is refused (None: it is not)."""
    if spec.idempotency_class != "unsafe":
        return None
    if not allow_unsafe:
        return (
            f"job {spec.id!r} is unsafe (it must run at most once per occurrence): a backfill may "
            "run an occurrence that already had an effect; pass --allow-unsafe --reason TEXT "
            "once its owner agrees"
        )
    if not (reason or "").strip():
        return f"--allow-unsafe needs --reason TEXT for job {spec.id!r}: say why its owner agrees"
    return None


def choose(
    spec: JobSpec,
    schedule: Any,
    runs: Iterable[Any],
    *,
    start: datetime,
    end: datetime,
    only: str,
    now: datetime,
    nodes: Iterable[str] = (),
    spans: Sequence[history.Span] | None = None,
    pruned: Any | None = None,
    grace_s: int = history.GRACE_S,
) -> Choice:
    """The occurrences of `spec` nominally in [start, end] a backfill runs, oldest first.

    `runs` are the job's runs scheduled in the range (attributes as in
    chronod.core.history); `spans` when the job was registered (None: always); `pruned`
    the job's retention watermark (store.api.Pruned or None)."""
    if only not in ONLY:
        raise ValueError(f"--only must be one of {', '.join(ONLY)}, not {only!r}")
    if end < start:
        raise Refused(f"--to ({_z(end)}) is before --from ({_z(start)})")
    _refuse_a_huge_range(spec, schedule, start, min(end, now))
    runs = [r for r in runs if r.job_id == spec.id and start <= r.scheduled_at <= end]
    by_id = {r.run_id: r for r in runs}
    occs = history.occurrences(spec, schedule, start - timedelta(seconds=1), min(end, now), nodes)
    audit = _misses(spec, schedule, runs, start, end, now, nodes, spans, pruned, grace_s) if only == "missed" else {}
    picks: list[Pick] = []
    left: list[Left] = []
    for occ in occs:
        if occ.fire_at > now:
            left.append(Left(occ, history.NOT_DUE, f"not due yet: it fires at {_z(occ.fire_at)}"))
            continue
        run = by_id.get(occ.run_id)
        verdict = _verdict(occ, run, only, audit, spans, pruned)
        if isinstance(verdict, Left):
            left.append(verdict)
        else:
            picks.append(Pick(occ, run.state if run is not None else history.NO_RECORD))
    if len(picks) > MAX_OCCURRENCES:
        raise Refused(
            f"the range holds {len(picks)} occurrences of {spec.id} to run, more than {MAX_OCCURRENCES}: "
            "backfill a shorter range at a time"
        )
    return Choice(tuple(picks), tuple(left))


def _refuse_a_huge_range(spec: JobSpec, schedule: Any, start: datetime, end: datetime) -> None:
    """Refuse a range of more than MAX_RANGE occurrences before walking it: ten years of a
    job that fires every second would hold millions of them in memory."""
    if schedule.kind == "reboot" or end < start:
        return
    fires = schedule.fires(start - timedelta(seconds=1), end, limit=MAX_RANGE + 1)
    if len(fires) > MAX_RANGE:
        raise Refused(
            f"the range from {_z(start)} holds more than {MAX_RANGE:,} occurrences of {spec.id} "
            f"(schedule {spec.schedule}): backfill a shorter range at a time, "
            f"e.g. --to {_z(fires[MAX_RANGE - 1])}"
        )


def _verdict(
    occ: Occurrence,
    run: Any | None,
    only: str,
    audit: Mapping[str, Any],
    spans: Sequence[history.Span] | None,
    pruned: Any | None,
) -> Left | None:
    """None when `occ` is picked, else why it is left out."""
    if run is not None and run.state in ACTIVE_STATES:
        return Left(occ, run.state, f"in flight ({run.state}): the daemon runs it already")
    if run is None and pruned is not None and retention.was_pruned(occ.scheduled_at, pruned):
        why = retention.pruned_reason(pruned.kept_s)
        if only != "all":
            return Left(occ, retention.PRUNED, f"{why}: whether it ran is not known any more; --only all runs it")
        return None
    if only == "all":
        return None
    if only == RunState.FAILED:
        if run is not None and run.state in FAILED_STATES:
            return None
        state = run.state if run else history.NO_RECORD
        return Left(occ, state, f"did not fail ({state})")
    if occ.run_id in audit:
        return None
    if run is None and not history.registered(spans, occ.fire_at):
        return Left(occ, history.NOT_REGISTERED, history.describe_unregistered(spans, occ.fire_at))
    state = run.state if run else history.NO_RECORD
    return Left(occ, state, f"not missed ({state})")


def _misses(
    spec: JobSpec,
    schedule: Any,
    runs: list[Any],
    start: datetime,
    end: datetime,
    now: datetime,
    nodes: Iterable[str],
    spans: Sequence[history.Span] | None,
    pruned: Any | None,
    grace_s: int,
) -> dict[str, Any]:
    """run_id -> Miss: what `chronoctl missed` says about the range."""
    misses = history.missed(
        [spec],
        runs,
        since=start - timedelta(seconds=1),
        now=now,
        nodes=nodes,
        known=None if spans is None else {spec.id: spans},
        schedules={spec.id: schedule},
        grace_s=grace_s,
        pruned=None if pruned is None else {spec.id: pruned},
    )
    return {m.run_id: m for m in misses if m.scheduled_at <= end}


def may_start(spec: JobSpec, *, paused: bool, in_flight: int, job_running: int, max_concurrency: int) -> bool:
    """Whether a backfill's next occurrence may start now (see the module docstring)."""
    if paused:
        return False
    if spec.overlap == "allow":
        return in_flight < max(max_concurrency, 1)
    return job_running == 0 and in_flight == 0


def progress(states: Mapping[str, str], run_ids: Sequence[str], started: int) -> dict[str, int]:
    """Counts of a backfill's occurrences: total, started, in flight, done, succeeded, and
    not succeeded (`states`: run_id -> state of those that have a row)."""
    begun = [states.get(r, RunState.PENDING) for r in run_ids[:started]]
    done = [s for s in begun if s not in ACTIVE_STATES]
    ok = sum(1 for s in done if s == RunState.SUCCEEDED)
    return {
        "total": len(run_ids),
        "started": started,
        "in_flight": len(begun) - len(done),
        "done": len(done),
        RunState.SUCCEEDED: ok,
        "not_succeeded": len(done) - ok,
    }


def _z(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
