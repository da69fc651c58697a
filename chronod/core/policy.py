"""Scheduling decisions as pure functions: catch-up, overlap, resource admission, retries,
and when the loop must wake.

Nothing here reads a clock or touches a process or a database; the daemon loop asks and
then acts. The rules, one function each:

- `catchup`: which occurrences that fell due together run, and which are `skipped_outage`;
- `catchup_turn`: which of a job's queued catch-up occurrences starts now (scheduled
  order, one at a time unless `overlap: allow`), and which waited past the window;
- `newest_waiting`: which of a job's scheduled occurrences waiting in its line behind a
  backfill or manual run a newer one replaces (`latest`, `none`);
- `overlap`: what a new run does while others of its job run or queue (start, queue,
  skip, replace);
- `resource_admission`: which runs waiting for a resource get its free slots (oldest
  fire time first), and which waited past their window (`skipped_resource`);
- `start_admission`: the node's start limit (starts per second): which due runs start
  now (tightest tolerance first), which wait for the next second, and which the
  catch-up rule skips because they waited too long or a newer occurrence replaced them;
  the starts there are are shared fairly between owners, then jobs (`chronod.core.shares`);
- `next_wake`: the earliest deadline the loop must wake for (fires, retries, heartbeat,
  watchdog, reconcile, outage retry).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Hashable, Iterable, Mapping, Sequence

from chronod.core import shares
from chronod.core.model import JobSpec, RunState

# An occurrence picked up this long after its fire time still counts as on time: a slow
# burst or a short stall of a running chronod must not turn a fire into a "missed" one.
# One that fell due before chronod started is a restart's catch-up, however recent.
ON_TIME_GRACE_S = 30.0

# Upper bound of occurrences recorded one by one after a long outage; beyond it the
# oldest are folded into one record (a week of an every-second job is 600,000 rows).
MAX_BACKLOG_RECORDS = 20_000


@dataclass(frozen=True)
class Due:
    """One occurrence that fell due: nominal time and fire time (jittered)."""

    scheduled_at: datetime
    fire_at: datetime


@dataclass(frozen=True)
class Decision:
    """What to do with each due occurrence of one job, oldest first."""

    run: tuple[Due, ...]  # start these (in order)
    skip: tuple[tuple[Due, str], ...]  # record skipped_outage with this reason


def catchup(spec: JobSpec, due: list[Due], now: datetime, up_since: datetime | None = None) -> Decision:
    """Apply the job's catch-up policy to its due occurrences (ascending fire_at).

    The newest occurrence that fell due within ON_TIME_GRACE_S is on time and runs under
    every policy, unless it fell due before `up_since` (when this chronod started: it fell
    due while chronod was down, however shortly). Everything older is backlog: `latest`
    runs the newest backlog entry inside `catchup_window_s` (only when nothing is on time),
    `all` runs every one inside the window, `none` runs none; the rest are recorded
    `skipped_outage`.
    """
    if not due:
        return Decision((), ())
    window_start = now - timedelta(seconds=spec.catchup_window_s)
    newest = due[-1]
    on_time = (now - newest.fire_at).total_seconds() <= ON_TIME_GRACE_S and (
        up_since is None or newest.fire_at >= up_since
    )
    backlog = due[:-1] if on_time else due
    runs: list[Due] = []
    skips: list[tuple[Due, str]] = []
    in_window = [d for d in backlog if d.fire_at >= window_start]
    for d in backlog:
        if d.fire_at < window_start:
            skips.append(
                (d, f"fell due while chronod could not run it; older than catchup_window_s={spec.catchup_window_s}")
            )
    if spec.catchup == "all":
        runs.extend(in_window)
    elif spec.catchup == "latest" and in_window and not on_time:
        runs.append(in_window[-1])
        skips.extend(
            (d, "fell due while chronod could not run it; catchup: latest ran a newer occurrence")
            for d in in_window[:-1]
        )
    else:
        reason = (
            "fell due while chronod could not run it; catchup: none"
            if spec.catchup == "none"
            else "fell due while chronod could not run it; catchup: latest ran a newer occurrence"
        )
        skips.extend((d, reason) for d in in_window)
    if on_time:
        runs.append(newest)
    skips.sort(key=lambda s: s[0].fire_at)
    return Decision(tuple(runs), tuple(skips))


@dataclass(frozen=True)
class Waiting:
    """A run waiting for its turn (catch-up backlog) or for a slot (resource): its id, its
    fire time, and until when it may still start (fire time + `catchup_window_s`)."""

    run_id: str
    fire_at: datetime
    deadline: datetime


@dataclass(frozen=True)
class Turn:
    """Which waiting runs start now (in this order) and which waited too long."""

    start: tuple[Waiting, ...] = ()
    expire: tuple[Waiting, ...] = ()


def waiting(run_id: str, fire_at: datetime, spec: JobSpec, since: datetime | None = None) -> Waiting:
    """A run of `spec` firing at `fire_at`, waiting from now on: its place in line is its
    fire time, and it waits `catchup_window_s` from then (or from `since`: a retry, from
    when it fell due)."""
    return Waiting(run_id, fire_at, (since or fire_at) + timedelta(seconds=spec.catchup_window_s))


def _expired(queue: Iterable[Waiting], now: datetime) -> tuple[list[Waiting], list[Waiting]]:
    live: list[Waiting] = []
    gone: list[Waiting] = []
    for w in sorted(queue, key=lambda w: (w.fire_at, w.run_id)):
        (gone if now > w.deadline else live).append(w)
    return live, gone


def catchup_turn(spec: JobSpec, queue: Sequence[Waiting], running: int, now: datetime) -> Turn:
    """The catch-up rule for a backlog that drains: the job's queued occurrences start in
    scheduled order; under `overlap: forbid` or `replace` one after another (the oldest,
    only when none of the job's runs is going), under `allow` all at once. An occurrence
    that waited past its `catchup_window_s` never starts late: it expires (skipped_outage)."""
    live, gone = _expired(queue, now)
    if spec.overlap == "allow":
        return Turn(tuple(live), tuple(gone))
    start = tuple(live[:1]) if running == 0 else ()
    return Turn(start, tuple(gone))


def newest_waiting(spec: JobSpec, line: Sequence[Waiting]) -> tuple[tuple[Waiting, ...], tuple[Waiting, ...]]:
    """The catch-up rule for a job's scheduled occurrences that wait their turn in its line
    (behind a backfill or manual run): which stay in line and which a newer one replaces.
    Under `all` every one waits its turn, in scheduled order. Under `latest` and `none`
    only the newest waits: it replaces the older ones, as a newer occurrence replaces an
    older one waiting for the start limit (`start_admission`) and as `latest` runs only the
    newest of the occurrences an outage kept from running (`catchup`). Without it, a job
    whose runs outlast its period never empties the line that formed behind one long
    backfill run: every occurrence would start late, one after another, for a whole
    `catchup_window_s`."""
    if spec.catchup == "all" or len(line) < 2:
        return tuple(line), ()
    ordered = sorted(line, key=lambda w: (w.fire_at, w.run_id))
    return tuple(ordered[-1:]), tuple(ordered[:-1])


class Overlap(StrEnum):
    """What the overlap rule tells a run that falls due (`overlap`)."""

    START = "start"
    QUEUE = "queue"  # a catch-up backlog drains: wait behind it, in scheduled order
    SKIP = "skip"  # record skipped_overlap: `forbid` and a run is going
    REPLACE = "replace"  # cancel the running ones first, then start


def overlap(spec: JobSpec, running: int, queued: int = 0, *, forced: bool = False) -> Overlap:
    """The overlap rule, online and offline alike: what a run that falls due does while
    `running` runs of its job are going and `queued` catch-up occurrences of it wait their
    turn. A forced manual run and a retry always start."""
    if forced or spec.overlap == "allow":
        return Overlap.START
    if queued:
        return Overlap.QUEUE
    if running == 0:
        return Overlap.START
    return Overlap.REPLACE if spec.overlap == "replace" else Overlap.SKIP


def resource_admission(limit: int, used: int, queue: Sequence[Waiting], now: datetime) -> Turn:
    """The resource rule: at most `limit` runs of a resource go at once. Of the runs waiting
    for it, the oldest fire times take the `limit - used` free slots; one still waiting past
    its deadline (fire time + `catchup_window_s`) gets none: it ends skipped_resource. The
    others keep waiting (pending), in line."""
    live, gone = _expired(queue, now)
    free = max(limit - used, 0)
    return Turn(tuple(live[:free]), tuple(gone))


@dataclass(frozen=True)
class Budget:
    """A node's start budget (a token bucket): `tokens` starts allowed at monotonic time `at`."""

    tokens: float
    at: float
    # fair shares' turns (`shares.fair_split`): when each account and job last started.
    # Carried from budget to budget by reference, merged by the budget's owner (StartLimit).
    turns: dict[Hashable, int] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Candidate:
    """A due run asking to start: its id, its job's spec, its occurrence, and whether the
    catch-up rule may skip it (a retry or a manual run only waits)."""

    run_id: str
    spec: JobSpec
    scheduled_at: datetime
    fire_at: datetime
    skippable: bool = True


@dataclass(frozen=True)
class Admission:
    """What the start limit lets through: `start` now (in this order), `wait` for the next
    token (at `retry_at`, monotonic), `skip` (run, reason: record skipped_outage)."""

    start: tuple[Candidate, ...]
    wait: tuple[Candidate, ...]
    skip: tuple[tuple[Candidate, str], ...]
    budget: Budget
    retry_at: float | None
    served: Mapping[Hashable, int] = field(default_factory=dict)  # shares' turns to merge in


def start_deadline(c: Candidate) -> datetime:
    """The latest start the job asked for: its scheduled time plus `tolerance_s` (never
    before its fire time). A job with no tolerance goes first when starts are scarce."""
    return max(c.fire_at, c.scheduled_at + timedelta(seconds=c.spec.tolerance_s))


def refill(budget: Budget, rate: float, mono: float) -> Budget:
    """The budget at `mono`: `rate` tokens a second, at most one second's worth kept."""
    tokens = min(float(rate), budget.tokens + max(mono - budget.at, 0.0) * rate)
    return replace(budget, tokens=tokens, at=mono)


def start_admission(
    rate: float | None,
    budget: Budget,
    line: Sequence[Candidate],
    now: datetime,
    mono: float,
) -> Admission:
    """The start limit: at most `rate` starts a second on this node (a burst of one
    second's worth), so that past its ceiling a node starts what it can instead of
    stalling on everything at once.

    The line is served by start deadline (`start_deadline`: tightest tolerance first),
    then fire time. A run that cannot start yet waits, and the catch-up rule decides
    how long: while it is on time (its deadline plus ON_TIME_GRACE_S) it waits under every
    policy; a newer occurrence of the same job in the line replaces it under `latest`
    and `none`; a late one waits under `latest` (the job's newest) and `all`, is skipped
    under `none`, and none waits past `catchup_window_s`. `rate` None: no limit."""
    skips: list[tuple[Candidate, str]] = []
    newest: dict[str, datetime] = {}
    for c in line:
        if c.skippable:
            newest[c.spec.id] = max(newest.get(c.spec.id, c.scheduled_at), c.scheduled_at)
    live: list[Candidate] = []
    for c in line:
        why = _admission_skip(c, newest[c.spec.id], now, rate) if c.skippable else None
        if why:
            skips.append((c, why))
        else:
            live.append(c)
    live.sort(key=lambda c: (start_deadline(c), c.fire_at, c.run_id))
    owner, job = (lambda c: shares.principal(c.spec.user)), (lambda c: c.spec.id)
    if rate is None:
        # every run starts, in fair order: a wake-up whose time slice runs out part-way
        # has started each owner's first runs before any owner's hundredth
        return Admission(tuple(shares.fair_order(live, owner, job, budget.turns)), (), tuple(skips), budget, None)
    budget = refill(budget, rate, mono)
    n = min(int(budget.tokens), len(live))
    budget = replace(budget, tokens=budget.tokens - n, at=mono)
    # Starts are scarce: shared round-robin between the accounts the jobs run as, then
    # between each account's jobs (`shares.fair_order`), so no owner's flood starves another.
    # The budget's `turns` (when each account and job last started) carry the turn across wake-ups.
    go, rest, turns = shares.fair_split(live, n, owner, job, budget.turns)
    wait = tuple(rest)
    # wake again when a tenth of a second's worth (or the whole line) may start: one
    # wake-up per token would sort the line a thousand times a second
    want = min(len(wait), max(1.0, rate / 10))
    retry_at = mono + max(want - budget.tokens, 0.0) / rate if wait else None
    return Admission(tuple(go), wait, tuple(skips), budget, retry_at, turns)


def _admission_skip(c: Candidate, newest: datetime, now: datetime, rate: float | None) -> str | None:
    """Why a waiting run is skipped (None: it keeps its place in the line)."""
    limit = f"this node was at its start limit ({rate:g} starts/s)" if rate else "this node was busy starting runs"
    late_s = (now - c.fire_at).total_seconds()
    if late_s > c.spec.catchup_window_s:
        return f"{limit}; waited past catchup_window_s={c.spec.catchup_window_s}"
    if c.scheduled_at < newest and c.spec.catchup != "all":
        return f"{limit}; a newer occurrence fell due and replaces it (catchup: {c.spec.catchup})"
    on_time = now <= start_deadline(c) + timedelta(seconds=ON_TIME_GRACE_S)
    if not on_time and c.spec.catchup == "none":
        return f"{limit}; not started within {ON_TIME_GRACE_S:g} s of its fire time (catchup: none)"
    return None


def next_wake(deadlines: Iterable[datetime | None]) -> datetime | None:
    """The earliest of the deadlines the loop must wake for (None: sleep until signalled).
    The loop passes every one it has: the next fire or retry, the lease heartbeat, the
    watchdog ping, the reconciler, an outage retry, a busy wake-up's leftover work."""
    present = [d for d in deadlines if d is not None]
    return min(present) if present else None


def watchdog_ping_at(interval_s: float | None, last_ping: float | None, mono: float) -> float | None:
    """When (monotonic) the systemd watchdog must be pinged next: right away if it never
    was, then every `interval_s` (half of WATCHDOG_USEC); None without a watchdog."""
    if not interval_s:
        return None
    return mono if last_ping is None else last_ping + interval_s


def may_retry(spec: JobSpec, attempt: int, state: str) -> bool:
    """Whether a finished attempt gets another one (never for unsafe jobs or cancellations)."""
    if spec.idempotency_class == "unsafe" or state not in (RunState.FAILED, RunState.TIMED_OUT):
        return False
    return attempt < spec.retry.attempts


# Why a removed job's waiting occurrence is cancelled and its retry never starts.
REMOVED_FROM_REGISTRY = "job removed from the registry"


def retry_given_up(
    last_attempt_state: str | None, error: str | None, retry: int, of: int | None, why: str
) -> tuple[RunState, str]:
    """The record of a run whose next retry will never start (a pause set after it fell
    due, no slot of its resource, its job removed): its last attempt's outcome (failed,
    timed_out or lost; failed when unknown), and that attempt's error followed by which
    retry did not start and why (`of`: the retries the spec allows, when known)."""
    state = (
        RunState(last_attempt_state)
        if last_attempt_state in (RunState.FAILED, RunState.TIMED_OUT, RunState.LOST)
        else RunState.FAILED
    )
    what = f"retry {retry}{f' of {of}' if of is not None else ''} not started: {why}"
    return state, f"{error}; {what}" if error else what


def retry_delay_s(spec: JobSpec, attempt: int, rng: random.Random) -> float:
    """min(backoff × 2^(n-1), max_backoff) × uniform(0.8, 1.2) for the n-th attempt that failed."""
    base = min(spec.retry.backoff_s * 2 ** (attempt - 1), spec.retry.max_backoff_s)
    return float(base * rng.uniform(0.8, 1.2))


class Unknown(StrEnum):
    """What becomes of a run whose outcome cannot be known (`on_unknown_outcome`)."""

    LOST = "lost"
    REDISPATCH = "redispatch"


def on_unknown_outcome(spec: JobSpec) -> Unknown:
    """A run whose process vanished with no result: lost for unsafe, redispatched otherwise."""
    return Unknown.LOST if spec.idempotency_class == "unsafe" else Unknown.REDISPATCH
