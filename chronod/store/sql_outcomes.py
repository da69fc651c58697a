"""The outcomes part of the run ledger in the SQL store: what became of a claimed attempt
(its processes, its ending, a retry), and taking over or ending the attempts of a node
whose lease is gone. Every write is conditional on the run still running at that attempt
and, when fenced, on the writer's token being a live lease (`SqlPart._lease_live`; on
PostgreSQL a batch goes through `pgbatch` under the same predicate)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import func
from sqlalchemy.engine import Connection

from chronod.core.model import RunState
from chronod.store import pgbatch
from chronod.store import schema as s
from chronod.store.api import Ending
from chronod.store.sqldb import SqlPart, chunks, terminal


class OutcomesSql(SqlPart):
    """`chronod.store.api.Outcomes` over SQL."""

    def _held(self, run_id: str, attempt: int, token: int | None) -> list[Any]:
        """The run is running at this attempt, and (when fenced) held under a live `token`."""
        r = s.runs.c
        cond = [r.run_id == run_id, r.state == RunState.RUNNING, r.attempts == attempt]
        if token is not None:
            cond += [r.token == token, self._lease_live(token)]
        return cond

    def _update_attempt(self, c: Connection, run_id: str, attempt: int, **values: Any) -> None:
        a = s.attempts.c
        c.execute(s.attempts.update().where(a.run_id == run_id, a.attempt == attempt).values(**values))

    def set_processes(self, started: list[tuple[str, int, int, int]], token: int) -> set[str]:
        if not started:
            return set()
        with self._tx() as c:
            if self.dialect == "postgresql" and len({s[0] for s in started}) == len(started) > 1:
                done = pgbatch.set_processes(c, started, token, self._lease_live(pgbatch.token_param()))
                self._rejected_many(c, token, len(started) - len(done))
                return done
            held = self._held_many(c, [(run_id, attempt) for run_id, attempt, _, _ in started], token)
            rows = [
                {"b_run_id": run_id, "b_attempt": attempt, "b_pid": pid, "b_sup": sup}
                for run_id, attempt, pid, sup in started
                if held.get(run_id) == attempt
            ]
            if rows:
                r, a = s.runs.c, s.attempts.c
                where = (
                    r.run_id == sa.bindparam("b_run_id"),
                    r.state == RunState.RUNNING,
                    r.attempts == sa.bindparam("b_attempt"),
                )
                pids: dict[str, Any] = dict(pid=sa.bindparam("b_pid"), supervisor_pid=sa.bindparam("b_sup"))
                c.execute(s.runs.update().where(*where).values(updated_at=self._ts(), **pids), rows)
                keys = (a.run_id == sa.bindparam("b_run_id"), a.attempt == sa.bindparam("b_attempt"))
                c.execute(s.attempts.update().where(*keys).values(**pids), rows)
            self._rejected_many(c, token, len(started) - len(rows))
            return {str(row["b_run_id"]) for row in rows}

    def finish(
        self,
        run_id: str,
        attempt: int,
        state: str,
        *,
        exit_code: int | None,
        signal: int | None,
        output_tail: str | None,
        output_bytes: int,
        error: str | None,
        token: int | None,
        finished_at: datetime | None = None,
    ) -> bool:
        ending = Ending(run_id, attempt, state, exit_code, signal, output_tail, output_bytes, error, finished_at)
        return run_id in self.finish_many([ending], token)

    def finish_many(self, endings: list[Ending], token: int | None) -> set[str]:
        for e in endings:
            terminal(e.state)
        if not endings:
            return set()
        with self._tx() as c:
            if self.dialect == "postgresql" and len({e.run_id for e in endings}) == len(endings) > 1:
                done = pgbatch.finish_many(c, endings, token, self._lease_live(pgbatch.token_param()))
                self._rejected_many(c, token, len(endings) - len(done))
                return done
            held = self._held_many(c, [(e.run_id, e.attempt) for e in endings], token)
            rows = [
                {
                    "b_run_id": e.run_id,
                    "b_attempt": e.attempt,
                    "b_state": e.state,
                    "b_exit_code": e.exit_code,
                    "b_signal": e.signal,
                    "b_output_tail": e.output_tail,
                    "b_output_bytes": e.output_bytes,
                    "b_error": e.error,
                    "b_finished_at": e.finished_at,
                }
                for e in {e.run_id: e for e in endings}.values()
                if held.get(e.run_id) == e.attempt
            ]
            if rows:
                # one statement for the lot (executemany), built once: building an UPDATE
                # per ending was most of the loop's time when a burst of runs ended
                now = self._ts()
                end = func.coalesce(sa.bindparam("b_finished_at", type_=s.UTCDateTime()), now)
                fields = ("state", "exit_code", "signal", "output_tail", "output_bytes", "error")
                values: dict[str, Any] = {f: sa.bindparam(f"b_{f}") for f in fields}
                r, a = s.runs.c, s.attempts.c
                where = (
                    r.run_id == sa.bindparam("b_run_id"),
                    r.state == RunState.RUNNING,
                    r.attempts == sa.bindparam("b_attempt"),
                )
                c.execute(
                    s.runs.update()
                    .where(*where)
                    .values(finished_at=end, next_attempt_at=None, updated_at=now, **values),
                    rows,
                )
                keys = (a.run_id == sa.bindparam("b_run_id"), a.attempt == sa.bindparam("b_attempt"))
                c.execute(s.attempts.update().where(*keys).values(finished_at=end, **values), rows)
            self._rejected_many(c, token, len(endings) - len(rows))
            return {str(row["b_run_id"]) for row in rows}

    def _held_many(self, c: Connection, keys: list[tuple[str, int]], token: int | None) -> dict[str, int]:
        """Of `keys` (run_id, attempt), the runs `running` at that attempt and (when fenced)
        held under a live `token`: run_id -> attempt. Their rows stay locked to the end of
        the transaction (PostgreSQL; a SQLite writer holds the whole database)."""
        if token is not None and not c.execute(sa.select(self._lease_live(token))).scalar():
            return {}
        r = s.runs.c
        wanted = dict(keys)
        held: dict[str, int] = {}
        for part in chunks(sorted(wanted), 1000):
            q = sa.select(r.run_id, r.attempts).where(r.run_id.in_(part), r.state == RunState.RUNNING)
            if token is not None:
                q = q.where(r.token == token)
            for run_id, attempts in c.execute(q.with_for_update()):
                if wanted[run_id] == attempts:
                    held[run_id] = attempts
        return held

    def schedule_retry(
        self,
        run_id: str,
        attempt: int,
        next_attempt_at: datetime,
        *,
        exit_code: int | None,
        signal: int | None,
        error: str | None,
        token: int,
        attempt_state: str = RunState.FAILED,
        output_tail: str | None = None,
        output_bytes: int = 0,
    ) -> bool:
        """`attempt_state` (added) is what the attempt row records: failed or timed_out."""
        with self._tx() as c:
            now = self._ts()
            res = c.execute(
                s.runs.update()
                .where(*self._held(run_id, attempt, token))
                .values(
                    state=RunState.RETRY_WAIT,
                    next_attempt_at=next_attempt_at,
                    exit_code=exit_code,
                    signal=signal,
                    error=error,
                    updated_at=now,
                    output_tail=output_tail,
                    output_bytes=output_bytes,
                )
            )
            if res.rowcount != 1:
                self._rejected(c, token)
                return False
            self._update_attempt(
                c,
                run_id,
                attempt,
                state=attempt_state,
                finished_at=now,
                exit_code=exit_code,
                signal=signal,
                error=error,
                output_tail=output_tail,
                output_bytes=output_bytes,
            )
            return True

    def adopt(self, run_id: str, attempt: int, *, node: str, token: int) -> bool:
        """Added: take over a running attempt whose process still runs (a restarted daemon
        re-attaching to its supervisor). Only when the holder's token is no longer a live
        lease (or is already `token`) and `token` is live for `node`; the run and its
        attempt row then carry the new node and token. Fenced."""
        r = s.runs.c
        holder_gone = sa.or_(r.token == token, r.token.is_(None), ~self._lease_live(r.token))
        with self._tx() as c:
            res = c.execute(
                s.runs.update()
                .where(*self._held(run_id, attempt, None), holder_gone, self._lease_live(token, node))
                .values(node=node, token=token, updated_at=self._ts())
            )
            if res.rowcount != 1:
                self._rejected(c, token)
                return False
            self._update_attempt(c, run_id, attempt, node=node, token=token)
            return True

    def reclaim(
        self,
        run_id: str,
        attempt: int,
        *,
        node: str,
        token: int,
        state: str,
        error: str,
        next_attempt_at: datetime | None = None,
    ) -> bool:
        """Added: end a running attempt whose holder's lease is gone (node died, or a daemon
        restarted without finding the process). `state` is `retry_wait` (a new attempt of an
        idempotent/keyed job, due at `next_attempt_at`, default now) or a terminal state
        (`lost` for unsafe jobs). The attempt row records `lost` with `error`. Fenced on
        `token` being live for `node`; False if the holder is still live or it moved on."""
        r = s.runs.c
        if state != RunState.RETRY_WAIT:
            terminal(state)
        holder_gone = sa.or_(r.token.is_(None), ~self._lease_live(r.token))
        with self._tx() as c:
            now = self._ts()
            values: dict[str, Any] = dict(state=state, error=error, node=node, token=token, updated_at=now)
            if state == RunState.RETRY_WAIT:
                values["next_attempt_at"] = sa.literal(next_attempt_at, s.UTCDateTime()) if next_attempt_at else now
            else:
                values.update(finished_at=now, next_attempt_at=None)
            res = c.execute(
                s.runs.update()
                .where(*self._held(run_id, attempt, None), holder_gone, self._lease_live(token, node))
                .values(**values)
            )
            if res.rowcount != 1:
                self._rejected(c, token)
                return False
            self._update_attempt(c, run_id, attempt, state=RunState.LOST, finished_at=now, error=error)
            return True

    def note_late_outcome(self, run_id: str, attempt: int, text: str) -> bool:
        a, r = s.attempts.c, s.runs.c
        with self._tx() as c:
            row = c.execute(sa.select(a.state, a.error).where(a.run_id == run_id, a.attempt == attempt)).first()
            if row is None or row.state != RunState.LOST or text in (row.error or ""):
                return False
            error = f"{row.error}; {text}" if row.error else text
            c.execute(s.attempts.update().where(a.run_id == run_id, a.attempt == attempt).values(error=error))
            c.execute(
                s.runs.update()
                .where(r.run_id == run_id, r.attempts == attempt, r.state == RunState.LOST)
                .values(error=error, updated_at=self._ts())
            )
            return True
