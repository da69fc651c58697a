"""Backfills in the store: the stored request, its occurrences, and how far it got.

The backfills role of the SQL store (`SqlStore` inherits it). The database does the
bookkeeping: an occurrence a backfill starts keeps its own run id; one with no row is
inserted, one that ended is opened again (its attempts keep counting, so every attempt
stays recorded against its occurrence), both with trigger `backfill`, and only when it is
not in flight (pending, running, retrying). The backfill's `started` count moves in the
same transaction, so a restart resumes after the last occurrence opened, never twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from chronod.core.model import TERMINAL_STATES
from chronod.store import schema as s
from chronod.store.api import Run
from chronod.store.sqldb import SqlPart


@dataclass
class Backfill:
    """A stored backfill: its range, its occurrences (oldest first) and how many started."""

    id: int
    job_id: str
    from_at: datetime
    to_at: datetime
    only: str
    max_concurrency: int
    allow_unsafe: bool
    reason: str | None
    requested_by: str | None
    items: list[tuple[str, str, datetime, datetime]]  # (run_id, job_key, scheduled_at, fire_at)
    started: int
    state: str  # running | done | cancelled
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None

    @property
    def run_ids(self) -> list[str]:
        """The occurrences' run ids, oldest first."""
        return [i[0] for i in self.items]


def _items_json(items: list[tuple[str, str, datetime, datetime]]) -> str:
    return json.dumps([[rid, key, at.isoformat(), fire.isoformat()] for rid, key, at, fire in items])


def _backfill(row: Any) -> Backfill:
    data = dict(row)
    raw = json.loads(data.pop("items_json"))
    data["items"] = [(rid, key, datetime.fromisoformat(at), datetime.fromisoformat(fire)) for rid, key, at, fire in raw]
    return Backfill(**data)


class BackfillStore(SqlPart):
    """`chronod.store.api.Backfills` over SQL."""

    def add_backfill(
        self,
        job_id: str,
        *,
        from_at: datetime,
        to_at: datetime,
        only: str,
        max_concurrency: int,
        allow_unsafe: bool,
        reason: str | None,
        requested_by: str | None,
        items: list[tuple[str, str, datetime, datetime]],
    ) -> int:
        """Store a backfill (state running, nothing started); returns its id."""
        with self._tx() as c:
            now = self._ts()
            return int(
                c.execute(
                    s.backfills.insert()
                    .values(
                        job_id=job_id,
                        from_at=from_at,
                        to_at=to_at,
                        only=only,
                        max_concurrency=max_concurrency,
                        allow_unsafe=allow_unsafe,
                        reason=reason,
                        requested_by=requested_by,
                        items_json=_items_json(items),
                        started=0,
                        state="running" if items else "done",
                        created_at=now,
                        updated_at=now,
                        finished_at=None if items else now,
                    )
                    .returning(s.backfills.c.id)
                ).scalar_one()
            )

    def backfills(self, *, active_only: bool = False, job_id: str | None = None, limit: int = 50) -> list[Backfill]:
        """Stored backfills, newest first (`active_only`: those still running)."""
        b = s.backfills.c
        q = sa.select(s.backfills).order_by(b.id.desc()).limit(limit)
        if active_only:
            q = q.where(b.state == "running")
        if job_id is not None:
            q = q.where(b.job_id == job_id)
        with self._tx(write=False) as c:
            return [_backfill(row) for row in c.execute(q).mappings()]

    def get_backfill(self, backfill_id: int) -> Backfill | None:
        """One backfill by id."""
        with self._tx(write=False) as c:
            row = c.execute(sa.select(s.backfills).where(s.backfills.c.id == backfill_id)).mappings().first()
        return _backfill(row) if row else None

    def open_backfill_run(self, backfill_id: int, index: int, run: Run) -> Run | None:
        """Make occurrence `index` of a backfill waiting to start, with trigger backfill, and
        count it started, in one transaction: insert `run` when it has no row, open its row
        again when it ended (attempts kept). Returns the waiting run, or None when the run is
        in flight already (it is counted started all the same) or the backfill is not at
        `index` any more (a second writer). The caller's `run` is left as it was."""
        b, r = s.backfills.c, s.runs.c
        with self._tx() as c:
            now = self._ts()
            moved = c.execute(
                s.backfills.update()
                .where(b.id == backfill_id, b.started == index, b.state == "running")
                .values(started=index + 1, updated_at=now)
            ).rowcount
            if moved != 1:
                return None
            fresh = self._insert_new(c, replace(run, trigger="backfill", state="pending"))
            if not fresh:
                reopened = c.execute(
                    s.runs.update()
                    .where(r.run_id == run.run_id, r.state.in_(TERMINAL_STATES))
                    .values(
                        state="pending",
                        trigger="backfill",
                        fire_at=run.fire_at,
                        error=None,
                        exit_code=None,
                        signal=None,
                        finished_at=None,
                        next_attempt_at=None,
                        updated_at=now,
                    )
                ).rowcount
                if reopened != 1:
                    return None
            row = c.execute(sa.select(s.runs).where(r.run_id == run.run_id)).mappings().one()
        return Run(**row)

    def end_backfill(self, backfill_id: int, state: str, error: str | None = None) -> bool:
        """A running backfill ends: `done` (every occurrence started has ended) or `cancelled`."""
        b = s.backfills.c
        with self._tx() as c:
            now = self._ts()
            return (
                c.execute(
                    s.backfills.update()
                    .where(b.id == backfill_id, b.state == "running")
                    .values(state=state, error=error, finished_at=now, updated_at=now)
                ).rowcount
                == 1
            )

    def cancel_backfill(self, backfill_id: int, why: str) -> tuple[bool, list[str]]:
        """Cancel a running backfill: none of its occurrences starts any more (a daemon
        opening the next one finds it cancelled, in the same transaction as its own
        write), and those it opened that have not started yet end `cancelled` too; those
        running or retrying finish. Returns whether it was running (False: it had ended
        already) and the run ids it cancelled (a hold noted on them, `next_attempt_at`, is
        cleared as every settle clears it)."""
        b, r = s.backfills.c, s.runs.c
        with self._tx() as c:
            now = self._ts()
            row = c.execute(sa.select(s.backfills).where(b.id == backfill_id, b.state == "running")).mappings().first()
            if row is None:
                return False, []
            c.execute(
                s.backfills.update()
                .where(b.id == backfill_id, b.state == "running")
                .values(state="cancelled", error=why, finished_at=now, updated_at=now)
            )
            opened = [i[0] for i in _backfill(row).items[: row["started"]]]
            waiting = sa.select(r.run_id).where(r.run_id.in_(opened), r.state == "pending", r.trigger == "backfill")
            ids = [x for (x,) in c.execute(waiting)] if opened else []
            if ids:
                c.execute(
                    s.runs.update()
                    .where(r.run_id.in_(ids), r.state == "pending")
                    .values(state="cancelled", error=why, finished_at=now, updated_at=now, next_attempt_at=None)
                )
            return True, ids
