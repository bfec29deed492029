"""workload_env (a workload's declared environment, kept apart from listings) and
workloads.endpoint (where a workload's server listens, reported by the executor)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("endpoint", sa.String(255), nullable=True))
    op.create_table(
        "workload_env",
        sa.Column(
            "workload_id",
            sa.String(32),
            sa.ForeignKey("workloads.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("env", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("workload_env")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("endpoint")
