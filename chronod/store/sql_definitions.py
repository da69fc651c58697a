"""The definitions role of the SQL store: job specs as registered, their versions and the
spans each definition was known (pauses, kept on the same rows, are `sql_state`'s)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Iterable, Mapping, NamedTuple

import sqlalchemy as sa
from sqlalchemy import func
from sqlalchemy.engine import Connection

from chronod.core import policy
from chronod.core.model import JobSpec, RunState, Trigger, json_text_and_hash
from chronod.store import schema as s
from chronod.store.api import FellDue, JobRow, Run
from chronod.store.sqldb import BATCH, SqlPart, bound, chunks, sqlite_text


class _Stored(NamedTuple):
    """What `sync_jobs` compares of a stored definition (removed_at: None while registered)."""

    spec_hash: str
    node: str
    removed_at: object


class DefinitionsSql(SqlPart):
    """`chronod.store.api.Definitions` over SQL."""

    def sync_jobs(self, node: str, specs: Iterable[JobSpec], fell_due: FellDue | None = None) -> None:
        j = s.jobs.c
        wanted = {spec.id: spec for spec in specs}
        # Read what is stored outside the write transaction: on SQLite a writer holds the
        # database's one write lock, and a reload of 100,000 unchanged jobs (which writes
        # nothing) must not hold it against the loop's claims while it reads them all.
        with self._tx(write=False) as c:
            # through the driver: only whether removed_at is NULL is read, so its value is
            # neither converted nor mapped (100,000 rows at every start-up)
            driver: Any = c.connection.driver_connection
            rows = driver.execute("SELECT job_id, spec_hash, node, removed_at IS NULL FROM jobs").fetchall()
            stored = {
                job_id: _Stored(spec_hash, node, None if live else True) for job_id, spec_hash, node, live in rows
            }
        if all(
            (old := stored.get(job_id)) is not None
            and old.removed_at is None
            and old.node == node
            and old.spec_hash == spec.spec_hash()
            for job_id, spec in wanted.items()
        ) and not any(r.node == node and r.removed_at is None and job_id not in wanted for job_id, r in stored.items()):
            return  # nothing to write
        with self._tx() as c:
            now = self._now() if self.dialect == "sqlite" else c.execute(sa.select(func.now())).scalar_one()
            rows = []
            for job_id, spec in wanted.items():
                old = stored.get(job_id)
                # A stored job is compared by the hash the spec keeps (an unchanged job file
                # hands back the same spec objects on every reload); JSON only for rows written.
                spec_hash = spec.spec_hash() if old is not None else ""
                if old is None or old.spec_hash != spec_hash or old.node != node or old.removed_at is not None:
                    rows.append((job_id, *spec_json_and_hash(spec)))
            arrived = [job_id for job_id in wanted if job_id not in stored or stored[job_id].removed_at is not None]
            # Straight to the driver: every row shares `now`, converted once; SQLAlchemy's
            # per-row parameter handling cost as much as the database's work at 100,000 jobs.
            # On SQLite as the text it stores: the driver's own adapter converted the same
            # datetime again for every row (a tenth of a cold start's sync at 100,000 jobs).
            at = sqlite_text(now) if self.dialect == "sqlite" else bound(s.job_known.c.known_from, c, now)
            mark = "?" if self.dialect == "sqlite" else "%s"
            for chunk in chunks(arrived, BATCH):
                c.exec_driver_sql(
                    f"INSERT INTO job_known (job_id, known_from, known_until) VALUES ({mark}, {mark}, NULL) "
                    "ON CONFLICT (job_id, known_from) DO UPDATE SET known_until = NULL",
                    [(job_id, at) for job_id in chunk],
                )
            if rows:
                paused = bound(s.jobs.c.paused, c, False)
                for chunk in chunks(rows, BATCH):
                    c.exec_driver_sql(
                        "INSERT INTO jobs (job_id, spec_json, spec_hash, node, paused, updated_at) "
                        f"VALUES ({', '.join([mark] * 6)}) ON CONFLICT (job_id) DO UPDATE SET "
                        "spec_json = excluded.spec_json, spec_hash = excluded.spec_hash, node = excluded.node, "
                        "updated_at = excluded.updated_at, removed_at = NULL",
                        [(job_id, spec_json, spec_hash, node, paused, at) for job_id, spec_json, spec_hash in chunk],
                    )
            gone = [
                job_id
                for job_id, r in stored.items()
                if r.node == node and r.removed_at is None and job_id not in wanted
            ]
            for chunk in chunks(gone, 500):
                c.execute(s.jobs.update().where(j.job_id.in_(chunk)).values(removed_at=now, updated_at=now))
                k = s.job_known.c
                c.execute(
                    s.job_known.update().where(k.job_id.in_(chunk), k.known_until.is_(None)).values(known_until=now)
                )
                due = self._fell_due(c, chunk, now, fell_due) if fell_due is not None else []
                self._end_waiting_of_removed(c, s.runs.c.job_id.in_(chunk))
                if due:
                    rows = [self._run_row(run) for run in sorted(due, key=lambda r: r.run_id)]
                    c.execute(self._insert(s.runs).on_conflict_do_nothing(index_elements=["run_id"]), rows)

    def _fell_due(self, c: Connection, job_ids: list[str], now: datetime, fell_due: FellDue) -> list[Run]:
        """What `fell_due` gives for each of these removed jobs whose latest pending scheduled
        occurrence had fallen due by `now` (read before the removal cancels it)."""
        r = s.runs.c
        latest = (
            sa.select(r.job_id, func.max(r.scheduled_at))
            .where(r.job_id.in_(job_ids), r.state == RunState.PENDING, r.trigger == Trigger.SCHEDULE)
            .where(r.fire_at <= now)
            .group_by(r.job_id)
        )
        after = {job_id: at for job_id, at in c.execute(latest)}
        if not after:
            return []
        specs = c.execute(sa.select(s.jobs.c.job_id, s.jobs.c.spec_json).where(s.jobs.c.job_id.in_(list(after))))
        return [
            run
            for job_id, spec_json in specs
            for run in fell_due(JobSpec.from_json_dict(json.loads(spec_json)), after[job_id], now)
        ]

    def _end_waiting_of_removed(self, c: Connection, where: sa.ColumnElement[bool]) -> None:
        """Settle the waiting runs of jobs removed from the registry: an occurrence not yet
        started is cancelled; a run waiting for its retry keeps its last attempt's outcome
        (`policy.retry_given_up`), never `cancelled` as if it had not run."""
        r, a = s.runs.c, s.attempts.c
        now, why = self._ts(), policy.REMOVED_FROM_REGISTRY
        retrying = c.execute(
            sa.select(r.run_id, r.attempts, r.error, a.state)
            .select_from(s.runs.outerjoin(s.attempts, sa.and_(a.run_id == r.run_id, a.attempt == r.attempts)))
            .where(where, r.state == RunState.RETRY_WAIT)
        ).all()
        for run_id, attempts, error, last in retrying:
            state, error = policy.retry_given_up(last, error, attempts + 1, None, why)
            c.execute(
                s.runs.update()
                .where(r.run_id == run_id, r.state == RunState.RETRY_WAIT)
                .values(state=state, error=error, finished_at=now, updated_at=now, next_attempt_at=None)
            )
        c.execute(
            s.runs.update()
            .where(where, r.state == RunState.PENDING)
            .values(state=RunState.CANCELLED, error=why, finished_at=now, updated_at=now, next_attempt_at=None)
        )

    def jobs_version(self) -> tuple[int, datetime | None]:
        """(count, newest updated_at) of the jobs table: any write to a definition, a
        removal or a pause changes it (one scan inside the database, no row read out)."""
        j = s.jobs.c
        with self._tx(write=False) as c:
            row = c.execute(sa.select(func.count(), func.max(j.updated_at))).one()
        return int(row[0]), row[1]

    def known_spans(self, job_ids: Iterable[str] | None = None) -> dict[str, list[tuple[datetime, datetime | None]]]:
        k = s.job_known.c
        q = sa.select(k.job_id, k.known_from, k.known_until).order_by(k.job_id, k.known_from)
        out: dict[str, list[tuple[datetime, datetime | None]]] = {}
        with self._tx(write=False) as c:
            if job_ids is None:
                rows = list(c.execute(q))
            else:
                rows = [
                    r for chunk in chunks(sorted(set(job_ids)), 500) for r in c.execute(q.where(k.job_id.in_(chunk)))
                ]
        for r in rows:
            out.setdefault(r.job_id, []).append((r.known_from, r.known_until))
        return out

    def registry_files(self, node: str) -> dict[str, tuple[str, bytes]]:
        f = s.registry_files.c
        with self._tx(write=False) as c:
            rows = c.execute(sa.select(f.path, f.file_key, f.result).where(f.node == node)).all()
        return {r.path: (r.file_key, bytes(r.result)) for r in rows}

    def set_registry_files(self, node: str, files: Mapping[str, tuple[str, bytes] | None]) -> None:
        if not files:
            return
        f = s.registry_files.c
        with self._tx() as c:
            now = self._now() if self.dialect == "sqlite" else c.execute(sa.select(func.now())).scalar_one()
            paths = sorted(files)
            for chunk in chunks(paths, 500):
                c.execute(s.registry_files.delete().where(f.node == node, f.path.in_(chunk)))
            rows = [
                {"node": node, "path": p, "file_key": v[0], "result": v[1], "updated_at": now}
                for p in paths
                if (v := files[p]) is not None
            ]
            if rows:
                c.execute(s.registry_files.insert(), rows)

    def _job(self, row: sa.RowMapping, known: Mapping[str, JobSpec] | None = None) -> JobRow:
        spec = known.get(row["job_id"]) if known else None
        if spec is None or spec.spec_hash() != row["spec_hash"]:
            spec = JobSpec.from_json_dict(json.loads(row["spec_json"]))
        return JobRow(
            job_id=row["job_id"],
            spec=spec,
            spec_hash=row["spec_hash"],
            node=row["node"],
            paused=bool(row["pause_holds"]),  # a pause past its end is over
            paused_reason=row["paused_reason"],
            paused_at=row["paused_at"],
            paused_by=row.get("paused_by"),
            paused_until=row["paused_until"],
            removed_at=row["removed_at"],
            updated_at=row["updated_at"],
        )

    def _jobs_query(self) -> sa.Select[Any]:
        """Whole `jobs` rows and whether each one's pause holds now, by the database's clock
        as the pause queries ask it (`SqlPart._pause_live`), not by this process's."""
        j = s.jobs.c
        holds = sa.and_(j.paused.is_(True), self._pause_live(j.paused_until)).label("pause_holds")
        return sa.select(s.jobs, holds)

    def jobs(self, include_removed: bool = False, known: Mapping[str, JobSpec] | None = None) -> list[JobRow]:
        q = self._jobs_query().order_by(s.jobs.c.job_id)
        if not include_removed:
            q = q.where(s.jobs.c.removed_at.is_(None))
        with self._tx(write=False) as c:
            rows = c.execute(q).mappings().all()
        return [self._job(r, known) for r in rows]

    def get_job(self, job_id: str) -> JobRow | None:
        with self._tx(write=False) as c:
            row = c.execute(self._jobs_query().where(s.jobs.c.job_id == job_id)).mappings().first()
        return self._job(row) if row else None


def spec_json_and_hash(spec: JobSpec) -> tuple[str, str]:
    """`json.dumps(spec.to_json_dict())` and `spec.spec_hash()` (`json_text_and_hash`); the
    text a worker process computed when it validated the spec's file, if the spec holds it."""
    text = spec.take_json()
    if text is not None:
        return text, spec.spec_hash()
    return json_text_and_hash(spec)
