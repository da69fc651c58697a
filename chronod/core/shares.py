"""Fair shares of a scarce resource between owners (pure).

When more runs are due than a node may start (the start limit), who goes first is decided
here: starts are shared round-robin between the accounts the jobs run as (a job's `user:`,
"" for the daemon's own account), and within one account round-robin between its jobs.
Each job's own runs keep their order (the line's: tightest start deadline first).

The turn carries over from one decision to the next (`served`: when each account and each
job last got a start), so a limit that lets one run through at a time still alternates:
400 jobs of one delegated file take at most one start in two while root's job asks for
one, and no account's flood starves another's jobs.
"""

from __future__ import annotations

from typing import Callable, Hashable, Mapping, Sequence, TypeVar

T = TypeVar("T")

NEVER = -1
CLOCK = ("clock",)  # in `served`: the last stamp given


def principal(user: str | None) -> str:
    """The account a job's share is counted against: its `user:`, "" for the daemon's own."""
    return user or ""


def fair_order(
    line: Sequence[T],
    owner: Callable[[T], Hashable],
    job: Callable[[T], Hashable],
    served: Mapping[Hashable, int] | None = None,
) -> list[T]:
    """`line` (in priority order) reordered for fair shares: round after round, each owner
    gives its next entry, taken round-robin from its jobs, each job's entries in line
    order. Owners (and an owner's jobs) take their turns least recently served first
    (`served`: ("owner", o) and ("job", j) -> the stamp of their last start), ties in
    order of their first entry in the line.

    Every prefix of the result is a fair share: an owner present in the line gets its
    first entry within the first (number of owners) entries, whatever the others ask."""
    served = served or {}
    jobs_of: dict[Hashable, dict[Hashable, list[T]]] = {}  # in order of first entry (dicts keep it)
    for item in line:
        o, j = owner(item), job(item)
        jobs = jobs_of.get(o)
        if jobs is None:
            jobs = jobs_of[o] = {}
        same = jobs.get(j)
        if same is None:
            jobs[j] = [item]
        else:
            same.append(item)
    owners = list(jobs_of)
    if served:  # least recently served first; a stable sort keeps ties in line order
        owners.sort(key=lambda o: served.get(("owner", o), NEVER))
    per_owner = []
    for o in owners:
        queues = list(jobs_of[o].values())
        if served:
            keys = list(jobs_of[o])
            order = sorted(range(len(keys)), key=lambda i: served.get(("job", keys[i]), NEVER))
            queues = [queues[i] for i in order]
        per_owner.append(_round_robin(queues))
    return _round_robin(per_owner)


def fair_split(
    line: Sequence[T],
    n: int,
    owner: Callable[[T], Hashable],
    job: Callable[[T], Hashable],
    served: Mapping[Hashable, int] | None = None,
) -> tuple[list[T], list[T], dict[Hashable, int]]:
    """The `n` entries of `line` that go now under fair shares (in fair order), the others
    in their order in `line`, and the `served` stamps that change (to merge in)."""
    served = served or {}
    if n <= 0 or not line:
        return [], list(line), {}
    go = fair_order(line, owner, job, served)[:n] if n < len(line) else fair_order(line, owner, job, served)
    chosen = {id(x) for x in go}
    stamp = served.get(CLOCK, NEVER)
    changed: dict[Hashable, int] = {}
    for x in go:
        stamp += 1
        changed[("owner", owner(x))] = changed[("job", job(x))] = stamp
    changed[CLOCK] = stamp
    return go, [x for x in line if id(x) not in chosen], changed


def _round_robin(queues: list[list[T]]) -> list[T]:
    """One of each queue in turn, round after round; the queues that run dry drop out."""
    if len(queues) == 1:
        return queues[0]
    if all(len(q) == 1 for q in queues):  # the common line: one run per job
        return [q[0] for q in queues]
    active = [q for q in queues if q]
    out: list[T] = []
    i = 0
    while len(active) > 1:
        out.extend(q[i] for q in active)
        i += 1
        if any(len(q) <= i for q in active):
            active = [q for q in active if len(q) > i]
    if active:
        out.extend(active[0][i:])
    return out
