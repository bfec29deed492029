"""workload_pod: the pod template of a notebook on Kubernetes (from the hub's spawner)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workload_pod",
        sa.Column(
            "workload_id",
            sa.String(32),
            sa.ForeignKey("workloads.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("spec", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("workload_pod")
