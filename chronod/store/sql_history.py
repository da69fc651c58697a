"""The history part of the run ledger in the SQL store: reading runs and attempts back,
by node, id, prefix, job and window, and each job's latest run (read only)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

import sqlalchemy as sa

from chronod.core.history import Mark
from chronod.core.model import RunState
from chronod.store import schema as s
from chronod.store.api import Attempt, Run
from chronod.store.sqldb import SqlPart, chunks, sqlite_text

_MARKS_SQL = "SELECT run_id, job_id, job_key, scheduled_at, state, trigger FROM runs WHERE scheduled_at >= ? AND scheduled_at < ?"


class HistorySql(SqlPart):
    """`chronod.store.api.RunHistory` over SQL."""

    def running(self, node: str | None = None) -> list[Run]:
        r = s.runs.c
        q = sa.select(s.runs).where(r.state == RunState.RUNNING).order_by(r.started_at, r.run_id)
        if node is not None:
            q = q.where(r.node == node)
        return self._select_runs(q)

    def run_states(self, run_ids: Iterable[str]) -> dict[str, str]:
        r = s.runs.c
        out: dict[str, str] = {}
        with self._tx(write=False) as c:
            for part in chunks(list(run_ids), 1000):
                out.update((rid, st) for rid, st in c.execute(sa.select(r.run_id, r.state).where(r.run_id.in_(part))))
        return out

    def get_run(self, run_id: str) -> Run | None:
        found = self._select_runs(sa.select(s.runs).where(s.runs.c.run_id == run_id))
        return found[0] if found else None

    def runs_by_prefix(self, prefix: str, limit: int = 10) -> list[Run]:
        r = s.runs.c
        # Run ids are hex (or a manual id): escape LIKE's wildcards all the same.
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        q = sa.select(s.runs).where(r.run_id.like(pattern, escape="\\")).order_by(r.run_id).limit(limit)
        return self._select_runs(q)

    def runs_query(
        self,
        job_id: str | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        states: Iterable[str] | None = None,
        limit: int | None = None,
        newest_first: bool = True,
    ) -> sa.Select[Any]:
        """The SELECT behind `runs()` (exposed so a test can EXPLAIN it)."""
        r = s.runs.c
        q = sa.select(s.runs)
        if job_id is not None:
            q = q.where(r.job_id == job_id)
        if since is not None:
            q = q.where(r.scheduled_at >= since)
        if until is not None:
            q = q.where(r.scheduled_at < until)
        if states is not None:
            q = q.where(r.state.in_(list(states)))
        order = (r.scheduled_at.desc(), r.run_id.desc()) if newest_first else (r.scheduled_at, r.run_id)
        q = q.order_by(*order)
        return q.limit(limit) if limit is not None else q

    def runs(
        self,
        job_id: str | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        states: Iterable[str] | None = None,
        limit: int | None = None,
        newest_first: bool = True,
    ) -> list[Run]:
        """The window is half-open: since <= scheduled_at < until."""
        return self._select_runs(
            self.runs_query(job_id, since=since, until=until, states=states, limit=limit, newest_first=newest_first)
        )

    def run_marks(self, *, since: datetime, until: datetime) -> list[Mark]:
        """Added (chronoctl missed): the identity and state of each run in a window, slim.
        Read through the driver's own cursor, all at once: SQLAlchemy's per-row fetching
        and its per-value time zone conversion cost twice what the rows themselves do over
        the tens of thousands of a fleet's day."""
        new = tuple.__new__
        with self._tx(write=False) as c:
            driver: Any = c.connection.driver_connection
            if self.dialect != "sqlite":
                # the driver gives aware datetimes in the session's zone: make that UTC
                # for this transaction only
                driver.execute("SET LOCAL TIME ZONE 'UTC'")
                cur = driver.execute(_MARKS_SQL.replace("?", "%s"), (since, until))
                return [new(Mark, row) for row in cur.fetchall()]
            # SQLite keeps naive UTC text in one fixed format (schema.UTCDateTime): compare
            # and parse it as text here.
            cur = driver.execute(_MARKS_SQL, (sqlite_text(since), sqlite_text(until)))
            parse = datetime.fromisoformat
            return [new(Mark, (a, b, k, parse(t + "+00:00"), st, tr)) for a, b, k, t, st, tr in cur.fetchall()]

    def attempts(self, run_id: str) -> list[Attempt]:
        a = s.attempts.c
        with self._tx(write=False) as c:
            rows = c.execute(sa.select(s.attempts).where(a.run_id == run_id).order_by(a.attempt)).mappings()
            return [Attempt(**row) for row in rows]

    def last_successes(self, job_ids: Iterable[str], until: datetime) -> dict[str, Run]:
        ids = sorted(set(job_ids))
        if not ids:
            return {}
        r = s.runs.c
        inner = s.runs.alias("latest")
        out: dict[str, Run] = {}
        for chunk in chunks(ids, 400):  # SQLite allows 500 terms in one compound SELECT
            # one index probe per job (job_id, scheduled_at backwards), one round trip per chunk
            wanted = sa.union_all(*(sa.select(sa.literal(i, sa.Text).label("job_id")) for i in chunk)).subquery(
                "wanted"
            )
            latest = (
                sa.select(inner.c.run_id)
                .where(
                    inner.c.job_id == wanted.c.job_id, inner.c.state == RunState.SUCCEEDED, inner.c.scheduled_at < until
                )
                .order_by(inner.c.scheduled_at.desc())
                .limit(1)
                .scalar_subquery()
            )
            q = sa.select(s.runs).where(r.run_id.in_(sa.select(latest).select_from(wanted)))
            out.update((run.job_id, run) for run in self._select_runs(q))
        return out

    def _latest_of_each_job(self, until: datetime, skip: list[str], column: str) -> Any:
        """For the row of `jobs` it sits in: `column` of that job's latest run scheduled
        before `until` whose state is not in `skip` (one index probe, backwards)."""
        j = s.jobs.c
        inner = s.runs.alias("latest")
        where = [inner.c.job_id == j.job_id, inner.c.scheduled_at < until]
        if skip:
            where.append(inner.c.state.not_in(skip))
        return sa.select(inner.c[column]).where(*where).order_by(inner.c.scheduled_at.desc()).limit(1).scalar_subquery()

    def last_runs(self, job_ids: Iterable[str], until: datetime, skip: Iterable[str] = ()) -> dict[str, Run]:
        """Added (the web console's overview): each job's latest run scheduled before
        `until` whose state is not in `skip`: one index probe per job, driven by the jobs
        table (one statement for any number of jobs, compiled once)."""
        ids = sorted(set(job_ids))
        latest = self._latest_of_each_job(until, list(skip), "run_id")
        out: dict[str, Run] = {}
        for chunk in chunks(ids, 900):  # under SQLite's default limit of bound parameters
            # the ids first, then their rows: two index-driven reads whatever the planner
            # thinks of the runs table's size (in one statement PostgreSQL may hash it whole)
            with self._tx(write=False) as c:
                found = [rid for rid in c.execute(sa.select(latest).where(s.jobs.c.job_id.in_(chunk))).scalars() if rid]
            if found:
                runs = self._select_runs(sa.select(s.runs).where(s.runs.c.run_id.in_(found)))
                out.update((run.job_id, run) for run in runs)
        return out

    def last_states(self, job_ids: Iterable[str], until: datetime, skip: Iterable[str] = ()) -> dict[str, str]:
        """Added (the web console's filters): the state of each job's run `last_runs` would
        give, without reading the runs themselves (jobs without one are left out)."""
        ids = sorted(set(job_ids))
        state = self._latest_of_each_job(until, list(skip), "state")
        out: dict[str, str] = {}
        for chunk in chunks(ids, 900):
            with self._tx(write=False) as c:
                rows = c.execute(sa.select(s.jobs.c.job_id, state).where(s.jobs.c.job_id.in_(chunk)))
                out.update((job_id, st) for job_id, st in rows if st is not None)
        return out
