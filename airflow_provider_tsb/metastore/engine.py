"""Engines for the tsb metastore: URL resolution, SQLite pragmas, transactions.

SQLite (the embedded default, ``$AIRFLOW_HOME/tsb.db``) runs in WAL mode with a busy timeout
so that readers never block the writer; write transactions start with ``BEGIN IMMEDIATE`` so
that two writers queue instead of failing with ``database is locked`` (SQLite docs,
"Write-Ahead Logging" and "BEGIN TRANSACTION"). Within one process, SQLite write transactions
also take a per-engine lock first: SQLite's busy handler polls for the database lock with
sleeps that back off up to 100 ms, so under many writer threads (the api-server, where every
resolution that leases writes) a writer could sleep through several releases and wait seconds;
the in-process lock hands the database over as soon as the previous writer commits. Writers
in other processes still queue through the busy timeout. PostgreSQL is the production database.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import NoSuchModuleError
from sqlalchemy.orm import Session

from airflow_provider_tsb.exceptions import MetastoreError
from airflow_provider_tsb.metastore.deadline import GRACE_S, CallDeadline, call_seconds, install_call_deadline

#: seconds a new PostgreSQL connection may take to be set up (libpq ``connect_timeout``)
PG_CONNECT_TIMEOUT_S = 5


def postgres_timeouts(statement_s: float) -> dict[str, Any]:
    """libpq connection parameters that bound every wait on PostgreSQL (libpq docs, "Parameter
    Key Words"): ``connect_timeout`` for a server that takes connections but never answers,
    TCP keepalives (10 s idle, 5 s apart, 3 probes) and ``tcp_user_timeout`` for a peer that
    vanished, and the server's ``statement_timeout`` (``statement_s`` seconds) for a statement
    that waits too long for a lock. A frozen server is :mod:`.deadline`'s."""
    return {
        "connect_timeout": PG_CONNECT_TIMEOUT_S,
        "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
        "tcp_user_timeout": 30_000,
        "options": f"-c statement_timeout={int(statement_s * 1000)}",
    }


#: environment variable holding a SQLAlchemy URL; it wins over the Airflow connection
METASTORE_URL_ENV = "TSB_METASTORE_URL"
#: milliseconds a SQLite writer waits for the lock before failing
SQLITE_BUSY_TIMEOUT_MS = 60_000


def default_sqlite_url() -> str:
    """``sqlite:///$AIRFLOW_HOME/tsb.db`` (``~/airflow`` when ``AIRFLOW_HOME`` is unset)."""
    home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return f"sqlite:///{os.path.join(os.path.abspath(home), 'tsb.db')}"


def normalize_url(url: str) -> str:
    """Map driver-less PostgreSQL URLs (``postgresql://``, ``postgres://``) to the driver that is
    installed: psycopg2 (the ``postgres`` extra's) unless psycopg 3 is there. SQLAlchemy 2.1's
    own default for ``postgresql://`` is psycopg 3, which the extra does not install."""
    import importlib.util

    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            has_psycopg3 = importlib.util.find_spec("psycopg") is not None
            driver = "postgresql" if has_psycopg3 else "postgresql+psycopg2"
            return f"{driver}://" + url[len(prefix):]
    return url


def _make_folder(folder: str, shown: str) -> None:
    """Create a SQLite metastore's folder, or raise :class:`MetastoreError` naming the URL."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise MetastoreError(
            f"cannot open the SQLite metastore at {shown}: its folder {folder!r} cannot be created "
            f"({exc.strerror or exc}); give a sqlite:////abs/path/tsb.db URL in a folder you may write"
        ) from exc


def create_metastore_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine for the metastore at ``url``.

    Args:
        url: SQLAlchemy URL (``sqlite:///path`` or ``postgresql+psycopg2://...``).
        **kwargs: passed to :func:`sqlalchemy.create_engine`.

    Raises:
        MetastoreError: the URL cannot be parsed, its scheme or driver is unknown or not
            installed, or a SQLite database's folder cannot be created; the message names the URL
            (password hidden).
    """
    url = normalize_url(url)
    try:
        parsed = make_url(url)
    except Exception as exc:  # sqlalchemy.exc.ArgumentError and friends
        raise MetastoreError(
            f"invalid metastore URL {url!r}: {exc}. Set {METASTORE_URL_ENV} or the 'tsb_default' "
            "connection to a SQLAlchemy URL such as sqlite:////abs/path/tsb.db or "
            "postgresql+psycopg2://user:password@host:5432/db"
        ) from exc
    shown = parsed.render_as_string(hide_password=True)
    try:
        if parsed.get_backend_name() == "sqlite":
            database = parsed.database or ""
            if database and database != ":memory:":
                _make_folder(os.path.dirname(os.path.abspath(database)), shown)
            engine = create_engine(
                parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **kwargs
            )
            _configure_sqlite(engine)
        else:
            # a process serving many readers (the api-server's 40 threads) keeps its connections:
            # beyond pool_size each checkin closes one and the next checkout forks a backend
            kwargs.setdefault("pool_size", 20)
            kwargs.setdefault("max_overflow", 20)
            seconds = call_seconds()
            if parsed.get_driver_name() in ("psycopg2", "psycopg"):  # libpq's: a URL's own parameters win
                ours = {k: v for k, v in postgres_timeouts(seconds).items() if k not in parsed.query}
                kwargs["connect_args"] = {**ours, **kwargs.get("connect_args", {})}
            engine = create_engine(parsed, **kwargs)
            install_call_deadline(engine, CallDeadline(seconds + GRACE_S))
            if not kwargs.get("pool_pre_ping"):
                ping_when_idle(engine)
    except ImportError as exc:
        raise MetastoreError(
            f"the driver for metastore URL {shown} is not installed ({exc}); for PostgreSQL "
            "install 'airflow-provider-tsb[postgres]'"
        ) from exc
    except NoSuchModuleError as exc:  # an unknown scheme or driver
        raise MetastoreError(
            f"cannot open the metastore at {shown}: {exc}; use a sqlite:/// or postgresql:// URL"
        ) from exc
    return engine


#: engine -> the lock its SQLite write transactions take in this process (module doc)
_WRITE_LOCKS: weakref.WeakKeyDictionary[Engine, threading.RLock] = weakref.WeakKeyDictionary()


def sqlite_write_lock(engine: Engine) -> threading.RLock | None:
    """The lock this process's write transactions on SQLite ``engine`` take before ``BEGIN
    IMMEDIATE`` (module doc); ``None`` for an engine of another backend."""
    return _WRITE_LOCKS.get(engine)


def _configure_sqlite(engine: Engine) -> None:
    _WRITE_LOCKS[engine] = threading.RLock()  # re-entrant: a nested writer meets SQLite's busy timeout, as before

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # let SQLAlchemy, not pysqlite, decide when transactions begin
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get("tsb_write") else "BEGIN")


