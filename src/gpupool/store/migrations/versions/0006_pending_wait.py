"""workloads.pending_wait: the structured part of a why-pending (scheduler.Wait as JSON)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("pending_wait", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("pending_wait")
