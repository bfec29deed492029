"""budgets, reservations: GPU-hour budgets per tenant and period, and advance reservations
(issue 35 parts 2 and 4)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("period", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("gpu_hours", sa.Float(), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("warned", sa.String(length=16), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant"], ["tenants.name"], name=op.f("fk_budgets_tenant_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budgets")),
        sa.UniqueConstraint("tenant", "period", "model", name="uq_budgets_tenant_period_model"),
    )
    with op.batch_alter_table("budgets") as batch:
        batch.create_index(batch.f("ix_budgets_tenant"), ["tenant"], unique=False)
    op.create_table(
        "reservations",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("users", sa.JSON(), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("start", sa.Float(), nullable=False),
        sa.Column("end", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant"],
            ["tenants.name"],
            name=op.f("fk_reservations_tenant_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reservations")),
    )
    with op.batch_alter_table("reservations") as batch:
        batch.create_index(batch.f("ix_reservations_tenant"), ["tenant"], unique=False)
        batch.create_index(batch.f("ix_reservations_start"), ["start"], unique=False)
        batch.create_index(batch.f("ix_reservations_end"), ["end"], unique=False)


def downgrade() -> None:
    op.drop_table("reservations")
    op.drop_table("budgets")
