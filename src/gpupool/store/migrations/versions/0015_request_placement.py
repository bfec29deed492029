"""workloads.engine, workloads.node_labels: placement pins (issue 31, several engines in one
pool): the engine whose nodes may run the work, and labels a node must have (a JSON object
text sorted by key)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("engine", sa.String(64), nullable=True))
        batch.add_column(sa.Column("node_labels", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("node_labels")
        batch.drop_column("engine")
