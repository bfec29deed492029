"""Alembic environment: runs migrations on the connection `gpupool.store.db` hands over."""

from alembic import context

from gpupool.store.rows import Base

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only used by `alembic revision --autogenerate`
    from sqlalchemy import create_engine

    connection = create_engine(context.config.get_main_option("sqlalchemy.url")).connect()

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
