"""The retention role of the SQL store: pruning old runs under a per-job watermark, and
deleting a run outright (operator repair)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy import func
from sqlalchemy.engine import Connection

from chronod.core.model import TERMINAL_STATES, RunState
from chronod.store import schema as s
from chronod.store.api import Pruned
from chronod.store.sqldb import SqlPart, chunks


class RetentionSql(SqlPart):
    """`chronod.store.api.Retention` over SQL."""

    def _prunable_query(self, job_id: str, before: datetime) -> sa.Select[Any]:
        """The runs `prune_runs` may delete, oldest first: terminal, scheduled before
        `before`, and not the job's latest success (a silence alert counts from it)."""
        r = s.runs.c
        keep = (
            sa.select(r.run_id)
            .where(r.job_id == job_id, r.state == RunState.SUCCEEDED)
            .order_by(r.scheduled_at.desc())
            .limit(1)
            .scalar_subquery()
        )
        return (
            sa.select(r.run_id, r.scheduled_at)
            .where(
                r.job_id == job_id,
                r.scheduled_at < before,
                r.state.in_(TERMINAL_STATES),
                r.run_id != sa.func.coalesce(keep, ""),
            )
            .order_by(r.scheduled_at, r.run_id)
        )

    def prune_runs(self, job_id: str, before: datetime, *, kept_s: int, limit: int) -> int:
        # look first without the write lock: most rounds find nothing for most jobs
        with self._tx(write=False) as c:
            rows = c.execute(self._prunable_query(job_id, before).limit(limit)).all()
        if not rows:
            return 0
        r = s.runs.c
        with self._tx() as c:
            deleted = 0
            for chunk in chunks([row.run_id for row in rows], 500):  # attempts go by ON DELETE CASCADE
                deleted += c.execute(s.runs.delete().where(r.run_id.in_(chunk), r.state.in_(TERMINAL_STATES))).rowcount
            self._raise_watermark(c, job_id, max(row.scheduled_at for row in rows), kept_s)
        return deleted

    def _raise_watermark(self, c: Connection, job_id: str, through: datetime, kept_s: int) -> None:
        p = s.job_pruned.c
        old = c.execute(sa.select(p.pruned_through).where(p.job_id == job_id)).scalar()
        values = dict(pruned_through=max(through, old) if old else through, kept_s=kept_s, pruned_at=self._ts())
        stmt = self._insert(s.job_pruned).values(job_id=job_id, **values)
        c.execute(stmt.on_conflict_do_update(index_elements=["job_id"], set_=values))

    def prunable(self, cutoffs: dict[str, datetime]) -> dict[str, int]:
        out = {}
        with self._tx(write=False) as c:
            for job_id, before in cutoffs.items():
                n = c.execute(
                    sa.select(func.count()).select_from(self._prunable_query(job_id, before).subquery())
                ).scalar_one()
                if n:
                    out[job_id] = n
        return out

    def job_ids_with_runs_before(self, before: datetime) -> list[str]:
        r = s.runs.c
        with self._tx(write=False) as c:
            return sorted(c.execute(sa.select(r.job_id).where(r.scheduled_at < before).distinct()).scalars())

    def pruned(self, job_ids: Iterable[str] | None = None) -> dict[str, Pruned]:
        p = s.job_pruned.c
        q = sa.select(s.job_pruned)
        if job_ids is not None:
            q = q.where(p.job_id.in_(list(job_ids)))
        with self._tx(write=False) as c:
            return {
                row.job_id: Pruned(row.job_id, row.pruned_through, row.kept_s, row.pruned_at) for row in c.execute(q)
            }

    def delete_run(self, run_id: str) -> bool:
        """Added (tests and operator repair): remove a run and its attempts."""
        with self._tx() as c:
            return c.execute(s.runs.delete().where(s.runs.c.run_id == run_id)).rowcount == 1
