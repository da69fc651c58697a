"""The SQL store's shared ground: the database (engine, transactions, clocks), the
fencing predicate, and the base every role's SQL builds on.

`Database` is the engine and the transaction helper, and a public seam: the outbox
(`chronod.store.outbox`) runs its own SQL through the `Database` of the store it shares.

`SqlPart` is the base of the role mixins `SqlStore` is made of (`sql_leases`,
`sql_definitions`, `sql_occurrences`, `sql_outcomes`, `sql_history`, `sql_retention`,
`sql_state`, `backfills`). Mixins rather than separate objects: the roles write in each
other's transactions (a sync cancels occurrences, a backfill opens runs), every fenced
write must reach the one `_lease_live` below (a test replaces it on `SqlStore` to break
fencing on purpose), and `SqlStore` keeps its flat public methods without a layer of
delegation. Each mixin owns one role's SQL; `SqlPart` holds only what several share: the
transaction and clock shorthands, fencing, and reading and writing a run row. Nor do the
mixins share state: the store's state is the database. Its Python fields are the
`Database` (set once) and the count of refused writes, `stale_rejections`, which only
`SqlPart`'s fencing helpers write.

One code path serves both databases; the differences are few and named here:

- Lease times. PostgreSQL compares leases with its own `now()`; on SQLite the single
  node's clock is the database clock (`now` argument, default the real UTC clock).
- Fencing tokens. `nextval('fencing_token_seq')` on PostgreSQL; an upsert on the one-row
  `fencing_token` table on SQLite, inside the write transaction.
- Locking. PostgreSQL claims with `SELECT ... FOR UPDATE SKIP LOCKED`; SQLite writes
  start with `BEGIN IMMEDIATE`, so writers queue (up to the busy timeout) instead of
  failing half-way, and migrations hold that write lock for their whole run.

Every daemon write about a run carries the writer's token and is conditional, in its
WHERE clause, on that token being the current token of a live lease (`lease_live`).
"""

from __future__ import annotations

import re
import threading
import time
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import sqlalchemy as sa
from sqlalchemy import event, exc, func
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection, make_url

from chronod.core.model import TERMINAL_STATES, RunState
from chronod.private import create_db_file
from chronod.store import schema as s
from chronod.store.api import Run, StoreError

WAITING = (RunState.PENDING, RunState.RETRY_WAIT)
DAEMON_BUSY_TIMEOUT_S = 15.0  # the loop waits this long for SQLite's write lock (the watchdog pings at 30 s)
CLI_BUSY_TIMEOUT_S = 30.0  # chronoctl's writes wait longer: a burst of 150 at once all pass
BATCH = 5000
TURN_WAIT_S = 1.0  # the longest a patient writer lets the loop's writes go first (WriteTurns)
_RUN_FIELDS = tuple(Run.__dataclass_fields__)
RUN_COLUMNS = ", ".join(f'"{f}"' for f in _RUN_FIELDS)  # "signal", "trigger": keywords somewhere
_RUN_TIMES = tuple(i for i, f in enumerate(_RUN_FIELDS) if isinstance(s.runs.c[f].type, s.UTCDateTime))


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


def lease_held(now: sa.ColumnElement[datetime]) -> list[sa.ColumnElement[bool]]:
    """A node row whose lease holds at `now`: unexpired and not stopped."""
    n = s.nodes.c
    return [n.lease_expires_at > now, n.stopped_at.is_(None)]


def lease_live(
    token: int | sa.ColumnElement[Any] | None,
    now: sa.ColumnElement[datetime],
    node: str | sa.ColumnElement[str] | None = None,
) -> sa.Exists:
    """THE fencing predicate: EXISTS a node holding `token` (by name too when given) whose
    lease holds at `now`. Every fenced write, the PostgreSQL batches too (`pgbatch`), is
    conditional on it."""
    n = s.nodes.c
    cond = [n.token == token, *lease_held(now)]
    if node is not None:
        cond.append(n.name == node)
    return sa.exists().where(*cond)


