"""Which version of a job the fleet runs, and where the nodes disagree (pure: no I/O).

Every node publishes the spec hash of each job it carries (`info["spec_hashes"]`, see
Daemon.reload). Two live nodes that carry one job id with different hashes disagree; the
fleet must then run one version, not both. The rule, the same on every node because it is
a function of the published hashes only:

1. Only live nodes vote (lease unexpired, not stopped).
2. The version carried by the most live nodes wins.
3. A tie goes to the greater hash (string order): arbitrary, but the same everywhere.

A node whose own version lost does not dispatch that job's `any` occurrences; the nodes
with the winning version do. `each` jobs keep running their local version on every node
(they are that node's own work); their disagreement is only reported.

Which node dispatches an `any` job's occurrences (`owner`) is rendezvous hashing over the
live nodes that carry the fleet's version of the job: every node computes the same owner
from the same published hashes, a job stays on its node while the fleet does not change,
and when a node leaves only its own jobs move. The others leave the job to its owner and
step in only when an occurrence is still unclaimed a little after its fire time (a dead
or overloaded owner; see Daemon.run_due_now). The database claim, not this choice, is what
makes each occurrence run once: two nodes that disagree about the owner for a moment
compete for the claim and one wins.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from datetime import datetime
from typing import Any, Iterable


def node_live(node: Any, now: datetime) -> bool:
    """A node votes while its lease (database time) is unexpired and it has not stopped."""
    return node.stopped_at is None and node.lease_expires_at > now


def versions(nodes: Iterable[Any], now: datetime) -> dict[str, dict[str, list[str]]]:
    """job_id -> spec_hash -> names of the live nodes that carry that version."""
    out: dict[str, dict[str, list[str]]] = {}
    for n in sorted(nodes, key=lambda n: n.name):
        if not node_live(n, now):
            continue
        for job_id, h in ((n.info or {}).get("spec_hashes") or {}).items():
            out.setdefault(job_id, {}).setdefault(h, []).append(n.name)
    return out


def disagreements(nodes: Iterable[Any], now: datetime) -> dict[str, dict[str, list[str]]]:
    """Only the jobs whose live nodes carry more than one version."""
    return {j: v for j, v in versions(nodes, now).items() if len(v) > 1}


def winner(by_hash: dict[str, list[str]]) -> str:
    """The version the fleet runs: most carrying nodes, then the greater hash."""
    counts = Counter({h: len(names) for h, names in by_hash.items()})
    return max(counts, key=lambda h: (counts[h], h))


def outvoted(local: dict[str, str], nodes: Iterable[Any], now: datetime) -> dict[str, str]:
    """job_id -> the winning hash, for each local job whose local version lost."""
    out = {}
    for job_id, by_hash in disagreements(nodes, now).items():
        mine = local.get(job_id)
        if mine is None:
            continue
        best = winner(by_hash)
        if best != mine:
            out[job_id] = best
    return out


def report(nodes: Iterable[Any], now: datetime) -> list[dict[str, Any]]:
    """Rows for `chronoctl status`: each disagreeing job, every version, who carries it,
    and which version runs."""
    rows = []
    for job_id, by_hash in sorted(disagreements(nodes, now).items()):
        best = winner(by_hash)
        for h, names in sorted(by_hash.items()):
            rows.append({"job_id": job_id, "spec_hash": h, "nodes": names, "runs": h == best})
    return rows


def rank(job_id: str, node: str) -> bytes:
    """The rendezvous score of `node` for `job_id`: the highest score owns the job."""
    return hashlib.blake2b(f"{job_id}\0{node}".encode(), digest_size=8).digest()


def owner(job_id: str, carried: dict[str, dict[str, str]]) -> str | None:
    """The node that dispatches `job_id`: among the nodes that carry the fleet's version
    of it (`carried`: live node -> job_id -> spec hash), the one with the highest rank.
    None if no live node carries it."""
    by_hash: dict[str, list[str]] = {}
    for name, hashes in carried.items():
        h = hashes.get(job_id)
        if h is not None:
            by_hash.setdefault(h, []).append(name)
    if not by_hash:
        return None
    best = winner(by_hash) if len(by_hash) > 1 else next(iter(by_hash))
    return max(by_hash[best], key=lambda name: rank(job_id, name))
