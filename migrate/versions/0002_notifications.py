"""Notifications: the outbox of notices to owners, the notifier's state, and an index on
runs.updated_at (the notifier reads the runs that changed since its cursor).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-09

Spelled out on purpose; never import chronod.store.schema here.
"""

from alembic import op
import sqlalchemy as sa

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_index("ix_runs_updated_at", "runs", ["updated_at"])
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text),
        sa.Column("dedupe_key", sa.Text, nullable=False),
        sa.Column("route_json", sa.Text, nullable=False),
        sa.Column("payload_json", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("claimed_by", sa.Text),
        sa.Column("claimed_until", TS),
        sa.Column("next_try_at", TS),
        sa.Column("sent_at", TS),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_error", sa.Text),
    )
    op.create_index("ux_notifications_dedupe_key", "notifications", ["dedupe_key"], unique=True)
    op.create_index("ix_notifications_sent_at", "notifications", ["sent_at"])
    op.create_table(
        "notify_state",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("state_json", sa.Text, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("notify_state")
    op.drop_table("notifications")
    op.drop_index("ix_runs_updated_at", table_name="runs")
