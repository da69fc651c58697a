"""An index of the pending runs by fire time (a partial index, only pending rows): a
node of a fleet asks, a few times a second, which occurrences are still pending past
their fire time and when the next one falls due (a rescue). Without it each question
read every pending run, one per job.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

Spelled out on purpose; never import chronod.store.schema here.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# a literal, as the store's query writes it, so that each planner matches the index
PENDING = sa.text("state = 'pending'")


def upgrade() -> None:
    op.create_index("ix_runs_pending_fire_at", "runs", ["fire_at"], sqlite_where=PENDING, postgresql_where=PENDING)


def downgrade() -> None:
    op.drop_index("ix_runs_pending_fire_at", "runs")
