"""The start time of a node's process (clock ticks since boot, from /proc): with its pid
and boot id, the identity of the chronod that holds a lease. A pid alone is not one: after
a kill -9 the pid may be a zombie, or the kernel may give it to another process, and
neither is the old daemon.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05

Spelled out on purpose; never import chronod.store.schema here.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("pid_start", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("pid_start")
