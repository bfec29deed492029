"""usage.gpu_seconds_measured: the GPU-seconds of a row for which telemetry gave a busy
fraction, so that "nothing measured" (shown as -) is told from "measured idle" (0%)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.add_column(
            sa.Column("gpu_seconds_measured", sa.Float(), nullable=False, server_default="0")
        )
    # Rows before this revision: a busy time was measured; a zero one cannot be told apart
    # from nothing measured and stays unmeasured.
    op.execute(
        "UPDATE usage SET gpu_seconds_measured = gpu_seconds_allocated WHERE gpu_seconds_busy > 0"
    )


def downgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("gpu_seconds_measured")
