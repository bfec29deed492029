"""Opening the store: engine setup, SQLite pragmas, migrations, transactions.

`open_store(url)` returns a `Store` whose schema is at the newest Alembic revision. Use
`store.read()` for read-only work and `store.write()` for changes. On SQLite a write
transaction starts with `BEGIN IMMEDIATE`, so writers are serialized and a check-then-insert
inside one write transaction (e.g. "do these GPUs still have room?") cannot race; on
PostgreSQL the repositories lock the rows they check (`SELECT ... FOR UPDATE`).

SQLite writers take turns through a `WriteLock` first (a thread lock, then an `flock` on
`<database>.writelock`): SQLite's own busy handler polls with growing sleeps (1, 2, 5, 10 ...
ms), which under load adds whole seconds, while the kernel hands an flock to the next waiter
as soon as it is released. The flock also orders the writers of several server processes on
one database file (`gpupool up --workers N`); the kernel drops it when a process dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, Executable, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

_T = TypeVar("_T")
#: ids per `IN (...)` list: SQLite's bound-parameter limit (999 in older builds) with room
IN_LIST_MAX = 500


def in_chunks(items: Sequence[_T], n: int = IN_LIST_MAX) -> Iterator[Sequence[_T]]:
    """`items` in slices of at most `n`, for one `IN (...)` query each."""
    for i in range(0, len(items), n):
        yield items[i : i + n]


def plain_execute(s: Session) -> Callable[..., Any]:
    """`s`'s connection's `execute`, for plain rows (not through the ORM's loading: much
    cheaper for long reads). That skips the Session's autoflush, so it flushes first, as a
    Session query would (nothing to do, and next to free, in a session with no changes):
    a read in a write session never misses that session's unflushed changes."""
    if s.autoflush:
        s.flush()
    return s.connection().execute


def plain_executemany(s: Session, stmt: Executable, params: list[dict[str, Any]]) -> None:
    """Run `stmt` once per entry of `params` (dicts by the statement's bind names) through
    the driver's own executemany, past SQLAlchemy's per-row parameter processing (most of
    the cost of a long `s.execute(stmt, params)`). Only for statements whose bound values
    need no conversion (text, numbers, None); the statement's own fixed values (e.g. a
    `state == 'pending'`) are added to each entry in place. Flushes first, as
    `plain_execute` does."""
    if not params:
        return
    if s.autoflush:
        s.flush()
    conn = s.connection()
    compiled = stmt.compile(dialect=conn.dialect)
    fixed = {k: v for k, v in compiled.params.items() if k not in params[0]}
    if fixed:
        for p in params:
            p.update(fixed)
    names = compiled.positiontup
    if names is None:  # a named paramstyle (psycopg's pyformat): the dicts as they are
        conn.exec_driver_sql(compiled.string, params)  # type: ignore[arg-type]
    else:  # positional (SQLite's qmark): tuples in the statement's order
        get = itemgetter(*names)
        rows = [get(p) for p in params] if len(names) > 1 else [(get(p),) for p in params]
        conn.exec_driver_sql(compiled.string, rows)


MIGRATIONS = Path(__file__).parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 30_000


class StoreError(Exception):
    """The store could not be opened or migrated. The message says what to do."""


def _sqlite_engine(url: str, *, immediate: bool, autocheckpoint: bool = True) -> Engine:
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event (below) issue BEGIN, so we choose its kind.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA synchronous=NORMAL")
        if not autocheckpoint:  # the server's CheckpointLoop does it, off the writers' path
            cur.execute("PRAGMA wal_autocheckpoint=0")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class WriteLock:
    """Turns between SQLite writers: first among this process's threads (with a timeout),
    then among processes through an flock on `path` (the kernel queues the waiters and wakes
    the next one when the holder releases it or dies). Not reentrant."""

    def __init__(self, path: Path, timeout_s: float):
        self.path = path
        self.timeout_s = timeout_s
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._pid = -1

    def _file(self) -> int:
        # An flock belongs to an open file description, and a forked child shares its
        # parent's: a process opens its own.
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._pid = os.getpid()
        return self._fd

    @contextmanager
    def held(self) -> Iterator[None]:
        if not self._thread_lock.acquire(timeout=self.timeout_s):
            raise StoreError(
                f"the database stayed busy for {self.timeout_s:g} s (a write transaction did "
                "not finish); retry, and check the server log for a stuck request"
            )
        try:
            fd = self._file()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None


