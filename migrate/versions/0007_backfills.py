"""Backfills: a stored request to run a job's past occurrences again, resumed after a restart.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

Spelled out on purpose; never import chronod.store.schema here.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "backfills",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("from_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("to_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("only", sa.Text, nullable=False),
        sa.Column("max_concurrency", sa.Integer, nullable=False),
        sa.Column("allow_unsafe", sa.Boolean, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("requested_by", sa.Text),
        sa.Column("items_json", sa.Text, nullable=False),
        sa.Column("started", sa.Integer, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_backfills_state", "backfills", ["state"])


def downgrade() -> None:
    op.drop_index("ix_backfills_state", table_name="backfills")
    op.drop_table("backfills")
