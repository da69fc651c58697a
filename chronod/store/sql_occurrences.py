"""The occurrences part of the run ledger in the SQL store: storing occurrences, claiming
them for a node (one run or a concurrency group's, or a whole wake-up's writes at once),
settling those that will not run, and holding or reviving waiting ones. Claims and
settles are fenced (`SqlPart._lease_live`)."""

from __future__ import annotations

import zlib
from datetime import datetime
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection

from chronod.core import policy
from chronod.core.model import RunState, Trigger
from chronod.store import pgbatch
from chronod.store import schema as s
from chronod.store.api import Run
from chronod.store.sqldb import BATCH, RUN_COLUMNS, WAITING, SqlPart, aware, chunks, fenced_node, ids_in, terminal


class OccurrencesSql(SqlPart):
    """`chronod.store.api.Occurrences` over SQL."""

    def insert_runs(self, runs: Iterable[Run]) -> int:
        """Insert many runs (each in its own state) in one transaction with batched
        executemany; existing run ids are left alone. Returns how many were new."""
        # in run id order everywhere: two nodes inserting the same ids then wait for each
        # other in one order, never in a cycle (a deadlock)
        rows = [self._run_row(r) for r in sorted(runs, key=lambda r: r.run_id)]
        if not rows:
            return 0
        # executemany's rowcount is not reliable on psycopg and RETURNING makes it ten times
        # slower there, so count the new ids first; ON CONFLICT still guards against a race.
        new = 0
        with self._tx() as c:
            for chunk in chunks(rows, BATCH):
                ids = [row["run_id"] for row in chunk]
                seen: set[str] = set()
                for part in chunks(ids, 1000):
                    seen.update(c.execute(sa.select(s.runs.c.run_id).where(s.runs.c.run_id.in_(part))).scalars())
                fresh = [row for row in chunk if row["run_id"] not in seen]
                self._insert_rows(c, fresh)
                new += len(fresh)
        return new

    def _insert_rows(self, c: Connection, rows: list[dict[str, Any]]) -> None:
        """Insert run rows, leaving existing run ids alone (unnest on PostgreSQL)."""
        if rows and self.dialect == "postgresql":
            self._insert_runs_unnest(c, rows)
        elif rows:
            c.execute(self._insert(s.runs).on_conflict_do_nothing(index_elements=["run_id"]), rows)

    def _insert_runs_unnest(self, c: Connection, rows: list[dict[str, Any]]) -> None:
        """PostgreSQL: one INSERT ... SELECT FROM unnest(arrays) per batch; executemany
        costs a round of per-statement work per row, ten times slower at 100,000 rows."""
        casts = {s.UTCDateTime: "timestamptz", sa.BigInteger: "bigint", sa.Integer: "integer", sa.Text: "text"}
        cols = list(s.runs.c)
        arrays = ", ".join(f"%({col.name})b::{casts[type(col.type)]}[]" for col in cols)
        names = ", ".join(f'"{col.name}"' for col in cols)
        params = {}
        for col in cols:
            values = [row[col.name] for row in rows]
            if isinstance(col.type, s.UTCDateTime):
                values = [aware(v) for v in values]
            params[col.name] = values
        c.exec_driver_sql(
            f"INSERT INTO runs ({names}) SELECT * FROM unnest({arrays}) ON CONFLICT (run_id) DO NOTHING", params
        )

    def pending(self, job_keys: Iterable[str] | None = None) -> list[Run]:
        r = s.runs.c
        q = sa.select(s.runs).where(r.state.in_(WAITING)).order_by(r.fire_at, r.run_id)
        if job_keys is not None:
            keys = set(job_keys)
            if len(keys) > 500:
                # there is no index on job_key: one pass over the waiting runs, filtered
                # here, beats hundreds of IN (...) scans (24 s at 100,000 jobs)
                return [run for run in self._all_waiting() if run.job_key in keys]
            out: list[Run] = []
            for chunk in chunks(sorted(keys), 500):
                out += self._select_runs(q.where(r.job_key.in_(chunk)))
            return sorted(out, key=lambda x: (x.fire_at, x.run_id))
        return self._select_runs(q)

    def late(self, before: datetime, limit: int) -> tuple[list[Run], datetime | None]:
        late_q, next_q = late_queries(before, limit)
        with self._tx(write=False) as c:
            late = [Run(**row) for row in c.execute(late_q).mappings()]
            upcoming = c.execute(next_q).scalar()
        return late, upcoming

    def pending_soon(self, until: datetime) -> tuple[list[Run], set[str]]:
        """Two reads in one transaction: the waiting runs but the scheduled ones that fire
        after `until` (through the index by state), then the job keys of those."""
        with self._tx(write=False) as c:
            runs = self._fetch_runs(c, f"{_SOON} ORDER BY fire_at, run_id", (until,))
            keys = {k for (k,) in self.database.fetch(c, f"SELECT job_key FROM runs WHERE {_LATER}", (until,))}
        return runs, keys

    def pending_later(self, until: datetime, after: tuple[datetime, str] | None, limit: int) -> list[Run]:
        """Through the partial index of pending runs by fire time (SQLite's planner picks
        the index by state without being told, and sorts every pending run for each page),
        from the page's first fire time: given `until` too, SQLite scanned from `until`,
        every page over all those read before it (17 ms a page of 500 at 80,000 read)."""
        index = " INDEXED BY ix_runs_pending_fire_at" if self.dialect == "sqlite" else ""
        where, params = _LATER, list[Any]([until])
        if after is not None:
            if after[0] > until:  # (then `fire_at > until` follows)
                where, params = _SCHEDULED, []
            where += " AND fire_at >= ? AND (fire_at > ? OR run_id > ?)"
            params += [after[0], after[0], after[1]]
        sql = f"SELECT {RUN_COLUMNS} FROM runs{index} WHERE {where} ORDER BY fire_at, run_id LIMIT {int(limit)}"
        with self._tx(write=False) as c:
            return self._fetch_runs(c, sql, params)

    def _all_waiting(self) -> list[Run]:
        """Every waiting run, in fire order, read through the driver's own cursor: at
        start-up with 100,000 jobs, SQLAlchemy's per-row mapping and its time zone
        conversion of seven datetimes a row cost seconds before READY."""
        with self._tx(write=False) as c:
            return self._fetch_runs(c, f"{_WAITING} ORDER BY fire_at, run_id", ())

    def _fetch_runs(self, c: Connection, sql: str, params: Iterable[Any]) -> list[Run]:
        """`Database.fetch_runs`; `sql` may be only the WHERE clause."""
        if not sql.startswith("SELECT"):
            sql = f"SELECT {RUN_COLUMNS} FROM runs WHERE {sql}"
        return self.database.fetch_runs(c, sql, params)

    def dispatch(self, run_id: str, node: str, token: int, next_run: Run | None) -> Run | None:
        with self._tx() as c:
            claimed = self._claim(c, [run_id], node, token)
            if claimed:
                self._insert_new(c, next_run)
            return claimed[0] if claimed else None

    def commit_wakeup(
        self, inserts: list[Run], settles: list[tuple[str, str, str | None]], claims: list[str], node: str, token: int
    ) -> list[Run]:
        """Everything one wake-up of the loop writes, in ONE transaction: store `inserts`
        (existing run ids are left alone), settle the waiting runs in `settles` (run_id,
        state, error), then claim the runs in `claims` that nobody else holds: state
        running, attempts + 1, a new attempt row. Rows another node has locked are skipped,
        not waited for. Settles and claims are fenced on `token`. Returns the claimed runs."""
        for _, state, _ in settles:
            terminal(state)
        rows = [self._run_row(r) for r in sorted(inserts, key=lambda r: r.run_id)]
        with self._tx() as c:
            self._insert_rows(c, rows)
            self._settle_many(c, settles, node, token)
            return self._claim(c, claims, node, token) if claims else []

    def _settle_many(self, c: Connection, settles: list[tuple[str, str, str | None]], node: str, token: int) -> None:
        """Settle waiting runs with one UPDATE per (state, error), not one per run. A row
        another node has locked is skipped, not waited for: that node is claiming or
        settling it, and two nodes settling each other's rows waited on each other's
        transactions (at 500 occurrences a second the fleet spent its time there)."""
        groups: dict[tuple[str, str | None], list[str]] = {}
        for run_id, state, error in settles:
            groups.setdefault((state, error), []).append(run_id)
        r = s.runs.c
        done = 0
        for (state, error), ids in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1] or "")):
            now = self._ts()
            for part in chunks(sorted(ids), 1000):
                waiting = sa.select(r.run_id).where(ids_in(r.run_id, part, self.dialect), r.state.in_(WAITING))
                free = waiting.with_for_update(skip_locked=True).scalar_subquery()
                update = s.runs.update().where(r.run_id.in_(free), self._lease_live(token, node))
                values = dict(state=state, error=error, finished_at=now, updated_at=now, next_attempt_at=None)
                done += c.execute(update.values(token=token, node=node, **values)).rowcount
        self._rejected_many(c, token, len(settles) - done)

    def _claim(
        self,
        c: Connection,
        run_ids: list[str],
        node: str,
        token: int,
        *,
        started_at: datetime | None = None,
        attempts: int | None = None,
    ) -> list[Run]:
        """Waiting runs -> running under `token`, each with a new attempt row. `started_at`
        and `attempts` (a run started while the database was unreachable) override now and
        attempts + 1."""
        if self.dialect == "postgresql":
            if started_at is None and attempts is None:
                # the loop's claim, at every wake-up that starts anything: one statement
                # built once, its values bound (`_pg_claim`)
                stmt, params = self._pg_claim(), {"ids": run_ids, "node": node, pgbatch.TOKEN: token}
            else:
                stmt, params = (
                    pgbatch.claim_statement(self._claim_update(run_ids, node, token, started_at, attempts)),
                    {},
                )
            rows = c.execute(stmt, params).mappings().all()  # the runs and their attempt rows in one statement
        else:
            rows = (
                c.execute(self._claim_update(run_ids, node, token, started_at, attempts).returning(*s.runs.c))
                .mappings()
                .all()
            )
            if rows:
                c.execute(s.attempts.insert(), [pgbatch.attempt_row(row) for row in rows])
        if not rows:
            self._rejected(c, token)
            return []
        return [Run(**row) for row in rows]

    def _claim_update(
        self,
        run_ids: list[str] | sa.BindParameter[Any],
        node: str | sa.BindParameter[str],
        token: int | sa.BindParameter[int],
        started_at: datetime | None,
        attempts: int | None,
    ) -> sa.Update:
        """The claim's UPDATE of the waiting runs among `run_ids` (values or bound
        parameters), fenced on `token`."""
        r = s.runs.c
        free = (
            sa.select(r.run_id)
            .where(ids_in(r.run_id, run_ids, self.dialect), r.state.in_(WAITING))
            .with_for_update(skip_locked=True)
        )
        now = self._ts()
        return (
            s.runs.update()
            .where(r.run_id.in_(free.scalar_subquery()), self._lease_live(token, node))
            .values(
                state=RunState.RUNNING,
                attempts=attempts if attempts is not None else r.attempts + 1,
                node=node,
                token=token,
                started_at=sa.literal(started_at, s.UTCDateTime()) if started_at else now,
                finished_at=None,
                pid=None,
                supervisor_pid=None,
                exit_code=None,
                signal=None,
                output_tail=None,
                output_bytes=0,
                error=None,
                next_attempt_at=None,
                updated_at=now,
            )
        )

    def _pg_claim(self) -> sa.Select[Any]:
        """PostgreSQL's claim with its run ids, node and token bound (`ids`, `node`,
        `pgbatch.TOKEN`), built once for each fencing predicate: building the statement
        (its values, the WITH's columns, its cache key) was a tenth of a loaded fleet
        node's loop. Kept by the predicate's function, which a test may replace."""
        live = type(self)._lease_live
        stmt = _PG_CLAIMS.get(live)
        if stmt is None:
            ids = sa.bindparam("ids", type_=ARRAY(sa.Text))
            node = sa.bindparam("node", type_=sa.Text)
            stmt = _PG_CLAIMS[live] = pgbatch.claim_statement(
                self._claim_update(ids, node, pgbatch.token_param(), None, None)
            )
        return stmt

    def dispatch_in_group(
        self, run_id: str, node: str, token: int, next_run: Run | None, *, resource: str, limit: int
    ) -> tuple[Run | None, bool]:
        claimed, full = self.dispatch_group([run_id], node, token, [next_run], resource=resource, limit=limit)
        return (claimed[0] if claimed else None), full

    def dispatch_group(
        self, run_ids: list[str], node: str, token: int, next_runs: list[Run | None], *, resource: str, limit: int
    ) -> tuple[list[Run], bool]:
        """`dispatch_in_group` for several runs of one resource in ONE transaction.

        PostgreSQL: an advisory lock per group, held to the end of the transaction,
        serializes the count-then-claim of every node (SQLite writers are serialized by
        BEGIN IMMEDIATE). The first `limit - running` of `run_ids` are claimed (those
        another node holds are skipped). Returns (claimed runs, group_full: some were
        refused for want of a slot). `next_runs` are stored either way so that no job's
        chain of occurrences breaks."""
        with self._tx() as c:
            if self.dialect == "postgresql":
                c.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _group_key(resource)})
            free = max(limit - self._running_in_group(c, resource), 0)
            claimed = self._claim(c, run_ids[:free], node, token) if free else []
            self._insert_rows(c, [self._run_row(r) for r in sorted(filter(None, next_runs), key=lambda r: r.run_id)])
            return claimed, free < len(run_ids)

    def _running_in_group(self, c: Connection, resource: str) -> int:
        """Runs of any job whose spec names `resource`, running on any node."""
        field = (
            "(j.spec_json::jsonb ->> 'resource')"
            if self.dialect == "postgresql"
            else "json_extract(j.spec_json, '$.resource')"
        )
        return int(
            c.execute(
                sa.text(
                    f"SELECT count(*) FROM runs r JOIN jobs j ON j.job_id = r.job_id "
                    f"WHERE r.state = 'running' AND {field} = :res"
                ),
                {"res": resource},
            ).scalar_one()
        )

    def claim_offline(self, run: Run, node: str, token: int) -> Run | None:
        """Record a run this node started while the database was unreachable: store the
        occurrence if it is missing, then claim it at the attempt and start time it really
        had. None if it is no longer waiting (settled meanwhile) or the token is stale.
        A row the job's removal cancelled after the run had started is waiting again: a
        start that read the job removed before it replayed the spool (chronod died while
        the database was unreachable) cancelled an `each` occurrence that ran offline."""
        with self._tx() as c:
            if run.started_at is not None:
                r = s.runs.c
                c.execute(
                    s.runs.update()
                    .where(
                        r.run_id == run.run_id,
                        r.state == RunState.CANCELLED,
                        r.error == policy.REMOVED_FROM_REGISTRY,
                        r.finished_at >= sa.literal(run.started_at, s.UTCDateTime()),
                        self._lease_live(token, node),
                    )
                    .values(state=RunState.PENDING, error=None, finished_at=None)
                )
            waiting = Run(
                **{
                    **run.as_dict(),
                    "state": RunState.PENDING,
                    "attempts": run.attempts - 1,
                    "node": None,
                    "token": None,
                    "started_at": None,
                    "pid": None,
                    "supervisor_pid": None,
                }
            )
            self._insert_new(c, waiting)
            claimed = self._claim(c, [run.run_id], node, token, started_at=run.started_at, attempts=run.attempts)
            return claimed[0] if claimed else None

    def note_held(self, run_ids: Iterable[str], why: str, until: datetime, *, node: str, token: int) -> int:
        """Say on pending rows why they wait (a maintenance window deferred them) and until
        when; claiming or settling them clears it. Fenced on `token` (refused rows are
        counted, as every fenced write's are); returns rows changed."""
        ids = sorted(set(run_ids))
        r = s.runs.c
        done = 0
        with self._tx() as c:
            for part in chunks(ids, 1000):
                update = s.runs.update().where(
                    r.run_id.in_(part), r.state == RunState.PENDING, self._lease_live(token, node)
                )
                done += c.execute(update.values(error=why, next_attempt_at=aware(until))).rowcount
            self._rejected_many(c, token, len(ids) - done)
        return done

    def waiting_retries(self, node: str) -> list[Run]:
        """Runs in retry_wait last held by `node` (a dead node's pending retries), soonest
        due first; one without a due time first of all, on every database."""
        r = s.runs.c
        return self._select_runs(
            sa.select(s.runs)
            .where(r.state == RunState.RETRY_WAIT, r.node == node)
            .order_by(r.next_attempt_at.nulls_first(), r.run_id)
        )

    def settle(
        self,
        run_id: str,
        state: str,
        *,
        error: str | None,
        next_run: Run | None,
        node: str | None = None,
        token: int | None = None,
    ) -> bool:
        """Also accepts a run in retry_wait (a waiting retry can be skipped or settled too)."""
        terminal(state)
        fenced_node(node, token)
        with self._tx() as c:
            if not self._settle(c, run_id, state, error, node, token):
                return False
            self._insert_new(c, next_run)
            return True

    def _settle(
        self, c: Connection, run_id: str, state: str, error: str | None, node: str | None, token: int | None
    ) -> bool:
        r = s.runs.c
        cond = [r.run_id == run_id, r.state.in_(WAITING)]
        if token is not None:
            cond.append(self._lease_live(token, node))
        now = self._ts()
        values: dict[str, Any] = dict(state=state, error=error, finished_at=now, updated_at=now, next_attempt_at=None)
        if token is not None:
            values.update(token=token, node=node)
        if c.execute(s.runs.update().where(*cond).values(**values)).rowcount != 1:
            self._rejected(c, token)
            return False
        return True

    def revive(self, run_ids: Iterable[str]) -> int:
        """Added: occurrences cancelled before they ever started (their job was removed, or
        its schedule changed) become pending again when the job comes back unchanged within
        the same interval; returns how many."""
        ids = list(run_ids)
        if not ids:
            return 0
        r = s.runs.c
        with self._tx() as c:
            return c.execute(
                s.runs.update()
                .where(r.run_id.in_(ids), r.state == RunState.CANCELLED, r.attempts == 0)
                .values(state=RunState.PENDING, error=None, finished_at=None, updated_at=self._ts())
            ).rowcount