class Store:
    """The database behind gpupool: engines and transaction helpers."""

    def __init__(self, url: str, *, wal_autocheckpoint: bool = True):
        self.url = url
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            if parsed.database in (None, "", ":memory:"):
                raise StoreError(
                    "an in-memory SQLite database cannot be shared between connections; "
                    "use a file URL such as sqlite:////var/lib/gpupool/gpupool.db"
                )
            kw = {"autocheckpoint": wal_autocheckpoint}
            self.engine = _sqlite_engine(url, immediate=False, **kw)
            self._write_engine = _sqlite_engine(url, immediate=True, **kw)
            lock_path = Path(str(parsed.database) + ".writelock")
            self._write_lock: WriteLock | None = WriteLock(lock_path, SQLITE_BUSY_TIMEOUT_MS / 1000)
        else:
            self.engine = create_engine(url, pool_size=20, max_overflow=40, pool_pre_ping=True)
            self._write_engine = self.engine
            self._write_lock = None
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(self._write_engine, expire_on_commit=False)

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reading; never commits."""
        with self._read() as s:
            try:
                yield s
            finally:
                s.rollback()

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A write transaction: commits when the block ends, rolls back on an exception.

        On SQLite the writers of every process take turns through the `WriteLock` first."""
        if self._write_lock is None:
            with self._write() as s, s.begin():
                yield s
            return
        with self._write_lock.held(), self._write() as s, s.begin():
            yield s

    def migrate(self) -> None:
        """Bring the schema to the newest revision (idempotent)."""
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        with self._write_engine.connect() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
            conn.commit()

    def checkpoint(self) -> None:
        """Copy the SQLite write-ahead log back into the database file (PASSIVE: it waits for
        nobody and nobody waits for it). A no-op on other databases.

        For stores opened with `wal_autocheckpoint=False`: by default SQLite checkpoints
        inside the commit that fills the log, while that writer still holds the write lock,
        so every other writer (an API request) waits behind the checkpoint's disk writes. The
        server calls this from `server.loops.checkpoint.CheckpointLoop` instead."""
        if self.dialect == "sqlite":
            with self.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        if self._write_lock is not None:
            self._write_lock.close()
        self.engine.dispose()
        if self._write_engine is not self.engine:
            self._write_engine.dispose()


def open_store(url: str, *, migrate: bool = True, wal_autocheckpoint: bool = True) -> Store:
    """Open the database at `url` and (by default) run migrations up to head.
    `wal_autocheckpoint=False` (SQLite): the server's processes leave checkpoints to its
    CheckpointLoop (`Store.checkpoint`)."""
    path = make_url(url).database if url.startswith("sqlite:///") else None
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        private_sqlite_files(Path(path))
    try:
        store = Store(url, wal_autocheckpoint=wal_autocheckpoint)
        if migrate:
            store.migrate()
    except StoreError:
        raise
    except Exception as e:  # noqa: BLE001 - any driver error becomes one clear message
        raise StoreError(f"cannot open the database {make_url(url)!r}: {e}") from e
    if path:
        private_sqlite_files(Path(path))
    return store


SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal", ".writelock")


def private_sqlite_files(db: Path) -> None:
    """Make a SQLite database and its side files readable and writable by their owner only
    (0600): it holds password hashes, token hashes and every tenant's commands. The database
    file is created 0600 if missing, so the files SQLite makes beside it (which copy its
    mode) are private from the start; files of existing installs are fixed."""
    if str(db) in ("", ":memory:"):
        return
    with contextlib.suppress(FileExistsError):
        os.close(os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    for p in (db, *(Path(f"{db}{suffix}") for suffix in SQLITE_SIDE_FILES)):
        with contextlib.suppress(FileNotFoundError):
            if p.stat().st_mode & 0o077:
                p.chmod(0o600)
