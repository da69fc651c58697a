"""SqlStore: the store interface (chronod.store.api) over SQLAlchemy Core, SQLite and PostgreSQL.

`SqlStore` is the schema role (below) and the mixins that hold each other role's SQL, one
module a role, over the shared `chronod.store.sqldb.Database`:

- leases and fencing tokens: `sql_leases.LeasesSql`
- definitions: `sql_definitions.DefinitionsSql`
- the run ledger: `sql_occurrences.OccurrencesSql`, `sql_outcomes.OutcomesSql`,
  `sql_history.HistorySql`
- retention: `sql_retention.RetentionSql`
- backfills: `backfills.BackfillStore`
- requests and state: `sql_state.StateSql`

The outbox (`chronod.store.outbox.Outbox`) is not part of it: it runs its own SQL
through the store's public `database`. Why mixins, and what they share, is said in
`chronod.store.sqldb`, with the differences between the two databases.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Callable

import sqlalchemy as sa
from sqlalchemy import exc

from chronod.store import schema as s
from chronod.store.api import SchemaTooNew, SchemaTooOld
from chronod.store.backfills import BackfillStore
from chronod.store.nodeinfo import NodeInfos
from chronod.store.sql_definitions import DefinitionsSql, spec_json_and_hash
from chronod.store.sql_history import HistorySql
from chronod.store.sql_leases import LeasesSql
from chronod.store.sql_occurrences import OccurrencesSql
from chronod.store.sql_outcomes import OutcomesSql
from chronod.store.sql_retention import RetentionSql
from chronod.store.sql_state import StateSql
from chronod.store.sqldb import (
    BATCH,
    CLI_BUSY_TIMEOUT_S,
    DAEMON_BUSY_TIMEOUT_S,
    WAITING,
    Database,
    ambiguous_password,
    mask_url,
    migrations_dir,
    normalize_url,
)

__all__ = [
    "BATCH",
    "CLI_BUSY_TIMEOUT_S",
    "DAEMON_BUSY_TIMEOUT_S",
    "WAITING",
    "SqlStore",
    "ambiguous_password",
    "mask_url",
    "migrations_dir",
    "normalize_url",
    "spec_json_and_hash",
]

_ADVISORY_LOCK_KEY = 0x6368726F6E6F  # "chrono": serializes migrations across a fleet
_ALEMBIC_LOCK = threading.Lock()  # alembic keeps its running context in module globals


class SqlStore(
    LeasesSql, DefinitionsSql, OccurrencesSql, OutcomesSql, HistorySql, RetentionSql, StateSql, BackfillStore
):
    """The store over one SQLAlchemy engine; safe to share between a daemon's threads.

    `now` is the clock SQLite leases and timestamps use (PostgreSQL uses its own `now()`
    for leases); it must return aware UTC datetimes.
    """

    def __init__(
        self, url: str, *, now: Callable[[], datetime] | None = None, busy_timeout_s: float = DAEMON_BUSY_TIMEOUT_S
    ):
        self.database = Database(url, now=now, busy_timeout_s=busy_timeout_s)
        self.url_safe = self.database.url_safe
        self.dialect = self.database.dialect
        self.busy_timeout_s = busy_timeout_s
        self.engine = self.database.engine
        self.stale_rejections = 0
        self._lock = threading.Lock()
        self._infos = NodeInfos()

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
        """Bring the schema to the head revision: an empty database is created at the head
        and stamped (as alembic's cookbook does for a new database); any other goes through
        the migrations. tests/contract/test_migrations.py holds both to one schema."""
        try:
            with _ALEMBIC_LOCK, self.engine.connect() as conn:
                if self.dialect == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_LOCK_KEY})
                    conn.commit()
                else:
                    conn.execution_options(chrono_write=True)
                try:
                    if sa.inspect(conn).get_table_names():
                        _migrate(conn)
                    else:
                        # a first start skips importing alembic and replaying every migration
                        # (0.15 s of CPU; the suite starts hundreds of daemons on new databases)
                        s.metadata.create_all(conn)
                        _stamp_head(conn)
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


def _migrate(conn: sa.Connection) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, "head")


def _stamp_head(conn: sa.Connection) -> None:
    """The version table exactly as alembic makes it, at the head revision."""
    conn.execute(
        sa.text(
            "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
            "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
        )
    )
    conn.execute(sa.text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": s.HEAD_REVISION})
