"""The requests-and-state role of the SQL store: pauses (of jobs, tags and resources),
chronoctl's requests to the daemons, per job-key state, registry errors, and the cheap
health figures (`metrics`, `database_bytes`)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import func

from chronod.store import schema as s
from chronod.store.api import PauseRow, Request, StoreError
from chronod.store.sqldb import SqlPart


class StateSql(SqlPart):
    """`chronod.store.api.OperatorState` over SQL."""

    # --- pauses ---------------------------------------------------------------------------
    def set_paused(
        self,
        job_id: str,
        paused: bool,
        reason: str | None,
        *,
        by: str | None = None,
        until: datetime | None = None,
    ) -> bool:
        with self._tx() as c:
            res = c.execute(
                s.jobs.update()
                .where(s.jobs.c.job_id == job_id)
                .values(
                    paused=paused,
                    paused_reason=reason if paused else None,
                    paused_at=self._ts() if paused else None,
                    paused_by=by if paused else None,
                    paused_until=until if paused else None,
                    updated_at=self._ts(),
                )
            )
            return res.rowcount == 1

    def paused_jobs(self) -> dict[str, str | None]:
        j = s.jobs.c
        with self._tx(write=False) as c:
            rows = c.execute(
                sa.select(j.job_id, j.paused_reason).where(
                    j.paused.is_(True), j.removed_at.is_(None), self._pause_live(j.paused_until)
                )
            )
            return {r.job_id: r.paused_reason for r in rows}

    def set_group_pause(
        self, kind: str, target: str, reason: str, *, by: str | None = None, until: datetime | None = None
    ) -> None:
        p = s.pauses
        with self._tx() as c:
            c.execute(p.delete().where(p.c.kind == kind, p.c.target == target))
            c.execute(
                p.insert().values(
                    kind=kind, target=target, reason=reason, paused_by=by, paused_at=self._ts(), paused_until=until
                )
            )

    def clear_group_pause(self, kind: str, target: str) -> bool:
        p = s.pauses
        with self._tx() as c:
            return c.execute(p.delete().where(p.c.kind == kind, p.c.target == target)).rowcount == 1

    def pauses(self, include_removed: bool = False) -> list[PauseRow]:
        j, p = s.jobs.c, s.pauses.c
        held = [j.paused.is_(True), self._pause_live(j.paused_until)]
        if not include_removed:
            held.append(j.removed_at.is_(None))
        with self._tx(write=False) as c:
            own = c.execute(
                sa.select(j.job_id, j.paused_reason, j.paused_by, j.paused_at, j.paused_until).where(*held)
            ).all()
            groups = c.execute(sa.select(s.pauses).where(self._pause_live(p.paused_until))).mappings().all()
        out = [PauseRow("job", r.job_id, r.paused_reason or "", r.paused_by, r.paused_at, r.paused_until) for r in own]
        out += [
            PauseRow(r["kind"], r["target"], r["reason"], r["paused_by"], r["paused_at"], r["paused_until"])
            for r in groups
        ]
        return out

    # --- health ---------------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        """Added: a cheap summary for /metrics and `chronoctl status`: runs by state, live
        jobs, paused jobs (those `paused_jobs` gives: a pause past its end is over), and
        this process's stale-token rejections."""
        r, j = s.runs.c, s.jobs.c
        with self._tx(write=False) as c:
            by_state = {
                row.state: row.n for row in c.execute(sa.select(r.state, func.count().label("n")).group_by(r.state))
            }
            jobs = c.execute(sa.select(func.count()).where(j.removed_at.is_(None))).scalar_one()
            paused = c.execute(
                sa.select(func.count()).where(
                    j.removed_at.is_(None), j.paused.is_(True), self._pause_live(j.paused_until)
                )
            ).scalar_one()
        return {
            "runs_by_state": by_state,
            "jobs": jobs,
            "paused_jobs": paused,
            "stale_rejections": self.stale_rejections,
            "database_bytes": self.database_bytes(),
        }

    def database_bytes(self) -> int | None:
        try:
            with self._tx(write=False) as c:
                if self.dialect == "postgresql":
                    return int(c.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one())
                pages = c.exec_driver_sql("PRAGMA page_count").scalar_one()
                size = c.exec_driver_sql("PRAGMA page_size").scalar_one()
                return int(pages) * int(size)
        except StoreError:
            return None

    # --- requests -----------------------------------------------------------------------
    def add_request(self, kind: str, job_id: str | None, payload: dict[str, Any]) -> int:
        with self._tx() as c:
            return int(
                c.execute(
                    s.requests.insert()
                    .values(
                        kind=kind,
                        job_id=job_id,
                        payload_json=json.dumps(payload, sort_keys=True),
                        created_at=self._ts(),
                    )
                    .returning(s.requests.c.id)
                ).scalar_one()
            )

    def take_requests(self, node: str) -> list[Request]:
        q = s.requests.c
        with self._tx() as c:
            rows = c.execute(
                s.requests.update()
                .where(q.taken_by.is_(None))
                .values(taken_by=node, taken_at=self._ts())
                .returning(q.id, q.kind, q.job_id, q.payload_json, q.created_at)
            ).all()
        return sorted(
            (
                Request(
                    id=r.id, kind=r.kind, job_id=r.job_id, payload=json.loads(r.payload_json), created_at=r.created_at
                )
                for r in rows
            ),
            key=lambda x: x.id,
        )

    # --- per job-key state ----------------------------------------------------------------
    def get_job_state(self, job_key: str) -> dict[str, Any]:
        with self._tx(write=False) as c:
            text = c.execute(sa.select(s.job_state.c.state_json).where(s.job_state.c.job_key == job_key)).scalar()
        return json.loads(text) if text else {}

    def set_job_state(self, job_key: str, state: dict[str, Any]) -> None:
        with self._tx() as c:
            values = dict(state_json=json.dumps(state, sort_keys=True, default=str), updated_at=self._ts())
            stmt = self._insert(s.job_state).values(job_key=job_key, **values)
            c.execute(stmt.on_conflict_do_update(index_elements=["job_key"], set_=values))

    # --- registry errors ----------------------------------------------------------------
    def set_registry_errors(self, node: str, errors: list[dict[str, Any]]) -> None:
        e = s.registry_errors
        with self._tx() as c:
            c.execute(e.delete().where(e.c.node == node))
            now = self._now() if self.dialect == "sqlite" else c.execute(sa.select(func.now())).scalar_one()
            rows = [
                dict(
                    node=node,
                    file=str(err.get("file", "")),
                    line=err.get("line"),
                    message=str(err.get("message", "")),
                    at=now,
                )
                for err in errors
            ]
            if rows:
                c.execute(e.insert(), rows)

    def registry_errors(self) -> list[dict[str, Any]]:
        """By node, file, then line, an error without a line (the whole file's) first on
        every database (SQLite and PostgreSQL place NULL apart unless told)."""
        e = s.registry_errors.c
        with self._tx(write=False) as c:
            rows = c.execute(
                sa.select(e.node, e.file, e.line, e.message, e.at).order_by(e.node, e.file, e.line.nulls_first(), e.id)
            ).mappings()
            return [dict(row) for row in rows]
