"""SQLite write transactions of one process queue on their engine's lock (metastore/engine.py).

SQLite's busy handler polls for the database lock with sleeps that back off, so many writer
threads of one process (the api-server) could each sleep through several releases. The
engine's in-process lock hands the database to the next writer as soon as one commits; readers
(WAL) never wait for it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import text

from airflow_provider_tsb.metastore.engine import create_metastore_engine, sqlite_write_lock, transaction


def test_sqlite_writers_of_one_process_queue_on_the_engine_lock_and_readers_do_not(tmp_path: Path) -> None:
    engine = create_metastore_engine(f"sqlite:///{tmp_path / 'lock.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    lock = sqlite_write_lock(engine)
    assert lock is not None
    inside, release = threading.Event(), threading.Event()
    order: list[str] = []

    def first() -> None:
        with transaction(engine, write=True) as s:
            s.execute(text("INSERT INTO t VALUES (1)"))
            inside.set()
            release.wait(10)
            order.append("first")

    def second() -> None:
        with transaction(engine, write=True) as s:
            s.execute(text("INSERT INTO t VALUES (2)"))
            order.append("second")

    a = threading.Thread(target=first)
    a.start()
    assert inside.wait(10)
    b = threading.Thread(target=second)
    b.start()
    assert not lock.acquire(blocking=False), "a write transaction holds its engine's lock"
    with transaction(engine) as s:  # a reader does not wait for the writer (WAL)
        assert s.execute(text("SELECT count(*) FROM t")).scalar() == 0
    release.set()
    a.join(10)
    b.join(10)
    assert order == ["first", "second"]
    with transaction(engine) as s:
        assert s.execute(text("SELECT count(*) FROM t")).scalar() == 2
    assert lock.acquire(blocking=False), "the lock is free once the writers committed"
    lock.release()
    engine.dispose()


def test_a_driverless_postgresql_url_uses_the_installed_driver() -> None:
    """Issue 57 item 7: ``postgresql://`` said psycopg was not installed, although the
    ``postgres`` extra (psycopg2) was: SQLAlchemy 2.1's default driver is psycopg 3."""
    import importlib.util

    from airflow_provider_tsb.metastore.engine import normalize_url

    expected = "postgresql" if importlib.util.find_spec("psycopg") else "postgresql+psycopg2"
    assert normalize_url("postgresql://u:p@h:5432/db") == f"{expected}://u:p@h:5432/db"
    assert normalize_url("postgres://u@h/db") == f"{expected}://u@h/db"
    assert normalize_url("postgresql+asyncpg://u@h/db") == "postgresql+asyncpg://u@h/db"
    assert normalize_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
