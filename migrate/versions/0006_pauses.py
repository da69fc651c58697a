"""Pauses that end by themselves, and pauses of a tag or a resource: who paused a job and
until when (jobs.paused_by, jobs.paused_until), and a table of pauses set on a tag or a
resource (`chronoctl pause --tag T | --resource R`).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

Spelled out on purpose; never import chronod.store.schema here.
"""

from alembic import op
import sqlalchemy as sa

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("paused_by", sa.Text))
        batch.add_column(sa.Column("paused_until", TS))
    op.create_table(
        "pauses",
        sa.Column("kind", sa.Text, primary_key=True),
        sa.Column("target", sa.Text, primary_key=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("paused_by", sa.Text),
        sa.Column("paused_at", TS, nullable=False),
        sa.Column("paused_until", TS),
    )


def downgrade() -> None:
    op.drop_table("pauses")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("paused_until")
        batch.drop_column("paused_by")
