"""The database schema as SQLAlchemy Core tables: what the store reads and writes.

The migrations in `migrate/versions/` spell the same tables out again on purpose (they
must never import this module, so an old revision keeps meaning what it meant); the drift
test in tests/contract/test_migrations.py proves the two agree on SQLite and PostgreSQL.

Fencing tokens come from the sequence `fencing_token_seq` on PostgreSQL and from the
one-row table `fencing_token` on SQLite (which has no sequences); the table exists on
both so that the two schemas differ only by the sequence.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Sequence,
    Table,
    Text,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

HEAD_REVISION = "0011"
"""The newest alembic revision this chrono knows (a test keeps it equal to alembic's head)."""

REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010", "0011")
"""Every revision in order, oldest first: a database at one of these is older, not newer."""


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out: `timestamptz` on PostgreSQL, naive UTC text on SQLite."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"the store takes aware datetimes only, got naive {value.isoformat()}")
        value = value.astimezone(timezone.utc)
        # SQLite keeps text; naive UTC in one fixed format compares correctly as text.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


metadata = MetaData()

fencing_token_seq = Sequence("fencing_token_seq", metadata=metadata)

jobs = Table(
    "jobs",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("spec_json", Text, nullable=False),
    Column("spec_hash", Text, nullable=False),
    Column("node", Text, nullable=False),
    Column("paused", Boolean, nullable=False),
    Column("paused_reason", Text),
    Column("paused_at", UTCDateTime),
    Column("removed_at", UTCDateTime),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("paused_by", Text),  # 0006: who paused it
    Column("paused_until", UTCDateTime),  # 0006: a pause that ends by itself
    # 0008: what chronod reads at every wake-up, without scanning every job; each WHERE as
    # SQLAlchemy writes `paused.is_(True)` on that database, so that its planner matches it
    Index("ix_jobs_paused", "job_id", sqlite_where=text("paused IS 1"), postgresql_where=text("paused IS true")),
    Index("ix_jobs_updated_at", "updated_at"),
)

# --- 0006: pauses of a tag or a resource (a job's own pause is on its jobs row) -------------

pauses = Table(
    "pauses",
    metadata,
    Column("kind", Text, primary_key=True),  # tag | resource
    Column("target", Text, primary_key=True),
    Column("reason", Text, nullable=False),
    Column("paused_by", Text),
    Column("paused_at", UTCDateTime, nullable=False),
    Column("paused_until", UTCDateTime),
)

PENDING_ONLY = text("state = 'pending'")  # written as a literal: each planner then matches the partial index

runs = Table(
    "runs",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("job_id", Text, nullable=False),
    Column("job_key", Text, nullable=False),
    Column("scheduled_at", UTCDateTime, nullable=False),
    Column("fire_at", UTCDateTime, nullable=False),
    Column("state", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("node", Text),
    Column("pid", Integer),
    Column("supervisor_pid", Integer),
    Column("started_at", UTCDateTime),
    Column("finished_at", UTCDateTime),
    Column("exit_code", Integer),
    Column("signal", Integer),
    Column("output_tail", Text),
    Column("output_bytes", BigInteger, nullable=False),
    Column("error", Text),
    Column("token", BigInteger),
    Column("trigger", Text, nullable=False),
    Column("next_attempt_at", UTCDateTime),
    Column("updated_at", UTCDateTime),
    Index("ix_runs_job_id_scheduled_at", "job_id", "scheduled_at"),
    Index("ix_runs_scheduled_at", "scheduled_at"),
    Index("ix_runs_state", "state"),
    Index("ix_runs_updated_at", "updated_at"),  # 0002: the notifier reads runs changed since its cursor
    # 0011: a fleet's look for late occurrences (Store.late), without reading every pending run
    Index("ix_runs_pending_fire_at", "fire_at", sqlite_where=PENDING_ONLY, postgresql_where=PENDING_ONLY),
)

attempts = Table(
    "attempts",
    metadata,
    Column("run_id", Text, ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("node", Text, nullable=False),
    Column("token", BigInteger),
    Column("state", Text, nullable=False),
    Column("pid", Integer),
    Column("supervisor_pid", Integer),
    Column("started_at", UTCDateTime),
    Column("finished_at", UTCDateTime),
    Column("exit_code", Integer),
    Column("signal", Integer),
    Column("error", Text),
    Column("output_tail", Text),  # 0003: every attempt keeps its own tail (bounded like the run's)
    Column("output_bytes", BigInteger),
)

nodes = Table(
    "nodes",
    metadata,
    Column("name", Text, primary_key=True),
    Column("token", BigInteger, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("pid_start", BigInteger),  # 0009: the process's start (ticks since boot): pid + start + boot id
    Column("hostname", Text, nullable=False),
    Column("boot_id", Text, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("heartbeat_at", UTCDateTime, nullable=False),
    Column("lease_expires_at", UTCDateTime, nullable=False),
    Column("stopped_at", UTCDateTime),
    Column("info_json", Text, nullable=False),
)

requests = Table(
    "requests",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", Text, nullable=False),
    Column("job_id", Text),
    Column("payload_json", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("taken_by", Text),
    Column("taken_at", UTCDateTime),
)

job_state = Table(
    "job_state",
    metadata,
    Column("job_key", Text, primary_key=True),
    Column("state_json", Text, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

registry_errors = Table(
    "registry_errors",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("node", Text, nullable=False),
    Column("file", Text, nullable=False),
    Column("line", Integer),
    Column("message", Text, nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Index("ix_registry_errors_node", "node"),
)

fencing_token = Table(
    "fencing_token",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("value", BigInteger, nullable=False),
)


# --- 0002: notifications (chronod.notify) ---------------------------------------------------

notifications = Table(
    "notifications",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Text, nullable=False),
    Column("event", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("run_id", Text),
    Column("dedupe_key", Text, nullable=False),
    Column("route_json", Text, nullable=False),
    Column("payload_json", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("claimed_by", Text),
    Column("claimed_until", UTCDateTime),
    Column("next_try_at", UTCDateTime),
    Column("sent_at", UTCDateTime),
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text),
    Index("ux_notifications_dedupe_key", "dedupe_key", unique=True),
    Index("ix_notifications_sent_at", "sent_at"),
)

notify_state = Table(
    "notify_state",
    metadata,
    Column("name", Text, primary_key=True),
    Column("state_json", Text, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)


# --- 0003: when each job definition was known ---------------------------------------------

job_known = Table(
    "job_known",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("known_from", UTCDateTime, primary_key=True),
    Column("known_until", UTCDateTime),  # NULL while the job is registered
)


# --- 0004: retention: what was pruned from each job's history --------------------------------

job_pruned = Table(
    "job_pruned",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("pruned_through", UTCDateTime, nullable=False),  # runs scheduled at or before may be gone
    Column("kept_s", BigInteger, nullable=False),  # the retention that pruned them
    Column("pruned_at", UTCDateTime, nullable=False),
)


# --- 0007: backfills: past occurrences run again, stored so that a restart resumes them -------

backfills = Table(
    "backfills",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Text, nullable=False),
    Column("from_at", UTCDateTime, nullable=False),
    Column("to_at", UTCDateTime, nullable=False),
    Column("only", Text, nullable=False),  # missed | failed | all
    Column("max_concurrency", Integer, nullable=False),
    Column("allow_unsafe", Boolean, nullable=False),
    Column("reason", Text),
    Column("requested_by", Text),
    Column("items_json", Text, nullable=False),  # [[run_id, job_key, scheduled_at, fire_at], ...] oldest first
    Column("started", Integer, nullable=False),  # how many of the items have been started
    Column("state", Text, nullable=False),  # running | done | cancelled
    Column("error", Text),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime),
    Index("ix_backfills_state", "state"),
)


# --- 0010: each job file's validated result, so that a restart reuses what did not change ---

registry_files = Table(
    "registry_files",
    metadata,
    Column("node", Text, primary_key=True),
    Column("path", Text, primary_key=True),
    Column("file_key", Text, nullable=False),  # digest of the bytes, validator, day (chronod.daemon.filestore)
    Column("result", LargeBinary, nullable=False),  # the validated result, compressed JSON
    Column("updated_at", UTCDateTime, nullable=False),
)
