"""The initial schema: jobs, runs, attempts, nodes, requests, job_state, registry_errors.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

Spelled out on purpose; never import chronod.store.schema here.
"""

from alembic import op
import sqlalchemy as sa

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.schema.CreateSequence(sa.Sequence("fencing_token_seq")))

    op.create_table(
        "jobs",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("spec_json", sa.Text, nullable=False),
        sa.Column("spec_hash", sa.Text, nullable=False),
        sa.Column("node", sa.Text, nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("paused_reason", sa.Text),
        sa.Column("paused_at", TS),
        sa.Column("removed_at", TS),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("job_key", sa.Text, nullable=False),
        sa.Column("scheduled_at", TS, nullable=False),
        sa.Column("fire_at", TS, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("node", sa.Text),
        sa.Column("pid", sa.Integer),
        sa.Column("supervisor_pid", sa.Integer),
        sa.Column("started_at", TS),
        sa.Column("finished_at", TS),
        sa.Column("exit_code", sa.Integer),
        sa.Column("signal", sa.Integer),
        sa.Column("output_tail", sa.Text),
        sa.Column("output_bytes", sa.BigInteger, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("token", sa.BigInteger),
        sa.Column("trigger", sa.Text, nullable=False),
        sa.Column("next_attempt_at", TS),
        sa.Column("updated_at", TS),
    )
    op.create_index("ix_runs_job_id_scheduled_at", "runs", ["job_id", "scheduled_at"])
    op.create_index("ix_runs_scheduled_at", "runs", ["scheduled_at"])
    op.create_index("ix_runs_state", "runs", ["state"])
    op.create_table(
        "attempts",
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True),
        sa.Column("node", sa.Text, nullable=False),
        sa.Column("token", sa.BigInteger),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer),
        sa.Column("supervisor_pid", sa.Integer),
        sa.Column("started_at", TS),
        sa.Column("finished_at", TS),
        sa.Column("exit_code", sa.Integer),
        sa.Column("signal", sa.Integer),
        sa.Column("error", sa.Text),
    )
    op.create_table(
        "nodes",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("hostname", sa.Text, nullable=False),
        sa.Column("boot_id", sa.Text, nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("heartbeat_at", TS, nullable=False),
        sa.Column("lease_expires_at", TS, nullable=False),
        sa.Column("stopped_at", TS),
        sa.Column("info_json", sa.Text, nullable=False),
    )
    op.create_table(
        "requests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("job_id", sa.Text),
        sa.Column("payload_json", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("taken_by", sa.Text),
        sa.Column("taken_at", TS),
    )
    op.create_table(
        "job_state",
        sa.Column("job_key", sa.Text, primary_key=True),
        sa.Column("state_json", sa.Text, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "registry_errors",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("node", sa.Text, nullable=False),
        sa.Column("file", sa.Text, nullable=False),
        sa.Column("line", sa.Integer),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("at", TS, nullable=False),
    )
    op.create_index("ix_registry_errors_node", "registry_errors", ["node"])
    op.create_table(
        "fencing_token",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("value", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    for table in ("fencing_token", "registry_errors", "job_state", "requests", "nodes", "attempts", "runs", "jobs"):
        op.drop_table(table)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.schema.DropSequence(sa.Sequence("fencing_token_seq")))
