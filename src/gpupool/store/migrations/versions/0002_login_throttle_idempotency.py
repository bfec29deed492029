"""login throttle and idempotency keys

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "login_throttle",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("level", sa.Float(), nullable=False),
        sa.Column("last_failure_at", sa.Float(), nullable=False),
        sa.Column("blocked_until", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_login_throttle")),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("user", sa.String(length=128), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("workload_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user"],
            ["users.name"],
            name=op.f("fk_idempotency_keys_user_users"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name=op.f("fk_idempotency_keys_workload_id_workloads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("user", "key", name=op.f("pk_idempotency_keys")),
    )
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_idempotency_keys_workload_id"), ["workload_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_idempotency_keys_workload_id"))
    op.drop_table("idempotency_keys")
    op.drop_table("login_throttle")