class WriteTurns:
    """Which of this process's SQLite writers goes first: a patient writer (a background
    thread's, `Database.tx(patience_s=...)`) waits, before it takes SQLite's one write
    lock, while a writer without patience (the loop's, a reload's) wants it or holds it.

    SQLite does not queue writers: one that finds the lock taken sleeps in its busy
    handler, 1 ms, then 2, 5 ... up to 100 ms at a time, while the holder, done, takes it
    again at once. The notifier's first round saves 100,000 states 1,000 a transaction,
    back to back: the loop waited 1.6 s for its BEGIN IMMEDIATE (the `@every 1s` job
    started that late), the lock free only between two of them. Now the loop waits for the
    one transaction in progress at most. A patient writer waits TURN_WAIT_S at most, then
    goes on (SQLite's busy handler orders them again): a loop that writes at every wake-up
    of a burst lets one through a second; one inside a write of its own thread never waits
    for itself."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._urgent = 0  # writers without patience wanting or holding the write lock
        self._mine = threading.local()  # this thread's urgent writes in progress

    @contextmanager
    def urgent(self) -> Iterator[None]:
        """Around a write that must not wait for patient writers."""
        with self._cond:
            self._urgent += 1
        self._mine.n = getattr(self._mine, "n", 0) + 1
        try:
            yield
        finally:
            self._mine.n -= 1
            with self._cond:
                self._urgent -= 1
                if not self._urgent:
                    self._cond.notify_all()

    def patient(self) -> None:
        """Wait (up to TURN_WAIT_S) until no urgent writer wants the lock."""
        if getattr(self._mine, "n", 0):
            return
        with self._cond:
            self._cond.wait_for(lambda: not self._urgent, timeout=TURN_WAIT_S)


class Database:
    """One SQLAlchemy engine, its transactions and its clocks; safe to share between threads.

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
        self.now: Callable[[], datetime] = now or _utcnow
        self.turns = WriteTurns()  # (SQLite's one write lock: see WriteTurns)
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
            raise self.error(e) from None

    def _create_engine(self, parsed: sa.URL) -> sa.Engine:
        if self.dialect == "postgresql":
            connect_args = {} if "connect_timeout" in parsed.query else {"connect_timeout": 10}
            # No pre-ping: it costs a round trip per transaction (8% of a busy node's loop).
            # A connection that died with the server fails its first statement instead; the
            # daemon treats that like any outage (offline, retry) and the pool, seeing a
            # disconnect, drops every pooled connection at once.
            engine = sa.create_engine(parsed, pool_size=5, max_overflow=5, connect_args=connect_args)
            event.listen(engine, "connect", _pg_on_connect)
            return engine
        engine = sa.create_engine(parsed, connect_args={"timeout": self.busy_timeout_s})
        event.listen(engine, "connect", _sqlite_on_connect(self.busy_timeout_s))
        event.listen(engine, "begin", _sqlite_on_begin(self.busy_timeout_s))
        return engine

    def error(self, e: BaseException) -> StoreError:
        """`e` as a StoreError naming the database (its password masked)."""
        orig = getattr(e, "orig", None) or e
        reason = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
        if self._password:
            reason = reason.replace(self._password, "***")
        return StoreError(f"database {self.url_safe}: {reason}")

    @contextmanager
    def tx(self, write: bool = True, patience_s: float | None = None) -> Iterator[Connection]:
        """One transaction; SQLite writers take the write lock up front (BEGIN IMMEDIATE),
        waiting for it up to the busy timeout, or `patience_s` (a background thread's
        writes, which nothing waits on, outwait a burst of chronoctl writes). On SQLite a
        patient writer first lets the other writers of this process go (`WriteTurns`)."""
        if write and self.dialect == "sqlite":
            if patience_s is not None:
                self.turns.patient()
            else:
                with self.turns.urgent():
                    with self._tx(write, patience_s) as conn:
                        yield conn
                return
        with self._tx(write, patience_s) as conn:
            yield conn

    @contextmanager
    def _tx(self, write: bool, patience_s: float | None) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                if write:
                    conn.execution_options(chrono_write=True, chrono_patience=patience_s or self.busy_timeout_s)
                with conn.begin():
                    yield conn
        except exc.SQLAlchemyError as e:
            raise self.error(e) from None

    def insert(self, table: sa.Table) -> Any:
        """The dialect's INSERT (both have on_conflict_do_nothing)."""
        from sqlalchemy.dialects import postgresql, sqlite

        return postgresql.insert(table) if self.dialect == "postgresql" else sqlite.insert(table)

    def now_sql(self) -> sa.ColumnElement[datetime]:
        """The lease clock as SQL: `now()` on PostgreSQL, the node's clock on SQLite."""
        if self.dialect == "postgresql":
            return func.now()
        return sa.literal(self.now(), s.UTCDateTime())

    def now_plus(self, seconds: float) -> sa.ColumnElement[datetime]:
        """The lease clock `seconds` from now, as SQL."""
        if self.dialect == "postgresql":
            return func.now() + sa.literal(timedelta(seconds=seconds), sa.Interval())
        return sa.literal(self.now() + timedelta(seconds=seconds), s.UTCDateTime())

    def ts(self) -> sa.ColumnElement[datetime]:
        """A write timestamp: one value per call, so started_at and updated_at agree."""
        if self.dialect == "postgresql":
            return func.now()
        return sa.literal(self.now(), s.UTCDateTime())

    def select_runs(self, q: sa.Select[Any]) -> list[Run]:
        """The runs a SELECT of whole `runs` rows finds, in its own read transaction."""
        with self.tx(write=False) as c:
            return [Run(**row) for row in c.execute(q).mappings()]

    def fetch(self, c: Connection, sql: str, params: Iterable[Any]) -> list[Any]:
        """Rows of `sql` (placeholders `?`, datetimes aware) through the driver's own
        cursor: SQLAlchemy's per-row mapping and its time zone conversion of each datetime
        cost more than the database's work on the loop's and the notifier's hot reads."""
        driver: Any = c.connection.driver_connection
        if self.dialect == "sqlite":
            values = tuple(sqlite_text(v) if isinstance(v, datetime) else v for v in params)
            rows: list[Any] = driver.execute(sql, values).fetchall()
            return rows
        driver.execute("SET LOCAL TIME ZONE 'UTC'")  # aware UTC datetimes, this transaction only
        rows = driver.execute(sql.replace("?", "%s"), tuple(params)).fetchall()
        return rows

    def fetch_runs(self, c: Connection, sql: str, params: Iterable[Any]) -> list[Run]:
        """Runs read through the driver (`fetch`): `sql` selects `RUN_COLUMNS`."""
        rows = self.fetch(c, sql, params)
        if self.dialect != "sqlite":
            return [Run(*row) for row in rows]
        parse = datetime.fromisoformat
        out = []
        for row in rows:
            v = list(row)
            for i in _RUN_TIMES:
                if v[i] is not None:
                    v[i] = parse(v[i] + "+00:00")  # SQLite keeps naive UTC text (schema.UTCDateTime)
            out.append(Run(*v))
        return out