_PG_CLAIMS: dict[Any, sa.Select[Any]] = {}  # `_pg_claim`'s statements, by fencing predicate


def _group_key(resource: str) -> int:
    # pg_advisory_xact_lock takes a bigint; keep chrono's groups in their own range.
    return (0x63720000 << 32) | zlib.crc32(resource.encode())


# the reads of waiting runs through the driver (`Database.fetch`): the state is written as a literal,
# which each planner matches to the partial index of pending runs by fire time
_WAITING = f"state IN ('{RunState.PENDING}', '{RunState.RETRY_WAIT}')"
_SCHEDULED = f"state = '{RunState.PENDING}' AND \"trigger\" = '{Trigger.SCHEDULE}'"
_LATER = f"{_SCHEDULED} AND fire_at > ?"
_SOON = f"state = '{RunState.RETRY_WAIT}' OR (state = '{RunState.PENDING}' AND (\"trigger\" != '{Trigger.SCHEDULE}' OR fire_at <= ?))"


def late_queries(before: datetime, limit: int) -> tuple[sa.Select[Any], sa.Select[Any]]:
    """`Store.late`'s two reads: the late occurrences, and the next fire time after
    `before`. Both go through the partial index of pending runs by fire time (the state
    written as a literal, `schema.PENDING_ONLY`, which each planner matches to it)."""
    r = s.runs.c
    mine = sa.and_(s.PENDING_ONLY, r.trigger == Trigger.SCHEDULE, r.job_key == r.job_id)
    held_past = sa.and_(r.next_attempt_at.is_not(None), r.next_attempt_at > before)
    late = (
        sa.select(s.runs)
        .where(mine, r.fire_at <= before, sa.not_(held_past))
        .order_by(r.fire_at, r.run_id)
        .limit(limit)
    )
    return late, sa.select(sa.func.min(r.fire_at)).where(mine, r.fire_at > before)
