"""Real databases for store and API tests: a SQLite file, and PostgreSQL when
GPUPOOL_TEST_POSTGRES_URL is set (scripts/test starts one)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from gpupool.store import Store, open_store

POSTGRES_URL = os.environ.get("GPUPOOL_TEST_POSTGRES_URL")
NO_POSTGRES = (
    "GPUPOOL_TEST_POSTGRES_URL is not set; run scripts/test (it starts PostgreSQL) "
    "or point the variable at an empty database"
)

DB_PARAMS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param(
        "postgres",
        id="postgres",
        marks=[pytest.mark.postgres, pytest.mark.skipif(not POSTGRES_URL, reason=NO_POSTGRES)],
    ),
]


def _reset_postgres(url: str) -> None:
    eng = create_engine(url)
    with eng.begin() as c:
        c.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        c.execute(text("CREATE SCHEMA public"))
    eng.dispose()


def store_url(kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'gpupool.db'}"
    assert POSTGRES_URL
    _reset_postgres(POSTGRES_URL)
    return POSTGRES_URL


def make_store(kind: str, tmp_path: Path) -> Iterator[Store]:
    store = open_store(store_url(kind, tmp_path))
    try:
        yield store
    finally:
        store.close()