class SqlPart:
    """What every role's SQL shares: the database, fencing, and run rows (see the module
    docstring for why the roles are mixins over it)."""

    database: Database
    dialect: str
    stale_rejections: int
    _lock: threading.Lock

    # --- the database's shorthands -----------------------------------------------------
    def _tx(self, write: bool = True, patience_s: float | None = None) -> AbstractContextManager[Connection]:
        """`Database.tx`: one transaction."""
        return self.database.tx(write, patience_s)

    def _insert(self, table: sa.Table) -> Any:
        return self.database.insert(table)

    def _now(self) -> datetime:
        return self.database.now()

    def _now_sql(self) -> sa.ColumnElement[datetime]:
        return self.database.now_sql()

    def _now_plus(self, seconds: float) -> sa.ColumnElement[datetime]:
        return self.database.now_plus(seconds)

    def _ts(self) -> sa.ColumnElement[datetime]:
        return self.database.ts()

    def _error(self, e: BaseException) -> StoreError:
        return self.database.error(e)

    def _pause_live(self, until_col: sa.ColumnElement[datetime]) -> sa.ColumnElement[bool]:
        """A pause ending at `until_col` (None: until resumed) holds now, by the lease clock:
        every read of a pause (the definitions' `JobRow.paused`, the state role's pause
        queries) asks here, so that they agree on one clock."""
        return sa.or_(until_col.is_(None), until_col > self._now_sql())

    # --- fencing -------------------------------------------------------------------------
    def _lease_live(
        self, token: int | sa.ColumnElement[Any] | None, node: str | sa.ColumnElement[str] | None = None
    ) -> sa.Exists:
        """`lease_live` on this database's lease clock: every fenced write asks here."""
        return lease_live(token, self._now_sql(), node)

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

    # --- run rows, which several roles write -----------------------------------------------
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

    def _select_runs(self, q: sa.Select[Any]) -> list[Run]:
        return self.database.select_runs(q)


