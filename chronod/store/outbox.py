"""The notifications outbox and the notifier's state, over an SqlStore's database.

The outbox role (`chronod.store.api.NoticeOutbox`), kept out of `SqlStore`: the notifier
is its only user. It shares the store's database through a public seam, `OutboxHost`
(the store's `Database`: its transactions, dialect and run rows), never the store's
private members. The database does the bookkeeping:

- one row per notice and route, `dedupe_key` UNIQUE, inserted with ON CONFLICT DO
  NOTHING: whichever node (or restarted daemon) computes a notice, one row exists;
- a row is claimed for delivery by one node at a time (`FOR UPDATE SKIP LOCKED` on
  PostgreSQL; SQLite writers are serialized by BEGIN IMMEDIATE), for a limited time, so a
  node that dies mid-delivery leaves it to another after `claimed_until`;
- `sent_at` is written after a successful delivery; a crash between the two sends the
  notice again (at least once).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Protocol

import sqlalchemy as sa

from chronod.core.model import NOTICED_STATES, TERMINAL_STATES, RunState
from chronod.store import schema as s
from chronod.store.api import Run
from chronod.store.sqldb import RUN_COLUMNS, Database, aware

PATIENCE_S = 120.0  # the notifier's writes wait out a burst of chronoctl writes: late is fine, failing is noise

CURSOR = "cursor"
STATES_PER_TX = 1000  # about 25 ms of SQLite's write lock on a loaded machine


@dataclass
class Outgoing:
    """A notice row: `route` says where it goes, `payload` what it says."""

    id: int
    job_id: str
    event: str
    state: str
    run_id: str | None
    dedupe_key: str
    route: dict[str, Any]
    payload: dict[str, Any]
    created_at: datetime
    attempts: int = 0
    sent_at: datetime | None = None
    last_error: str | None = None
    claimed_by: str | None = None


class OutboxHost(Protocol):
    """What the outbox needs of the store it shares a database with (an SqlStore)."""

    @property
    def database(self) -> Database:
        """The store's engine, transactions and run rows."""
        ...

    def jobs_version(self) -> tuple[int, datetime | None]:
        """`chronod.store.api.Definitions.jobs_version`."""
        ...


