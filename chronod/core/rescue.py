"""Another node's occurrences: when a node of a fleet looks for the ones left late, and
which of those it takes (pure).

A node follows only the `any` jobs it owns (chronod.fleet.placement). It does not track
the other nodes' occurrences one by one: it asks the store, in one query, which
scheduled occurrences are still pending RESCUE_AFTER_S past their fire time (their owner
died, froze or fell behind), and when the next pending one falls due; it looks again when
that one would be late, at most every LOOK_EVERY_S and at least every LOOK_AT_MOST_S. A
node that is behind or overloaded itself does not look (taking more work would only
spread the overload): its work per owed occurrence is then its own share's, whatever the
fleet owes. The claim, not this choice, makes each occurrence run once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Container, Iterable, Mapping, Protocol, TypeVar

RESCUE_AFTER_S = 1.5  # an `any` occurrence still pending this long after its fire time: any node takes it
LOOK_EVERY_S = 0.5  # a node looks for late occurrences at most this often
LOOK_AT_MOST_S = 30.0  # and at least this often (an occurrence stored since the last look, by a reload elsewhere)
LOOK_LIMIT = 1000  # late occurrences read per look, oldest first


class Occurrence(Protocol):
    run_id: str
    job_id: str
    job_key: str


R = TypeVar("R", bound=Occurrence)


def looks(behind: bool, overloaded: bool) -> bool:
    """Whether a node looks for the other nodes' late occurrences: not while it is behind
    (runs of its own wait to start) or overloaded (it sheds runs of its own)."""
    return not (behind or overloaded)


def late_before(now: datetime, after_s: float = RESCUE_AFTER_S) -> datetime:
    """An occurrence whose fire time is at or before this, still pending, is late."""
    return now - timedelta(seconds=after_s)


def next_look(now: datetime, upcoming: datetime | None, after_s: float = RESCUE_AFTER_S) -> datetime:
    """When to look again: when the next pending occurrence (`upcoming`, its fire time;
    None: none stored) would be late, but not sooner than LOOK_EVERY_S nor later than
    LOOK_AT_MOST_S from `now`."""
    soonest, latest = now + timedelta(seconds=LOOK_EVERY_S), now + timedelta(seconds=LOOK_AT_MOST_S)
    if upcoming is None:
        return latest
    return min(max(upcoming + timedelta(seconds=after_s), soonest), latest)


def to_rescue(late: Iterable[R], here: Container[str], carried: Mapping[str, str]) -> list[R]:
    """Of the late occurrences the store named (oldest first), the ones this node takes:
    those of an `any` job it carries in the version the fleet runs (`carried`: job id ->
    the key of that job here, an outvoted job left out), that it is not handling itself
    (`here`: run ids tracked, waiting to start, in a line or running on this node)."""
    return [r for r in late if r.run_id not in here and carried.get(r.job_id) == r.job_key]
