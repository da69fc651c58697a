"""PostgreSQL: the per-run writes of a batch of runs in one statement, from arrays.

Claims too: the claim's UPDATE of the run rows and the INSERT of their attempt rows go as
one statement (`claim_statement`), so a chunk of claims is one round trip whatever its size.

A node that starts or ends a hundred runs a second wrote each one as two UPDATEs (the run,
its attempt row), one round trip each; on a loaded host every round trip waits its turn
for the database process, and recording endings became most of the loop's time. Here the
batch goes as parallel arrays (`unnest`), the run rows and the attempt rows are updated
by one statement (a data-modifying WITH), and the ids written come back. The conditions
are those of the one-run statements in `chronod.store.sql_outcomes` (the run is running at
this attempt and, when fenced, held under a token that is a live lease); SQLite keeps the
one-run statements (no round trips there).

The lease-live half of the fencing condition is not written here: the caller passes the
store's own predicate (`SqlPart._lease_live` on a `token` bind parameter, built by
`sqldb.lease_live`), and it is compiled into these statements, so that there is one
definition of a live lease for every fenced write.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from chronod.core.model import RunState
from chronod.store import schema as s
from chronod.store.api import Ending

TOKEN = "token"  # the bind parameter the fencing predicate passed in compares the token with


def token_param() -> sa.BindParameter[int]:
    """The writer's token in a fencing predicate built for these statements."""
    return sa.bindparam(TOKEN, type_=sa.BigInteger())


def _held_live(c: Connection, live: sa.ColumnElement[bool]) -> str:
    """The run is held under the writer's token, and that token is a live lease (`live`,
    compiled for this connection: `%(token)s` is the token)."""
    text = str(live.compile(dialect=c.dialect))
    if f"%({TOKEN})s" not in text:
        raise ValueError(f"the fencing predicate does not compare with the {TOKEN!r} parameter: {text}")
    return f"runs.token = %({TOKEN})s AND {text}"


ATTEMPT_COLUMNS = ("run_id", "attempt", "node", "token", "state", "started_at")  # what a claim writes


def attempt_row(run: RowMapping) -> dict[str, Any]:
    """The attempt row a claim writes for a run row it claimed (as RETURNING gave it)."""
    return dict(
        run_id=run["run_id"],
        attempt=run["attempts"],
        node=run["node"],
        token=run["token"],
        state=RunState.RUNNING,
        started_at=run["started_at"],
    )


def claim_statement(update: sa.Update) -> sa.Select[Any]:
    """A claim (`update`: the run rows made running, built and fenced by the caller,
    `OccurrencesSql._claim`) with the insert of the attempt row of every run it claims, as
    one statement (a data-modifying WITH) that returns the claimed run rows. A run the
    update does not claim (held by another node, no longer waiting, a stale token) gets no
    attempt row: the INSERT reads only what the UPDATE returned."""
    done = update.returning(*s.runs.c).cte("claimed")
    att = done.c
    rows = sa.select(att.run_id, att.attempts, att.node, att.token, sa.literal(str(RunState.RUNNING)), att.started_at)
    inserted = s.attempts.insert().from_select(list(ATTEMPT_COLUMNS), rows).cte("claimed_attempts")
    return sa.select(done).add_cte(inserted)


def set_processes(
    c: Connection, started: list[tuple[str, int, int, int]], token: int, live: sa.ColumnElement[bool]
) -> set[str]:
    """Store the process ids of running attempts: (run id, attempt, pid, supervisor pid),
    fenced on `live` (the store's lease-live predicate on `token_param()`)."""
    held = _held_live(c, live)
    sql = f"""
        WITH v AS (
            SELECT * FROM unnest(%(run_id)s::text[], %(attempt)s::integer[], %(pid)s::integer[],
                                 %(supervisor_pid)s::integer[]) AS v(run_id, attempt, pid, supervisor_pid)
        ), done AS (
            UPDATE runs SET pid = v.pid, supervisor_pid = v.supervisor_pid, updated_at = now()
            FROM v WHERE runs.run_id = v.run_id AND runs.state = 'running' AND runs.attempts = v.attempt
            AND {held}
            RETURNING runs.run_id, runs.attempts
        ), att AS (
            UPDATE attempts a SET pid = v.pid, supervisor_pid = v.supervisor_pid
            FROM done JOIN v ON v.run_id = done.run_id
            WHERE a.run_id = done.run_id AND a.attempt = done.attempts
        )
        SELECT run_id FROM done
    """
    params = _columns(started, ("run_id", "attempt", "pid", "supervisor_pid"))
    return set(c.exec_driver_sql(sql, {**params, TOKEN: token}).scalars())


def finish_many(c: Connection, endings: list[Ending], token: int | None, live: sa.ColumnElement[bool]) -> set[str]:
    """Record the outcomes of running attempts, fenced on `live` (the store's lease-live
    predicate on `token_param()`) unless `token` is None."""
    fenced = f"AND {_held_live(c, live)}" if token is not None else ""
    sql = f"""
        WITH v AS (
            SELECT * FROM unnest(%(run_id)s::text[], %(attempt)s::integer[], %(state)s::text[],
                                 %(exit_code)s::integer[], %(signal)s::integer[], %(output_tail)s::text[],
                                 %(output_bytes)s::bigint[], %(error)s::text[], %(finished_at)s::timestamptz[])
                AS v(run_id, attempt, state, exit_code, signal, output_tail, output_bytes, error, finished_at)
        ), done AS (
            UPDATE runs SET state = v.state, exit_code = v.exit_code, signal = v.signal,
                output_tail = v.output_tail, output_bytes = v.output_bytes, error = v.error,
                finished_at = coalesce(v.finished_at, now()), next_attempt_at = NULL, updated_at = now()
            FROM v WHERE runs.run_id = v.run_id AND runs.state = 'running' AND runs.attempts = v.attempt
            {fenced}
            RETURNING runs.run_id, runs.attempts, runs.finished_at
        ), att AS (
            UPDATE attempts a SET state = v.state, finished_at = done.finished_at, exit_code = v.exit_code,
                signal = v.signal, error = v.error, output_tail = v.output_tail, output_bytes = v.output_bytes
            FROM done JOIN v ON v.run_id = done.run_id
            WHERE a.run_id = done.run_id AND a.attempt = done.attempts
        )
        SELECT run_id FROM done
    """
    rows = [
        (
            e.run_id,
            e.attempt,
            e.state,
            e.exit_code,
            e.signal,
            e.output_tail,
            e.output_bytes,
            e.error,
            _aware(e.finished_at),
        )
        for e in endings
    ]
    names = ("run_id", "attempt", "state", "exit_code", "signal", "output_tail", "output_bytes", "error", "finished_at")
    return set(c.exec_driver_sql(sql, {**_columns(rows, names), TOKEN: token}).scalars())


def _columns(rows: list[tuple[Any, ...]], names: tuple[str, ...]) -> dict[str, list[Any]]:
    return {name: [row[i] for row in rows] for i, name in enumerate(names)}


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: chrono stores aware UTC times")
    return value