class Outbox:
    """Notifier storage on the same database as `store` (a chronod.store.sql.SqlStore)."""

    def __init__(self, store: OutboxHost):
        self.store = store
        self.db = store.database

    # --- job definitions, cheaply ----------------------------------------------------------
    def jobs_version(self) -> tuple[int, datetime | None]:
        """(count, newest updated_at) of the jobs table: changes whenever a definition, a
        removal or a pause does, so the notifier re-reads definitions only then."""
        return self.store.jobs_version()

    # --- notifier state -----------------------------------------------------------------
    def get_state(self, name: str) -> dict[str, Any]:
        """The JSON state kept under `name` ({} when none)."""
        t = s.notify_state.c
        with self.db.tx(write=False) as c:
            text = c.execute(sa.select(t.state_json).where(t.name == name)).scalar()
        return json.loads(text) if text else {}

    def get_states(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """State per name for many names at once (missing names are left out)."""
        t, names, out = s.notify_state.c, list(names), {}
        with self.db.tx(write=False) as c:
            for i in range(0, len(names), 500):
                for row in c.execute(sa.select(t.name, t.state_json).where(t.name.in_(names[i : i + 500]))):
                    out[row.name] = json.loads(row.state_json)
        return out

    def set_states(self, states: dict[str, dict[str, Any]], now: datetime) -> None:
        """Replace the state kept under each name, in the order given, STATES_PER_TX names a
        transaction: the notifier's first round over 100,000 jobs held SQLite's one write
        lock for 2.6 s in a single transaction, and every write of the loop waited for it
        (the `@every 1s` job beside them started late or skipped). A caller whose names
        must be saved only after others puts them last (the notifier's cursor)."""
        if self.db.dialect == "postgresql":
            # one statement from arrays per transaction: the driver's executemany is one
            # statement per name, and a fleet's deciding node saves a state for most ended
            # runs (at 3,000 endings a second, that round trip was most of this write). The
            # arrays go in binary: in text the driver escapes every quote of every JSON
            # text in Python (13 ms of CPU for 1,000 states against 0.4; executemany 6.7).
            names, texts = list(states), [json.dumps(v, sort_keys=True, default=str) for v in states.values()]
            at = aware(now)
            for i in range(0, len(names), STATES_PER_TX):
                with self.db.tx(patience_s=PATIENCE_S) as c:
                    c.exec_driver_sql(_SET_STATES_PG, (at, names[i : i + STATES_PER_TX], texts[i : i + STATES_PER_TX]))
            return
        rows = [
            dict(name=k, state_json=json.dumps(v, sort_keys=True, default=str), updated_at=now)
            for k, v in states.items()
        ]
        ins = self.db.insert(s.notify_state)
        stmt = ins.on_conflict_do_update(
            index_elements=["name"], set_=dict(state_json=ins.excluded.state_json, updated_at=ins.excluded.updated_at)
        )
        for i in range(0, len(rows), STATES_PER_TX):
            with self.db.tx(patience_s=PATIENCE_S) as c:
                c.execute(stmt, rows[i : i + STATES_PER_TX])

    # --- what changed -------------------------------------------------------------------
    def changed_run_keys(self, since: datetime, until: datetime) -> list[tuple[str, datetime]]:
        """(run id, updated_at) of the runs whose row changed in [since, until) that ended
        in a state the notifier reads (`NOTICED_STATES`), oldest first: two narrow columns,
        so that a reader can tell what it has already read without reading whole rows
        again. Through the driver (`Database.fetch`): the notifier reads 10 keys or more
        for each ended run (its overlap), and SQLAlchemy's row and its time conversion for
        each were most of this read's CPU."""
        with self.db.tx(write=False) as c:
            rows = self.db.fetch(c, _CHANGED_RUN_KEYS, (since, until))
        if self.db.dialect == "postgresql":
            return [(run_id, at) for run_id, at in rows]  # aware UTC (`Database.fetch`)
        parse = datetime.fromisoformat
        return [(run_id, parse(at + "+00:00")) for run_id, at in rows]  # SQLite's naive UTC text

    def terminal_runs(self, run_ids: Iterable[str]) -> list[Run]:
        """The runs among `run_ids` that are in a terminal state, in (updated_at, run id) order."""
        ids, out = sorted(set(run_ids)), []
        # Through the driver (`Database.fetch_runs`): SQLAlchemy's mapping of each row was
        # most of this read's CPU, and the deciding notifier reads the whole row of each
        # run that ends anywhere in the fleet (`changed_run_keys`).
        with self.db.tx(write=False) as c:
            if self.db.dialect == "postgresql":
                # one array parameter: an IN list of 500 ids was converted by the driver
                # afresh for each statement (41 ms of CPU against 36 to read 1,500 ended runs)
                out = self.db.fetch_runs(c, f"{_TERMINAL_RUNS} run_id = ANY(?)", (ids,))
            else:
                for i in range(0, len(ids), 500):
                    part = ids[i : i + 500]
                    out += self.db.fetch_runs(c, f"{_TERMINAL_RUNS} run_id IN ({', '.join('?' * len(part))})", part)
        return sorted(out, key=_change_order)

    def waiting_keys(self) -> set[str]:
        """Job keys with a pending, running or retrying run (the chain is alive)."""
        r = s.runs.c
        with self.db.tx(write=False) as c:
            return set(
                c.execute(
                    sa.select(r.job_key)
                    .where(r.state.in_((RunState.PENDING, RunState.RUNNING, RunState.RETRY_WAIT)))
                    .distinct()
                ).scalars()
            )

    def latest_runs(self) -> dict[str, tuple[str, datetime]]:
        """job_id -> (run id, scheduled_at) of its latest scheduled run."""
        r = s.runs.c
        latest = sa.select(r.job_id, sa.func.max(r.scheduled_at).label("at")).group_by(r.job_id).subquery()
        q = sa.select(r.job_id, r.run_id, r.scheduled_at).join(
            latest, sa.and_(r.job_id == latest.c.job_id, r.scheduled_at == latest.c.at)
        )
        with self.db.tx(write=False) as c:
            return {row.job_id: (row.run_id, row.scheduled_at) for row in c.execute(q)}

    def first_seen(self) -> dict[str, datetime]:
        """job_id -> scheduled_at of its earliest run (when the history starts)."""
        r = s.runs.c
        with self.db.tx(write=False) as c:
            rows = c.execute(sa.select(r.job_id, sa.func.min(r.scheduled_at)).group_by(r.job_id))
            return {job_id: at for job_id, at in rows}

    def last_successes(self, job_ids: Iterable[str]) -> dict[str, datetime]:
        """job_id -> finish time of its latest success."""
        r, ids, out = s.runs.c, list(job_ids), {}
        with self.db.tx(write=False) as c:
            for i in range(0, len(ids), 500):
                q = (
                    sa.select(r.job_id, sa.func.max(sa.func.coalesce(r.finished_at, r.scheduled_at)))
                    .where(r.job_id.in_(ids[i : i + 500]), r.state == RunState.SUCCEEDED)
                    .group_by(r.job_id)
                )
                out.update({job_id: at for job_id, at in c.execute(q)})
        return out

    # --- the outbox -----------------------------------------------------------------------
    def add(self, rows: Iterable[dict[str, Any]], now: datetime) -> int:
        """Insert notice rows (keys: job_id, event, state, run_id, dedupe_key, route,
        payload); rows whose dedupe key exists are ignored. Returns how many were new."""
        new = 0
        with self.db.tx(patience_s=PATIENCE_S) as c:
            for row in rows:
                values = dict(
                    job_id=row["job_id"],
                    event=row["event"],
                    state=row["state"],
                    run_id=row.get("run_id"),
                    dedupe_key=row["dedupe_key"],
                    route_json=json.dumps(row["route"], sort_keys=True),
                    payload_json=json.dumps(row["payload"], sort_keys=True, default=str),
                    created_at=now,
                    attempts=0,
                )
                stmt = self.db.insert(s.notifications).values(**values)
                stmt = stmt.on_conflict_do_nothing(index_elements=["dedupe_key"])
                new += c.execute(stmt.returning(s.notifications.c.id)).first() is not None
        return new

    def claim(
        self, node: str, now: datetime, *, limit: int = 20, hold_s: float = 300, skip_jobs: Iterable[str] = ()
    ) -> list[Outgoing]:
        """Take up to `limit` unsent rows that are due and not held by a live claim, none
        of the jobs in `skip_jobs` (their delivery lane is full)."""
        n = s.notifications.c
        free = sa.and_(
            n.sent_at.is_(None),
            sa.or_(n.claimed_until.is_(None), n.claimed_until < now),
            sa.or_(n.next_try_at.is_(None), n.next_try_at <= now),
        )
        skip = sorted(set(skip_jobs))
        where = sa.and_(free, n.job_id.notin_(skip)) if skip else free
        pick = sa.select(n.id).where(where).order_by(n.id).limit(limit)
        if self.db.dialect == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        with self.db.tx(patience_s=PATIENCE_S) as c:
            ids = list(c.execute(pick).scalars())
            if not ids:
                return []
            c.execute(
                s.notifications.update()
                .where(n.id.in_(ids), free)
                .values(claimed_by=node, claimed_until=now + timedelta(seconds=hold_s))
            )
            rows = (
                c.execute(sa.select(s.notifications).where(n.id.in_(ids), n.claimed_by == node).order_by(n.id))
                .mappings()
                .all()
            )
        return [_outgoing(r) for r in rows]

    def release_claims(self, node: str) -> int:
        """Free the rows a previous process of `node` claimed and did not finish (it is dead:
        its lease passed to us); they are sent again, at least once."""
        n = s.notifications.c
        with self.db.tx(patience_s=PATIENCE_S) as c:
            return int(
                c.execute(
                    s.notifications.update()
                    .where(n.claimed_by == node, n.sent_at.is_(None))
                    .values(claimed_by=None, claimed_until=None)
                ).rowcount
            )

    def release(self, notice_ids: Iterable[int], node: str) -> None:
        """Give back rows this node claimed and will not deliver now: they are free at once."""
        ids = list(notice_ids)
        n = s.notifications.c
        with self.db.tx() as c:
            c.execute(
                s.notifications.update()
                .where(n.id.in_(ids), n.claimed_by == node, n.sent_at.is_(None))
                .values(claimed_by=None, claimed_until=None)
            )

    def mark_sent(self, notice_id: int, node: str, now: datetime) -> bool:
        """Record a delivery; False when the claim was lost meanwhile (someone else sends)."""
        n = s.notifications.c
        with self.db.tx(patience_s=PATIENCE_S) as c:
            res = c.execute(
                s.notifications.update()
                .where(n.id == notice_id, n.claimed_by == node, n.sent_at.is_(None))
                .values(sent_at=now, attempts=n.attempts + 1, last_error=None, claimed_until=None)
            )
            return bool(res.rowcount == 1)

    def mark_failed(self, notice_id: int, node: str, error: str, retry_at: datetime) -> None:
        """Record a failed delivery and release the row for a new try at `retry_at`."""
        n = s.notifications.c
        with self.db.tx(patience_s=PATIENCE_S) as c:
            c.execute(
                s.notifications.update()
                .where(n.id == notice_id, n.claimed_by == node, n.sent_at.is_(None))
                .values(
                    attempts=n.attempts + 1,
                    last_error=error[:2000],
                    claimed_by=None,
                    claimed_until=None,
                    next_try_at=retry_at,
                )
            )

    def notices(self, job_id: str | None = None) -> list[Outgoing]:
        """Every row (optionally of one job), oldest first: for status and tests."""
        n = s.notifications.c
        q = sa.select(s.notifications).order_by(n.id)
        if job_id is not None:
            q = q.where(n.job_id == job_id)
        with self.db.tx(write=False) as c:
            return [_outgoing(r) for r in c.execute(q).mappings().all()]


_NEVER = datetime.min.replace(tzinfo=timezone.utc)


_SET_STATES_PG = (
    "INSERT INTO notify_state (name, state_json, updated_at) SELECT n, j, %b FROM unnest(%b::text[], %b::text[]) AS u(n, j) "
    "ON CONFLICT (name) DO UPDATE SET state_json = excluded.state_json, updated_at = excluded.updated_at"
)
_TERMINAL = ", ".join(repr(str(x)) for x in TERMINAL_STATES)  # the terminal states as SQL literals
_NOTICED = ", ".join(repr(str(x)) for x in NOTICED_STATES)
_CHANGED_RUN_KEYS = (
    f"SELECT run_id, updated_at FROM runs WHERE state IN ({_NOTICED}) AND updated_at >= ? AND updated_at < ? "
    "ORDER BY updated_at, run_id"
)
_TERMINAL_RUNS = f"SELECT {RUN_COLUMNS} FROM runs WHERE state IN ({_TERMINAL}) AND"


def _change_order(run: Run) -> tuple[datetime, str]:
    return run.updated_at or _NEVER, run.run_id


def _outgoing(row: Any) -> Outgoing:
    return Outgoing(
        id=row["id"],
        job_id=row["job_id"],
        event=row["event"],
        state=row["state"],
        run_id=row["run_id"],
        dedupe_key=row["dedupe_key"],
        route=json.loads(row["route_json"]),
        payload=json.loads(row["payload_json"]),
        created_at=row["created_at"],
        attempts=row["attempts"],
        sent_at=row["sent_at"],
        last_error=row["last_error"],
        claimed_by=row["claimed_by"],
    )