def terminal(state: str) -> None:
    """Raise ValueError unless `state` is a terminal run state."""
    if state not in TERMINAL_STATES:
        raise ValueError(f"{state!r} is not a terminal run state (one of {', '.join(TERMINAL_STATES)})")


def fenced_node(node: str | None, token: int | None) -> None:
    """Raise ValueError for a fenced write (`token` given) that does not name its node: the
    run records the pair that wrote it last, and the fence checks the token by its name."""
    if token is not None and node is None:
        raise ValueError("a write fenced on a token names the node that holds it (node=None given)")


def sqlite_text(at: datetime) -> str:
    """An aware datetime as SQLite stores it: naive UTC text (what UTCDateTime binds)."""
    aware(at)
    return at.astimezone(timezone.utc).replace(tzinfo=None).isoformat(" ", "microseconds")


def aware(value: datetime | None) -> datetime | None:
    """`value`, refused when naive."""
    if value is not None and value.tzinfo is None:
        raise ValueError(f"the store takes aware datetimes only, got naive {value.isoformat()}")
    return value


def bound(column: sa.Column[Any], c: Connection, value: Any) -> Any:
    """`value` as the driver takes it for `column` (its type's conversion, once)."""
    process = column.type.bind_processor(c.dialect)
    return value if process is None else process(value)


def ids_in(
    column: sa.ColumnElement[str], ids: list[str] | sa.BindParameter[Any], dialect: str
) -> sa.ColumnElement[bool]:
    """`column IN ids`; on PostgreSQL `column = ANY(array)`, one parameter: an IN list is a
    new statement text for each length, converted and planned afresh every time, where an
    array's statement is the same each time (the driver prepares it once). `ids` may be
    an array parameter bound later (PostgreSQL only)."""
    if isinstance(ids, sa.BindParameter):
        return column == sa.any_(ids)
    if dialect == "postgresql":
        return column == sa.any_(sa.literal(ids, ARRAY(sa.Text)))
    return column.in_(ids)


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    """`items` in lists of at most `size`."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _pg_on_connect(dbapi_conn: Any, _record: Any) -> None:
    """Each session reads timestamps in UTC: the driver then hands out values whose tzinfo
    is `datetime.timezone.utc`, which `UTCDateTime` keeps as they are. In a server's own
    zone (even `Etc/UTC`) every value read was converted: a third of the CPU of reading
    45,000 (run id, updated_at) keys, the notifier's overlap. Behind a pooler that does not
    keep a session's settings, values come in another zone and are converted as before."""
    with dbapi_conn.cursor() as cur:
        cur.execute("SET TIME ZONE 'UTC'")
    dbapi_conn.commit()


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