#: seconds a pooled connection may sit idle before its next checkout pings it
PING_AFTER_IDLE_S = 2.0


def ping_when_idle(engine: Engine, idle_s: float = PING_AFTER_IDLE_S) -> None:
    """Ping a pooled connection at checkout only when it was idle for over ``idle_s`` seconds.

    SQLAlchemy's ``pool_pre_ping`` pings at every checkout: one more round trip per
    transaction, a visible share of the api-server's time under many readers (docs/benchmarks.md). A
    connection used within the last ``idle_s`` seconds is handed out as is; one that sat idle
    (where a database restart or an idle timeout strikes) is pinged and, if dead, replaced --
    SQLAlchemy's "pessimistic disconnect handling" with a ``checkout`` event ("Dealing with
    Disconnects" in its pooling docs). A connection that dies while busy fails that one call,
    SQLAlchemy invalidates the pool, and :mod:`.retry` retries the transient error.
    """
    from sqlalchemy.exc import DisconnectionError

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["tsb_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("tsb_idle_since")
        if since is None or time.monotonic() - since <= idle_s:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)  # what pool_pre_ping runs
        except Exception as exc:  # any driver error: the connection is unusable
            raise DisconnectionError(f"pooled metastore connection is dead: {exc}") from exc
        if not alive:
            raise DisconnectionError("pooled metastore connection is dead")


def is_sqlite(engine: Engine) -> bool:
    """True when the engine's backend is SQLite."""
    return engine.dialect.name == "sqlite"


@contextmanager
def transaction(engine: Engine, *, write: bool = False) -> Iterator[Session]:
    """A session in one database transaction, committed on success, rolled back on error.

    Args:
        engine: the metastore engine.
        write: the transaction will write. On SQLite it then takes the write lock at
            ``BEGIN`` (``BEGIN IMMEDIATE``) so concurrent writers queue up for the busy timeout
            instead of failing on a stale snapshot. On PostgreSQL reads use REPEATABLE READ so
            one resolution sees one snapshot.
    """
    lock = sqlite_write_lock(engine) if write else None
    with lock if lock is not None else contextlib.nullcontext(), engine.connect() as conn:
        if is_sqlite(engine):
            conn.info["tsb_write"] = write
        elif not write:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        try:
            with conn.begin(), Session(bind=conn, expire_on_commit=False) as session:
                yield session
                session.flush()
        finally:
            conn.info.pop("tsb_write", None)
