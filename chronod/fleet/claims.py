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

WAITING = ("pending", "retry_wait")


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
    r = s.runs.c
    with store._tx() as c:
        c.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _group_key(resource)})
        if running_in_group(c, resource) >= limit:
            store._insert_new(c, next_run)
            return None, True
        free = c.execute(sa.select(r.run_id).where(r.run_id == run_id, r.state.in_(WAITING))
                         .with_for_update(skip_locked=True)).first()
        if free is None:
            return None, False
        return _claim(store, c, run_id, node, token, next_run, started_at=None, attempts=None), False


def _claim(store: Any, c: Any, run_id: str, node: str, token: int, next_run: Run | None, *,
           started_at: Any, attempts: int | None) -> Run | None:
    r = s.runs.c
    start = sa.literal(started_at, s.UTCDateTime()) if started_at is not None else store._ts()
    row = c.execute(
        s.runs.update()
        .where(r.run_id == run_id, r.state.in_(WAITING), store._lease_live(token, node))
        .values(state="running", attempts=attempts if attempts is not None else r.attempts + 1, node=node,
                token=token, started_at=start, finished_at=None, pid=None, supervisor_pid=None, exit_code=None,
                signal=None, output_tail=None, output_bytes=0, error=None, next_attempt_at=None,
                updated_at=store._ts())
        .returning(*s.runs.c)
    ).mappings().first()
    if row is None:
        store._rejected(c, token)
        return None
    c.execute(s.attempts.insert().values(run_id=run_id, attempt=row["attempts"], node=node, token=token,
                                         state="running", started_at=row["started_at"]))
    store._insert_new(c, next_run)
    return Run(**row)


def claim_offline(store: Any, run: Run, node: str, token: int) -> Run | None:
    """Record a run this node started while the database was unreachable: store the
    occurrence if it is missing, then claim it at the attempt and start time it really had.
    None if it is no longer waiting (it was settled meanwhile) or the token is stale."""
    with store._tx() as c:
        waiting = Run(**{**run.__dict__, "state": "pending", "attempts": run.attempts - 1, "node": None,
                         "token": None, "started_at": None, "pid": None, "supervisor_pid": None})
        store._insert_new(c, waiting)
        return _claim(store, c, run.run_id, node, token, None, started_at=run.started_at, attempts=run.attempts)


def waiting_retries(store: Any, node: str) -> list[Run]:
    """Runs in retry_wait last held by `node` (a dead node's pending retries)."""
    r = s.runs.c
    return store._select_runs(sa.select(s.runs).where(r.state == "retry_wait", r.node == node)
                              .order_by(r.next_attempt_at, r.run_id))


def claim_many(store: Any, items: list[tuple[str, Run | None]], node: str, token: int) -> list[Run]:
    """Claim many due runs in ONE transaction: store every `next_run` (the same rows on
    every node: existing ones are left alone), then move the runs nobody else holds to
    running under `token`, each with a new attempt row. Rows another node has locked are
    skipped, not waited for. This is `Store.dispatch` for a whole wake-up at once: the
    fleet pays one commit per node per wake-up instead of one per occurrence."""
    r = s.runs.c
    ids = [rid for rid, _ in items]
    nexts = [store._run_row(n) for _, n in items if n is not None]
    with store._tx() as c:
        if nexts and store.dialect == "postgresql":
            store._insert_runs_unnest(c, nexts)
        elif nexts:
            c.execute(store._insert(s.runs).on_conflict_do_nothing(index_elements=["run_id"]), nexts)
        free = (sa.select(r.run_id).where(r.run_id.in_(ids), r.state.in_(WAITING))
                .with_for_update(skip_locked=True))
        now = store._ts()
        rows = c.execute(
            s.runs.update()
            .where(r.run_id.in_(free.scalar_subquery()), store._lease_live(token, node))
            .values(state="running", attempts=r.attempts + 1, node=node, token=token, started_at=now,
                    finished_at=None, pid=None, supervisor_pid=None, exit_code=None, signal=None,
                    output_tail=None, output_bytes=0, error=None, next_attempt_at=None, updated_at=now)
            .returning(*s.runs.c)
        ).mappings().all()
        if not rows:
            store._rejected(c, token)
            return []
        c.execute(s.attempts.insert(), [dict(run_id=row["run_id"], attempt=row["attempts"], node=node, token=token,
                                             state="running", started_at=row["started_at"]) for row in rows])
        return [Run(**row) for row in rows]
