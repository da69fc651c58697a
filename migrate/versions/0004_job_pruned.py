"""Retention: what was pruned from each job's history. One row per job: runs scheduled at
or before `pruned_through` may have been deleted, under a retention of `kept_s` seconds,
so an audit says "pruned" for an occurrence there without a row, never "missing".

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03

Spelled out on purpose; never import chronod.store.schema here.
"""

from alembic import op
import sqlalchemy as sa

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "job_pruned",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("pruned_through", TS, nullable=False),
        sa.Column("kept_s", sa.BigInteger, nullable=False),
        sa.Column("pruned_at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_pruned")
