"""start retries: failed starts in a row and the time of the next try, per workload

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("start_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("retry_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads", schema=None) as batch_op:
        batch_op.drop_column("retry_at")
        batch_op.drop_column("start_attempts")
