"""SqlStore: the store interface (chronod.store.api) over SQLAlchemy Core, SQLite and PostgreSQL.

One code path serves both databases; the differences are few and named here:

- Lease times. PostgreSQL compares leases with its own `now()`; on SQLite the single
  node's clock is the database clock (`now` argument, default the real UTC clock).
- Fencing tokens. `nextval('fencing_token_seq')` on PostgreSQL; an upsert on the one-row
  `fencing_token` table on SQLite, inside the write transaction.
- Locking. PostgreSQL claims with `SELECT ... FOR UPDATE SKIP LOCKED`; SQLite writes
  start with `BEGIN IMMEDIATE`, so writers queue (up to the busy timeout) instead of
  failing half-way, and migrations hold that write lock for their whole run.

Every daemon write about a run carries the writer's token and is conditional, in its
WHERE clause, on that token being the current token of a live lease (`_lease_live`).
"""

from __future__ import annotations

import json
import re
import threading
import time
import zlib
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import sqlalchemy as sa
from sqlalchemy import event, exc, func
from sqlalchemy.engine import Connection, make_url

from chronod.core.history import Mark
from chronod.core.model import TERMINAL_STATES, JobSpec, RunState
from chronod.fsutil import same_process
from chronod.private import create_db_file
from chronod.store import pgbatch
from chronod.store import schema as s
from chronod.store.api import (
    Attempt,
    Ending,
    JobRow,
    Node,
    NodeConflict,
    PauseRow,
    Pruned,
    Request,
    Run,
    SchemaTooNew,
    SchemaTooOld,
    StoreError,
)
from chronod.store.backfills import BackfillStore

WAITING = (RunState.PENDING, RunState.RETRY_WAIT)
DAEMON_BUSY_TIMEOUT_S = 15.0  # the loop waits this long for SQLite's write lock (the watchdog pings at 30 s)
CLI_BUSY_TIMEOUT_S = 30.0  # chronoctl's writes wait longer: a burst of 150 at once all pass
BATCH = 5000
_ADVISORY_LOCK_KEY = 0x6368726F6E6F  # "chrono": serializes migrations across a fleet
_ALEMBIC_LOCK = threading.Lock()  # alembic keeps its running context in module globals
_RUN_FIELDS = tuple(Run.__dataclass_fields__)
_MARKS_SQL = "SELECT run_id, job_id, job_key, scheduled_at, state, trigger FROM runs WHERE scheduled_at >= ? AND scheduled_at < ?"
_ATTEMPT_FIELDS = tuple(Attempt.__dataclass_fields__)


def normalize_url(url: str) -> str:
    """A plain path becomes `sqlite:///<absolute path>`; `postgresql://` gets the psycopg 3 driver."""
    if "://" not in url:
        return "sqlite:///" + str(Path(url).expanduser().resolve())
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


_QUERY_PASSWORD = re.compile(r"([?&](?:password|passfile|sslpassword)=)[^&]*", re.IGNORECASE)


def mask_url(url: str) -> str:
    """The URL with any password replaced by `***` (safe for logs, errors and --json).

    The user information runs to the *last* '@' before the host: a password with an '@'
    that is not percent-encoded (`u:Sec@ret@host`) is hidden whole, where the driver
    would read `Sec` as the password and `ret@host` as the host. Passwords given as query
    parameters are hidden too."""
    try:
        text = normalize_url(url)
    except Exception:
        return "<unparseable database URL>"
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    authority, slash, tail = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not at and "@" in tail:  # a password with '/' and '@' in it: hide up to the last '@'
        userinfo, at, host = rest.rpartition("@")
        authority, slash, tail = rest, "", ""
        host, slash, tail = host.partition("/")
    if at:
        user = userinfo.partition(":")[0]
        authority = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    return _QUERY_PASSWORD.sub(r"\1***", f"{scheme}://{authority}{slash}{tail}")


