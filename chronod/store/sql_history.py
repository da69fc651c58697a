"""The history part of the run ledger in the SQL store: reading runs and attempts back,
by node, id, prefix, job and window, and each job's latest run (read only)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY

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

    def _wanted(self, job_ids: list[str]) -> tuple[sa.FromClause, sa.ColumnElement[str]]:
        """The job ids asked as a table, and its column of ids: what the reads of each job's
        latest run are driven by (any id: registered, removed or never seen). One bound
        parameter whatever their number (an array on PostgreSQL, JSON text on SQLite), so
        the statement is compiled, and planned, once."""
        if self.dialect == "postgresql":
            ids = sa.func.unnest(sa.literal(job_ids, ARRAY(sa.Text))).table_valued("job_id").render_derived("wanted")
            return ids, ids.c.job_id
        each = sa.func.json_each(sa.literal(json.dumps(job_ids), sa.Text)).table_valued("value").alias("wanted")
        return each, each.c.value

    def last_successes(self, job_ids: Iterable[str], until: datetime) -> dict[str, Run]:
        return self._latest_runs(job_ids, until, state=RunState.SUCCEEDED)

    def _latest_of_each_job(
        self,
        job_id: sa.ColumnElement[str],
        until: datetime,
        column: str,
        *,
        skip: Iterable[str] = (),
        state: str | None = None,
    ) -> Any:
        """For the job id `job_id` of the row it sits in: `column` of that job's latest run
        scheduled before `until`, in `state` when given, whose state is not in `skip` (one
        index probe, backwards)."""
        inner = s.runs.alias("latest")
        where = [inner.c.job_id == job_id, inner.c.scheduled_at < until]
        if state is not None:
            where.append(inner.c.state == state)
        skipped = list(skip)
        if skipped:
            where.append(inner.c.state.not_in(skipped))
        return sa.select(inner.c[column]).where(*where).order_by(inner.c.scheduled_at.desc()).limit(1).scalar_subquery()

    def last_runs(self, job_ids: Iterable[str], until: datetime, skip: Iterable[str] = ()) -> dict[str, Run]:
        """Added (the web console's overview): each job's latest run scheduled before
        `until` whose state is not in `skip`: one index probe per job id asked (registered
        or not: a removed job's history is still its history)."""
        return self._latest_runs(job_ids, until, skip=list(skip))

    def _latest_runs(
        self, job_ids: Iterable[str], until: datetime, *, skip: list[str] | None = None, state: str | None = None
    ) -> dict[str, Run]:
        """Each job's latest run before `until` (in `state`, not in `skip`) by job id."""
        out: dict[str, Run] = {}
        for chunk in chunks(sorted(set(job_ids)), _WANTED_CHUNK):
            # the ids first, then their rows: two index-driven reads whatever the planner
            # thinks of the runs table's size (in one statement PostgreSQL may hash it whole)
            wanted, job_id = self._wanted(chunk)
            latest = self._latest_of_each_job(job_id, until, "run_id", skip=skip or (), state=state)
            with self._tx(write=False) as c:
                found = [rid for rid in c.execute(sa.select(latest).select_from(wanted)).scalars() if rid]
            if found:
                runs = self._select_runs(sa.select(s.runs).where(s.runs.c.run_id.in_(found)))
                out.update((run.job_id, run) for run in runs)
        return out

    def last_states(self, job_ids: Iterable[str], until: datetime, skip: Iterable[str] = ()) -> dict[str, str]:
        """Added (the web console's filters): the state of each job's run `last_runs` would
        give, without reading the runs themselves (jobs without one are left out)."""
        skipped = list(skip)
        out: dict[str, str] = {}
        for chunk in chunks(sorted(set(job_ids)), _WANTED_CHUNK):
            wanted, job_id = self._wanted(chunk)
            state = self._latest_of_each_job(job_id, until, "state", skip=skipped)
            with self._tx(write=False) as c:
                rows = c.execute(sa.select(job_id, state).select_from(wanted))
                out.update((jid, st) for jid, st in rows if st is not None)
        return out


_WANTED_CHUNK = 900  # ids a chunk: its runs are read back with one IN (...) under SQLite's parameter limit
