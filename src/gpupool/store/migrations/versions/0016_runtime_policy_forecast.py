"""tenants/profiles.default_runtime_s and max_runtime_s (issue 35 part 5: runtime policy);
workloads.pending_forecast (issue 35 part 1: the start-time forecast of pending work, JSON)

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("tenants", "profiles"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("default_runtime_s", sa.Float(), nullable=True))
            batch.add_column(sa.Column("max_runtime_s", sa.Float(), nullable=True))
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("pending_forecast", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("pending_forecast")
    for table in ("profiles", "tenants"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("max_runtime_s")
            batch.drop_column("default_runtime_s")