def ambiguous_password(url: str) -> bool:
    """Whether the URL's password holds an '@' that is not percent-encoded (the driver
    would split the URL at the first one and try a host named after the rest)."""
    scheme, sep, rest = url.partition("://")
    return bool(sep) and rest.split("/", 1)[0].count("@") > 1


def migrations_dir() -> Path:
    """The alembic environment: `chronod/_migrate` in an installed chrono (setup.py maps the
    repository's `migrate/` there at build time), `migrate/` beside the package in a checkout."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "_migrate"
    return installed if installed.is_dir() else package.parent / "migrate"


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class SqlStore(BackfillStore):
    """The store over one SQLAlchemy engine; safe to share between a daemon's threads.

    `now` is the clock SQLite leases and timestamps use (PostgreSQL uses its own `now()`
    for leases); it must return aware UTC datetimes.
    """

    def __init__(
        self, url: str, *, now: Callable[[], datetime] | None = None, busy_timeout_s: float = DAEMON_BUSY_TIMEOUT_S
    ):
        self.url_safe = mask_url(url)
        self.busy_timeout_s = busy_timeout_s
        if ambiguous_password(url):
            raise StoreError(
                f"database {self.url_safe}: the password holds an '@'; write it as %40, or leave the "
                "password out of the URL and set PGPASSWORD or a ~/.pgpass line"
            )
        try:
            parsed = make_url(normalize_url(url))
        except Exception:
            raise StoreError(f"cannot parse the database URL {self.url_safe}") from None
        self._password = parsed.password
        self.dialect = (
            "postgresql" if parsed.get_backend_name() in ("postgresql", "postgres") else parsed.get_backend_name()
        )
        if self.dialect not in ("sqlite", "postgresql"):
            raise StoreError(f"unsupported database {self.url_safe}: use an SQLite path or a postgresql:// URL")
        self._now = now or _utcnow
        self.stale_rejections = 0
        self._lock = threading.Lock()
        if self.dialect == "sqlite" and parsed.database not in (None, "", ":memory:"):
            folder = Path(parsed.database).parent
            try:
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(
                    f"cannot create {folder} for the database {self.url_safe}: {e.strerror or e}"
                ) from None
            create_db_file(Path(parsed.database))  # 0600 before SQLite makes it 0644
        try:
            self.engine = self._create_engine(parsed)
        except exc.SQLAlchemyError as e:
            raise self._error(e) from None

    # --- plumbing ---------------------------------------------------------------------
    def _create_engine(self, parsed: sa.URL) -> sa.Engine:
        if self.dialect == "postgresql":
            connect_args = {} if "connect_timeout" in parsed.query else {"connect_timeout": 10}
            # No pre-ping: it costs a round trip per transaction (8% of a busy node's loop).
            # A connection that died with the server fails its first statement instead; the
            # daemon treats that like any outage (offline, retry) and the pool, seeing a
            # disconnect, drops every pooled connection at once.
            return sa.create_engine(parsed, pool_size=5, max_overflow=5, connect_args=connect_args)
        engine = sa.create_engine(parsed, connect_args={"timeout": self.busy_timeout_s})
        event.listen(engine, "connect", _sqlite_on_connect(self.busy_timeout_s))
        event.listen(engine, "begin", _sqlite_on_begin(self.busy_timeout_s))
        return engine

    def _error(self, e: BaseException) -> StoreError:
        orig = getattr(e, "orig", None) or e
        reason = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
        if self._password:
            reason = reason.replace(self._password, "***")
        return StoreError(f"database {self.url_safe}: {reason}")

    @contextmanager
    def _tx(self, write: bool = True, patience_s: float | None = None) -> Iterator[Connection]:
        """One transaction; SQLite writers take the write lock up front (BEGIN IMMEDIATE),
        waiting for it up to the busy timeout, or `patience_s` (a background thread's
        writes, which nothing waits on, outwait a burst of chronoctl writes)."""
        try:
            with self.engine.connect() as conn:
                if write:
                    conn.execution_options(chrono_write=True, chrono_patience=patience_s or self.busy_timeout_s)
                with conn.begin():
                    yield conn
        except exc.SQLAlchemyError as e:
            raise self._error(e) from None

    def _insert(self, table: sa.Table) -> Any:
        """The dialect's INSERT (both have on_conflict_do_nothing)."""
        from sqlalchemy.dialects import postgresql, sqlite

        return postgresql.insert(table) if self.dialect == "postgresql" else sqlite.insert(table)

    def _now_sql(self) -> sa.ColumnElement[datetime]:
        """The lease clock as SQL: `now()` on PostgreSQL, the node's clock on SQLite."""
        if self.dialect == "postgresql":
            return func.now()
        return sa.literal(self._now(), s.UTCDateTime())

    def _now_plus(self, seconds: float) -> sa.ColumnElement[datetime]:
        if self.dialect == "postgresql":
            return func.now() + sa.literal(timedelta(seconds=seconds), sa.Interval())
        return sa.literal(self._now() + timedelta(seconds=seconds), s.UTCDateTime())

    def _ts(self) -> sa.ColumnElement[datetime]:
        """A write timestamp: one value per call, so started_at and updated_at agree."""
        if self.dialect == "postgresql":
            return func.now()
        return sa.literal(self._now(), s.UTCDateTime())

    def _lease_live(self, token: int | sa.ColumnElement[Any] | None, node: str | None = None) -> sa.Exists:
        """EXISTS a node holding `token` (by name too when given) with an unexpired lease."""
        n = s.nodes.c
        cond = [n.token == token, n.lease_expires_at > self._now_sql(), n.stopped_at.is_(None)]
        if node is not None:
            cond.append(n.name == node)
        return sa.exists().where(*cond)

    def _rejected(self, conn: Connection, token: int | None) -> None:
        """Count a write refused because its token is no longer a live lease."""
        if token is None:
            return
        if not conn.execute(sa.select(self._lease_live(token))).scalar():
            with self._lock:
                self.stale_rejections += 1

    def _rejected_many(self, conn: Connection, token: int | None, refused: int) -> None:
        """Count `refused` writes of one batch if its token is no longer a live lease."""
        if token is None or refused <= 0:
            return
        if not conn.execute(sa.select(self._lease_live(token))).scalar():
            with self._lock:
                self.stale_rejections += refused

    # --- schema -----------------------------------------------------------------------
    def schema_revision(self) -> str | None:
        with self._tx(write=False) as c:
            if not sa.inspect(c).has_table("alembic_version"):
                return None
            return c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()

    def check_schema(self) -> None:
        rev = self.schema_revision()
        if rev == s.HEAD_REVISION:
            return
        if rev is None or rev in s.REVISIONS:
            raise SchemaTooOld(
                f"the database {self.url_safe} is at schema revision {rev or 'none'}, this chrono "
                f"needs {s.HEAD_REVISION}: run `chronoctl db upgrade --db {self.url_safe}`"
            )
        raise SchemaTooNew(
            f"the database {self.url_safe} is at schema revision {rev}, newer than this chrono "
            f"knows ({s.HEAD_REVISION}): this chrono is older than the database; upgrade chrono on this host"
        )

    def upgrade(self) -> None:
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(migrations_dir()))
        cfg.set_main_option("path_separator", "os")
        try:
            with _ALEMBIC_LOCK, self.engine.connect() as conn:
                if self.dialect == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_LOCK_KEY})
                    conn.commit()
                else:
                    conn.execution_options(chrono_write=True)
                try:
                    cfg.attributes["connection"] = conn
                    command.upgrade(cfg, "head")
                    conn.commit()
                finally:
                    if self.dialect == "postgresql":
                        conn.rollback()
                        conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_LOCK_KEY})
                        conn.commit()
        except exc.SQLAlchemyError as e:
            raise self._error(e) from None

    def close(self) -> None:
        self.engine.dispose()

    # --- nodes and leases -------------------------------------------------------------
    def acquire_node(
        self, name: str, *, pid: int, hostname: str, boot_id: str, ttl_s: float, pid_start: int | None = None
    ) -> int:
        with self._tx() as c:
            self._refuse_live_holders(c, name, pid=pid, hostname=hostname, boot_id=boot_id)
            token = self._next_token(c)
            now = self._ts()
            values = dict(
                token=token,
                pid=pid,
                pid_start=pid_start,
                hostname=hostname,
                boot_id=boot_id,
                started_at=now,
                heartbeat_at=now,
                lease_expires_at=self._now_plus(ttl_s),
                stopped_at=None,
            )
            stmt = self._insert(s.nodes).values(name=name, info_json="{}", **values)
            c.execute(stmt.on_conflict_do_update(index_elements=["name"], set_=values))
            return token

    def _refuse_live_holders(self, c: Connection, name: str, *, pid: int, hostname: str, boot_id: str) -> None:
        """NodeConflict when a live lease belongs to another process that may still be running.

        SQLite: any other live node. PostgreSQL: another process under the same node name
        (different names are a fleet). A holder on this host is dead when its boot id
        differs or its process is gone (`fsutil.same_process`: pid and start time, a zombie is
        dead); a holder on another host is trusted until its lease ends.
        """
        n = s.nodes.c
        q = sa.select(s.nodes).where(n.lease_expires_at > self._now_sql(), n.stopped_at.is_(None))
        if self.dialect == "postgresql":
            q = q.where(n.name == name)
        for row in c.execute(q).mappings():
            if row["hostname"] == hostname and row["pid"] == pid and row["name"] == name:
                continue
            if row["hostname"] == hostname and (
                row["boot_id"] != boot_id or not same_process(row["pid"], row["pid_start"])
            ):
                continue
            raise NodeConflict(self._conflict_message(row))

    def _conflict_message(self, row: sa.RowMapping) -> str:
        since = row["started_at"].isoformat()
        if self.dialect == "sqlite":
            return (
                f"another chronod (pid {row['pid']}, node {row['name']}) is using this database since "
                f"{since} (host {row['hostname']}); SQLite supports one node: stop it, or use PostgreSQL "
                f"for a fleet"
            )
        return (
            f"another chronod (pid {row['pid']} on host {row['hostname']}) holds node name {row['name']!r} "
            f"since {since}, lease until {row['lease_expires_at'].isoformat()}: stop it, or give this "
            f"one another --node name"
        )

    def _next_token(self, c: Connection) -> int:
        if self.dialect == "postgresql":
            return int(c.execute(sa.select(s.fencing_token_seq.next_value())).scalar_one())
        t = s.fencing_token
        stmt = self._insert(t).values(id=1, value=1)
        stmt = stmt.on_conflict_do_update(index_elements=["id"], set_={"value": t.c.value + 1})
        return int(c.execute(stmt.returning(t.c.value)).scalar_one())

    def renew_lease(self, name: str, token: int, ttl_s: float) -> bool:
        n = s.nodes.c
        with self._tx() as c:
            res = c.execute(
                s.nodes.update()
                .where(n.name == name, n.token == token, n.lease_expires_at > self._now_sql(), n.stopped_at.is_(None))
                .values(heartbeat_at=self._ts(), lease_expires_at=self._now_plus(ttl_s))
            )
            return res.rowcount == 1

    def release_node(self, name: str, token: int) -> None:
        n = s.nodes.c
        with self._tx() as c:
            now = self._ts()
            c.execute(
                s.nodes.update().where(n.name == name, n.token == token).values(stopped_at=now, lease_expires_at=now)
            )

    def set_node_info(self, name: str, token: int, info: dict[str, Any] | str) -> None:
        n = s.nodes.c
        with self._tx() as c:
            c.execute(
                s.nodes.update()
                .where(n.name == name, n.token == token)
                .values(info_json=info if isinstance(info, str) else json.dumps(info, sort_keys=True, default=str))
            )

    def nodes(self) -> list[Node]:
        with self._tx(write=False) as c:
            rows = c.execute(sa.select(s.nodes).order_by(s.nodes.c.heartbeat_at.desc())).mappings().all()
        return [_node(r) for r in rows]

    def live_nodes(self) -> list[tuple[str, int]]:
        n = s.nodes.c
        with self._tx(write=False) as c:
            return [
                tuple(r)
                for r in c.execute(
                    sa.select(n.name, n.token)
                    .where(n.lease_expires_at > self._now_sql(), n.stopped_at.is_(None))
                    .order_by(n.name)
                )
            ]

    def expired_nodes(self) -> list[Node]:
        n = s.nodes.c
        with self._tx(write=False) as c:
            rows = (
                c.execute(
                    sa.select(s.nodes)
                    .where(n.lease_expires_at <= self._now_sql(), n.stopped_at.is_(None))
                    .order_by(n.name)
                )
                .mappings()
                .all()
            )
        return [_node(r) for r in rows]

    # --- job definitions ----------------------------------------------------------------
    def sync_jobs(self, node: str, specs: Iterable[JobSpec]) -> None:
        j = s.jobs.c
        wanted = {spec.id: spec for spec in specs}
        # Read what is stored outside the write transaction: on SQLite a writer holds the
        # database's one write lock, and a reload of 100,000 unchanged jobs (which writes
        # nothing) must not hold it against the loop's claims while it reads them all.
        with self._tx(write=False) as c:
            stored = {r.job_id: r for r in c.execute(sa.select(j.job_id, j.spec_hash, j.node, j.removed_at))}
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
            at = _bound(s.job_known.c.known_from, c, now)
            mark = "?" if self.dialect == "sqlite" else "%s"
            for chunk in _chunks(arrived, BATCH):
                c.exec_driver_sql(
                    f"INSERT INTO job_known (job_id, known_from, known_until) VALUES ({mark}, {mark}, NULL) "
                    "ON CONFLICT (job_id, known_from) DO UPDATE SET known_until = NULL",
                    [(job_id, at) for job_id in chunk],
                )
            if rows:
                paused = _bound(s.jobs.c.paused, c, False)
                for chunk in _chunks(rows, BATCH):
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
            for chunk in _chunks(gone, 500):
                c.execute(s.jobs.update().where(j.job_id.in_(chunk)).values(removed_at=now, updated_at=now))
                k = s.job_known.c
                c.execute(
                    s.job_known.update().where(k.job_id.in_(chunk), k.known_until.is_(None)).values(known_until=now)
                )
                self._cancel_waiting(c, s.runs.c.job_id.in_(chunk), "job removed from the registry")

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
                    r for chunk in _chunks(sorted(set(job_ids)), 500) for r in c.execute(q.where(k.job_id.in_(chunk)))
                ]
        for r in rows:
            out.setdefault(r.job_id, []).append((r.known_from, r.known_until))
        return out

    def _job(self, row: sa.RowMapping, known: Mapping[str, JobSpec] | None = None) -> JobRow:
        spec = known.get(row["job_id"]) if known else None
        if spec is None or spec.spec_hash() != row["spec_hash"]:
            spec = JobSpec.from_json_dict(json.loads(row["spec_json"]))
        until = row.get("paused_until")
        return JobRow(
            job_id=row["job_id"],
            spec=spec,
            spec_hash=row["spec_hash"],
            node=row["node"],
            paused=bool(row["paused"]) and (until is None or until > self._now()),  # a pause past its end is over
            paused_reason=row["paused_reason"],
            paused_at=row["paused_at"],
            paused_by=row.get("paused_by"),
            paused_until=until,
            removed_at=row["removed_at"],
            updated_at=row["updated_at"],
        )

    def jobs(self, include_removed: bool = False, known: Mapping[str, JobSpec] | None = None) -> list[JobRow]:
        q = sa.select(s.jobs).order_by(s.jobs.c.job_id)
        if not include_removed:
            q = q.where(s.jobs.c.removed_at.is_(None))
        with self._tx(write=False) as c:
            rows = c.execute(q).mappings().all()
        return [self._job(r, known) for r in rows]

    def get_job(self, job_id: str) -> JobRow | None:
        with self._tx(write=False) as c:
            row = c.execute(sa.select(s.jobs).where(s.jobs.c.job_id == job_id)).mappings().first()
        return self._job(row) if row else None

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

    def _pause_live(self, until_col: sa.ColumnElement[datetime]) -> sa.ColumnElement[bool]:
        return sa.or_(until_col.is_(None), until_col > self._now_sql())

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

    # --- occurrences and runs -------------------------------------------------------------
    def _run_row(self, run: Run) -> dict[str, Any]:
        row = {f: getattr(run, f) for f in _RUN_FIELDS}
        row["updated_at"] = row["updated_at"] or self._now()
        return row

    def _insert_new(self, c: Connection, run: Run | None) -> bool:
        if run is None:
            return False
        stmt = self._insert(s.runs).values(self._run_row(run)).on_conflict_do_nothing(index_elements=["run_id"])
        # RETURNING, not rowcount: psycopg reports -1 for an INSERT ... ON CONFLICT here.
        return c.execute(stmt.returning(s.runs.c.run_id)).first() is not None

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
            for chunk in _chunks(rows, BATCH):
                ids = [row["run_id"] for row in chunk]
                seen: set[str] = set()
                for part in _chunks(ids, 1000):
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
                values = [_aware(v) for v in values]
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
                return [run for run in self._select_runs(q) if run.job_key in keys]
            out: list[Run] = []
            for chunk in _chunks(sorted(keys), 500):
                out += self._select_runs(q.where(r.job_key.in_(chunk)))
            return sorted(out, key=lambda x: (x.fire_at, x.run_id))
        return self._select_runs(q)

    def _select_runs(self, q: sa.Select[Any]) -> list[Run]:
        with self._tx(write=False) as c:
            return [Run(**row) for row in c.execute(q).mappings()]

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
            _terminal(state)
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
            for part in _chunks(sorted(ids), 1000):
                waiting = sa.select(r.run_id).where(r.run_id.in_(part), r.state.in_(WAITING))
                free = waiting.with_for_update(skip_locked=True).scalar_subquery()
                update = s.runs.update().where(r.run_id.in_(free), self._lease_live(token, node))
                values = dict(state=state, error=error, finished_at=now, updated_at=now, next_attempt_at=None)
                done += c.execute(update.values(token=token, node=node, **values)).rowcount
        if done < len(settles) and not c.execute(sa.select(self._lease_live(token))).scalar():
            with self._lock:
                self.stale_rejections += len(settles) - done

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
        r = s.runs.c
        free = sa.select(r.run_id).where(r.run_id.in_(run_ids), r.state.in_(WAITING)).with_for_update(skip_locked=True)
        now = self._ts()
        rows = (
            c.execute(
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
                .returning(*s.runs.c)
            )
            .mappings()
            .all()
        )
        if not rows:
            self._rejected(c, token)
            return []
        c.execute(
            s.attempts.insert(),
            [
                dict(
                    run_id=row["run_id"],
                    attempt=row["attempts"],
                    node=node,
                    token=token,
                    state=RunState.RUNNING,
                    started_at=row["started_at"],
                )
                for row in rows
            ],
        )
        return [Run(**row) for row in rows]

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
        had. None if it is no longer waiting (settled meanwhile) or the token is stale."""
        with self._tx() as c:
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
        when; claiming or settling them clears it. Fenced on `token`; returns rows changed."""
        ids = sorted(set(run_ids))
        r = s.runs.c
        done = 0
        with self._tx() as c:
            for part in _chunks(ids, 1000):
                update = s.runs.update().where(
                    r.run_id.in_(part), r.state == RunState.PENDING, self._lease_live(token, node)
                )
                done += c.execute(update.values(error=why, next_attempt_at=_aware(until))).rowcount
        return done

    def waiting_retries(self, node: str) -> list[Run]:
        """Runs in retry_wait last held by `node` (a dead node's pending retries)."""
        r = s.runs.c
        return self._select_runs(
            sa.select(s.runs)
            .where(r.state == RunState.RETRY_WAIT, r.node == node)
            .order_by(r.next_attempt_at, r.run_id)
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
        _terminal(state)
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
                done = pgbatch.set_processes(c, started, token)
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
            _terminal(e.state)
        if not endings:
            return set()
        with self._tx() as c:
            if self.dialect == "postgresql" and len({e.run_id for e in endings}) == len(endings) > 1:
                done = pgbatch.finish_many(c, endings, token)
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
        for part in _chunks(sorted(wanted), 1000):
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
            _terminal(state)
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
            for part in _chunks(list(run_ids), 1000):
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
            cur = driver.execute(_MARKS_SQL, (_sqlite_text(since), _sqlite_text(until)))
            parse = datetime.fromisoformat
            return [new(Mark, (a, b, k, parse(t + "+00:00"), st, tr)) for a, b, k, t, st, tr in cur.fetchall()]

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

    def attempts(self, run_id: str) -> list[Attempt]:
        a = s.attempts.c
        with self._tx(write=False) as c:
            rows = c.execute(sa.select(s.attempts).where(a.run_id == run_id).order_by(a.attempt)).mappings()
            return [Attempt(**row) for row in rows]

    def _cancel_waiting(self, c: Connection, where: sa.ColumnElement[bool], reason: str) -> int:
        r = s.runs.c
        now = self._ts()
        res = c.execute(
            s.runs.update()
            .where(where, r.state.in_(WAITING))
            .values(state=RunState.CANCELLED, error=reason, finished_at=now, updated_at=now, next_attempt_at=None)
        )
        return res.rowcount

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

    def delete_run(self, run_id: str) -> bool:
        """Added (tests and operator repair): remove a run and its attempts."""
        with self._tx() as c:
            return c.execute(s.runs.delete().where(s.runs.c.run_id == run_id)).rowcount == 1

    def metrics(self) -> dict[str, Any]:
        """Added: a cheap summary for /metrics and `chronoctl status`: runs by state, live
        jobs, paused jobs, and this process's stale-token rejections."""
        r, j = s.runs.c, s.jobs.c
        with self._tx(write=False) as c:
            by_state = {
                row.state: row.n for row in c.execute(sa.select(r.state, func.count().label("n")).group_by(r.state))
            }
            jobs = c.execute(sa.select(func.count()).where(j.removed_at.is_(None))).scalar_one()
            paused = c.execute(sa.select(func.count()).where(j.removed_at.is_(None), j.paused.is_(True))).scalar_one()
        return {
            "runs_by_state": by_state,
            "jobs": jobs,
            "paused_jobs": paused,
            "stale_rejections": self.stale_rejections,
            "database_bytes": self.database_bytes(),
        }

    # --- retention ------------------------------------------------------------------------
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
            for chunk in _chunks([row.run_id for row in rows], 500):  # attempts go by ON DELETE CASCADE
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

    def last_successes(self, job_ids: Iterable[str], until: datetime) -> dict[str, Run]:
        ids = sorted(set(job_ids))
        if not ids:
            return {}
        r = s.runs.c
        inner = s.runs.alias("latest")
        out: dict[str, Run] = {}
        for chunk in _chunks(ids, 400):  # SQLite allows 500 terms in one compound SELECT
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
        for chunk in _chunks(ids, 900):  # under SQLite's default limit of bound parameters
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
        for chunk in _chunks(ids, 900):
            with self._tx(write=False) as c:
                rows = c.execute(sa.select(s.jobs.c.job_id, state).where(s.jobs.c.job_id.in_(chunk)))
                out.update((job_id, st) for job_id, st in rows if st is not None)
        return out

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
        e = s.registry_errors.c
        with self._tx(write=False) as c:
            rows = c.execute(
                sa.select(e.node, e.file, e.line, e.message, e.at).order_by(e.node, e.file, e.line, e.id)
            ).mappings()
            return [dict(row) for row in rows]


def _group_key(resource: str) -> int:
    # pg_advisory_xact_lock takes a bigint; keep chrono's groups in their own range.
    return (0x63720000 << 32) | zlib.crc32(resource.encode())


def spec_json_and_hash(spec: JobSpec) -> tuple[str, str]:
    """`json.dumps(spec.to_json_dict())` and `spec.spec_hash()` from one walk of the spec.

    dataclasses.asdict deep-copies every value and made a 100,000-job sync take half a
    minute; tests/contract/test_store_contract.py keeps this equal to the model's methods."""
    import hashlib

    d = spec.to_json_dict()  # written out by hand: a generic walk of the dataclasses cost twice as much
    text = json.dumps(d, sort_keys=True)
    # spec_hash() dumps the same sorted dict without the two source keys; they are adjacent
    # top-level keys after every nested object, so cutting their last occurrence is exact.
    source = f'"source_file": {json.dumps(spec.source_file)}, "source_line": {json.dumps(spec.source_line)}, '
    before, found, after = text.rpartition(source)
    if not found:
        del d["source_file"], d["source_line"]
        digest = hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
    else:
        digest = hashlib.sha256((before + after).encode()).hexdigest()[:16]
    spec.remember_hash(digest)  # the node's published hashes need it next: computed once
    return text, digest


def _terminal(state: str) -> None:
    if state not in TERMINAL_STATES:
        raise ValueError(f"{state!r} is not a terminal run state (one of {', '.join(TERMINAL_STATES)})")


def _sqlite_text(at: datetime) -> str:
    """An aware datetime as SQLite stores it: naive UTC text (what UTCDateTime binds)."""
    _aware(at)
    return at.astimezone(timezone.utc).replace(tzinfo=None).isoformat(" ", "microseconds")


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValueError(f"the store takes aware datetimes only, got naive {value.isoformat()}")
    return value


def _node(row: sa.RowMapping) -> Node:
    d = dict(row)
    d["info"] = json.loads(d.pop("info_json") or "{}")
    return Node(**d)


def _bound(column: sa.Column[Any], c: Connection, value: Any) -> Any:
    """`value` as the driver takes it for `column` (its type's conversion, once)."""
    process = column.type.bind_processor(c.dialect)
    return value if process is None else process(value)


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _sqlite_on_connect(busy_timeout_s: float) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let the begin event below issue BEGIN itself (pysqlite's own is deferred and late).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        # the busy timeout first: switching to WAL takes a lock too
        for pragma in (f"busy_timeout={int(busy_timeout_s * 1000)}", "journal_mode=WAL", "synchronous=NORMAL"):
            cur.execute(f"PRAGMA {pragma}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return on_connect


def _sqlite_on_begin(busy_timeout_s: float) -> Callable[[Connection], None]:
    def on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get("chrono_write")
        if not immediate:
            conn.exec_driver_sql("BEGIN")
            return
        # A writer waits for the lock: SQLite's busy handler waits up to the busy timeout,
        # and a BEGIN IMMEDIATE refused early anyway (the handler is not always asked) is
        # tried again until that long has passed. Nothing ran yet: a retry is safe.
        deadline = time.monotonic() + max(busy_timeout_s, conn.get_execution_options().get("chrono_patience", 0))
        while True:
            try:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
                return
            except exc.OperationalError as e:
                if "locked" not in str(e.orig) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    return on_begin
