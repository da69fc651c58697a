"""Fleet-only writes that the plain store interface does not need: a claim that holds a
`resource` limit across every node, the replay of a run started while the database was
unreachable, and the retries a dead node left waiting.

They run inside the store's own transactions and fencing conditions (`SqlStore._tx`,
`_lease_live`), so a stale token changes nothing here either.
"""

from __future__ import annotations

import zlib
from typing import Any

import sqlalchemy as sa

from chronod.store import schema as s
from chronod.store.api import Run

def _group_key(resource: str) -> int:
    # pg_advisory_xact_lock takes a bigint; keep chrono's groups in their own range.
    return (0x63720000 << 32) | zlib.crc32(resource.encode())


def running_in_group(c: Any, resource: str) -> int:
    """Runs of any job whose spec names `resource`, running on any node (PostgreSQL)."""
    return int(c.execute(sa.text(
        "SELECT count(*) FROM runs r JOIN jobs j ON j.job_id = r.job_id "
        "WHERE r.state = 'running' AND (j.spec_json::jsonb ->> 'resource') = :res"), {"res": resource}).scalar_one())


def dispatch_in_group(store: Any, run_id: str, node: str, token: int, next_run: Run | None, *,
                      resource: str, limit: int) -> tuple[Run | None, bool]:
    """`Store.dispatch`, plus: refuse while `limit` runs of `resource` run fleet-wide.

    An advisory lock per group, held to the end of the transaction, serializes the
    count-then-claim of every node. Returns (claimed run or None, group_full). When the
    group is full nothing is claimed, but `next_run` is still stored so that the job's
    chain of occurrences never breaks."""
    with store._tx() as c:
        c.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _group_key(resource)})
        if running_in_group(c, resource) >= limit:
            store._insert_new(c, next_run)
            return None, True
        claimed = store._claim(c, [run_id], node, token)
        if claimed:
            store._insert_new(c, next_run)
        return (claimed[0] if claimed else None), False


def claim_offline(store: Any, run: Run, node: str, token: int) -> Run | None:
    """Record a run this node started while the database was unreachable: store the
    occurrence if it is missing, then claim it at the attempt and start time it really had.
    None if it is no longer waiting (it was settled meanwhile) or the token is stale."""
    with store._tx() as c:
        waiting = Run(**{**run.as_dict(), "state": "pending", "attempts": run.attempts - 1, "node": None,
                         "token": None, "started_at": None, "pid": None, "supervisor_pid": None})
        store._insert_new(c, waiting)
        claimed = store._claim(c, [run.run_id], node, token, started_at=run.started_at, attempts=run.attempts)
        return claimed[0] if claimed else None


def waiting_retries(store: Any, node: str) -> list[Run]:
    """Runs in retry_wait last held by `node` (a dead node's pending retries)."""
    r = s.runs.c
    return store._select_runs(sa.select(s.runs).where(r.state == "retry_wait", r.node == node)
                              .order_by(r.next_attempt_at, r.run_id))
