"""Every attempt keeps its output tail: attempts.output_tail and attempts.output_bytes
(a retried run used to keep only its last attempt's tail).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03

Spelled out on purpose; never import chronod.store.schema here.
"""

from alembic import op
import sqlalchemy as sa

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("output_tail", sa.Text))
        batch.add_column(sa.Column("output_bytes", sa.BigInteger))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("output_bytes")
        batch.drop_column("output_tail")
