"""Each job file's validated result, stored with the definitions: a restart whose job
files did not change reuses them instead of parsing and validating every file again
(100,000 jobs took seconds of validation before a daemon was ready).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06

Spelled out on purpose; never import chronod.store.schema here.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registry_files",
        sa.Column("node", sa.Text(), primary_key=True),
        sa.Column("path", sa.Text(), primary_key=True),
        sa.Column("file_key", sa.Text(), nullable=False),
        sa.Column("result", sa.LargeBinary(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("registry_files")
