"""When each job definition was known: one row per registration, from its first sync to
its removal (open while registered). The history expects occurrences only inside these
spans. Existing jobs get one span, from the older of their first run and their last
definition change, to their removal if any.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03

Spelled out on purpose; never import chronod.store.schema here.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "job_known",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("known_from", TS, primary_key=True),
        sa.Column("known_until", TS),
    )
    op.execute(
        "INSERT INTO job_known (job_id, known_from, known_until) "
        "SELECT j.job_id, "
        "COALESCE((SELECT MIN(r.scheduled_at) FROM runs r WHERE r.job_id = j.job_id AND r.scheduled_at < j.updated_at), "
        "j.updated_at), j.removed_at FROM jobs j"
    )


def downgrade() -> None:
    op.drop_table("job_known")
