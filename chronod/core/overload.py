"""A node past its ceiling: what it sheds so that what it starts stays on time (pure).

A node of a fleet that leaves a run waiting to start OVERLOAD_AFTER_S past its fire time
is overloaded: more falls due than it starts. Waiting longer starts nothing more; it only makes every run
late and keeps every node busy following occurrences nobody will start soon. So an
overloaded node estimates its own start rate (runs started per second spent starting
them, `start_rate`), and of its line, in the order it would start them, records skipped_outage
each run that would start more than OVERLOAD_LAG_S after its fire time at that rate
(`shed`): the oldest go, what starts keeps its lag under the bound, and the start rate is
the node's best. Only what the catch-up rule may skip is shed: a scheduled occurrence's
first attempt of a job whose catch-up is not `all` (a retry, a manual run and a backlog
of `all` wait their turn, as they do under the start limit). The line's order is the fair
order of the start limit (`shares.fair_order`): a job with many runs in the line has its
second one placed after every other job's first, so it is shed first.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Iterable, Sequence

from chronod.core.policy import Candidate

OVERLOAD_LAG_S = 1.0  # the fire lag an overloaded node keeps what it starts under
# a run left waiting this long past its fire time: overloaded. No longer than the bound it
# keeps: a node that waited for 2 s started what it kept up to 2 s late whenever it was
# only now and then past its ceiling (500 owed/s, p99 1.9 s)
OVERLOAD_AFTER_S = OVERLOAD_LAG_S
OVERLOAD_HOLD_S = 5.0  # an overloaded node stays so this long after it last shed or was late
RATE_WINDOW_S = 5.0  # the start rate is measured over at most this long


def overloaded(late_at: float | None, mono: float) -> bool:
    """Whether the node is past its ceiling at `mono`: within OVERLOAD_HOLD_S of when it
    last had a run waiting OVERLOAD_AFTER_S past its fire time (`late`) or shed one (a
    node that shed its line has no late run for a moment, and is no less overloaded)."""
    return late_at is not None and mono - late_at < OVERLOAD_HOLD_S


def late(waiting: Iterable[Candidate], now: datetime) -> bool:
    """Whether a run the node left waiting to start is OVERLOAD_AFTER_S past its fire time
    and could be shed: more falls due than the node starts (a burst drains sooner)."""
    return any(sheddable(c) and (now - c.fire_at).total_seconds() >= OVERLOAD_AFTER_S for c in waiting)


def start_rate(starts: Iterable[tuple[float, int, float]], mono: float) -> float:
    """The runs this node starts in a second of starting them: `starts` are (monotonic
    time, runs started, seconds spent claiming and starting them), those of the last
    RATE_WINDOW_S counted. It is the time spent starting, not the time elapsed: a node
    that shed its line and waits for the next runs to fall due starts fewer a second, and
    measured by the clock it would shed more and more of what it could start. Infinite
    when nothing took any time (the simulated clock): only the lag already run up, and a
    start limit, then shed."""
    n = busy = 0.0
    for at, k, spent in starts:
        if at >= mono - RATE_WINDOW_S:
            n, busy = n + k, busy + spent
    return n / busy if busy > 0 else float("inf")


def started_per_s(starts: Iterable[tuple[float, int, float]], mono: float) -> float:
    """The runs this node started a second, by the clock, over the last RATE_WINDOW_S
    (what its records say it managed)."""
    return sum(k for at, k, _ in starts if at >= mono - RATE_WINDOW_S) / RATE_WINDOW_S


def reason(node: str, started: float, bound_s: float = OVERLOAD_LAG_S) -> str:
    """What a shed run's record says: the node, the starts it made, the bound it kept."""
    return (
        f"node {node} was overloaded: it started {started:.0f} runs/s, fewer than fell due; "
        f"shed to keep the fire lag of what it starts under {bound_s:g} s"
    )


def shed_record(state: str, error: str | None) -> bool:
    """Whether a run's record is one an overloaded node shed (`reason`)."""
    return state == "skipped_outage" and (error or "").startswith("node ") and " was overloaded: " in (error or "")


def sheddable(c: Candidate) -> bool:
    """A run the overload may record skipped: what the catch-up rule may skip, under a
    policy that does not promise every occurrence (`all`)."""
    return c.skippable and c.spec.catchup != "all"


def shed(
    line: Sequence[Candidate], rate: float, now: datetime, why: str, bound_s: float = OVERLOAD_LAG_S
) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
    """Of `line` (in the order it would start), the runs kept and the runs shed with the
    reason `why`. At `rate` starts a second from `now`, the k-th run kept starts at
    now + k / rate; a sheddable run that would start more than `bound_s` after its fire
    time is shed, and the ones behind it move up."""
    keep: list[Candidate] = []
    out: list[tuple[Candidate, str]] = []
    per_start = 1 / rate  # 0 at an infinite rate
    for c in line:
        if sheddable(c):
            at = now + timedelta(seconds=len(keep) * per_start)
            if (at - c.fire_at).total_seconds() > bound_s:
                out.append((c, why))
                continue
        keep.append(c)
    return keep, out
