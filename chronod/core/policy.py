"""Scheduling decisions as pure functions: what is due, catch-up, overlap, retry backoff.

Nothing here reads a clock or touches a process or a database; the daemon loop asks and
then acts. DESIGN §6 is the contract.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from chronod.core.model import JobSpec

# An occurrence picked up this long after its fire time still counts as on time: a
# daemon restart or a slow burst must not turn a fire into a "missed" one.
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


def catchup(spec: JobSpec, due: list[Due], now: datetime) -> Decision:
    """Apply the job's catch-up policy to its due occurrences (ascending fire_at).

    The newest occurrence that fell due within ON_TIME_GRACE_S is on time and runs under
    every policy. Everything older is backlog: `latest` runs the newest backlog entry
    inside `catchup_window_s` (only when nothing is on time), `all` runs every one inside
    the window, `none` runs none; the rest are recorded `skipped_outage`.
    """
    if not due:
        return Decision((), ())
    window_start = now - timedelta(seconds=spec.catchup_window_s)
    newest = due[-1]
    on_time = (now - newest.fire_at).total_seconds() <= ON_TIME_GRACE_S
    backlog = due[:-1] if on_time else due
    runs: list[Due] = []
    skips: list[tuple[Due, str]] = []
    in_window = [d for d in backlog if d.fire_at >= window_start]
    for d in backlog:
        if d.fire_at < window_start:
            skips.append((d, f"fell due while chronod could not run it; older than catchup_window_s={spec.catchup_window_s}"))
    if spec.catchup == "all":
        runs.extend(in_window)
    elif spec.catchup == "latest" and in_window and not on_time:
        runs.append(in_window[-1])
        skips.extend((d, "fell due while chronod could not run it; catchup: latest ran a newer occurrence") for d in in_window[:-1])
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


def overlap_action(spec: JobSpec, running_count: int) -> str:
    """'start', 'skip' (record skipped_overlap) or 'replace' (cancel the running ones first)."""
    if running_count == 0 or spec.overlap == "allow":
        return "start"
    if spec.overlap == "replace":
        return "replace"
    return "skip"


def may_retry(spec: JobSpec, attempt: int, state: str) -> bool:
    """Whether a finished attempt gets another one (never for unsafe jobs or cancellations)."""
    if spec.idempotency_class == "unsafe" or state not in ("failed", "timed_out"):
        return False
    return attempt < spec.retry.attempts


def retry_delay_s(spec: JobSpec, attempt: int, rng: random.Random) -> float:
    """min(backoff × 2^(n-1), max_backoff) × uniform(0.8, 1.2) for the n-th attempt that failed."""
    base = min(spec.retry.backoff_s * 2 ** (attempt - 1), spec.retry.max_backoff_s)
    return base * rng.uniform(0.8, 1.2)


def on_unknown_outcome(spec: JobSpec) -> str:
    """A run whose process vanished with no result: 'lost' for unsafe, 'redispatch' otherwise."""
    return "lost" if spec.idempotency_class == "unsafe" else "redispatch"
