"""Hook to the tsb metastore (the MetaService's database).

Resolution order of the database URL (first match wins):

1. ``TSB_METASTORE_URL`` (a SQLAlchemy URL);
2. the Airflow connection ``tsb_conn_id`` (default ``tsb_default``): a ``tsb`` connection
   whose extra ``sqlalchemy_url`` is the URL, or whose host/port/login/password/schema
   describe a PostgreSQL database, or a ``postgres`` / ``sqlite`` connection;
3. SQLite at ``$AIRFLOW_HOME/tsb.db``, the embedded default.

Airflow 3 forbids task and trigger code from using Airflow's metadata database; this hook
never does: it opens the metastore's own SQLAlchemy engine.
"""

from __future__ import annotations

import os
from functools import cached_property
from typing import Any
from urllib.parse import quote_plus

from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_tsb.exceptions import TsbError
from airflow_provider_tsb.metastore.engine import METASTORE_URL_ENV, default_sqlite_url
from airflow_provider_tsb.metastore.store import CommitState, MetaStore, now_ms

_ENGINES: dict[str, MetaStore] = {}


class TsbMetastoreHook(BaseHook):
    """Open the tsb :class:`~airflow_provider_tsb.metastore.store.MetaStore`.

    :param tsb_conn_id: Airflow connection id of the metastore (default ``tsb_default``).
    """

    conn_name_attr = "tsb_conn_id"
    default_conn_name = "tsb_default"
    conn_type = "tsb"
    hook_name = "TSB Metastore"

    def __init__(self, tsb_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tsb_conn_id = tsb_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Connection form: a SQLAlchemy URL in extra, or PostgreSQL host fields."""
        return {
            "hidden_fields": [],
            "relabeling": {"schema": "Database"},
            "placeholders": {
                "host": "localhost (PostgreSQL host; leave empty for SQLite)",
                "extra": '{"sqlalchemy_url": "postgresql+psycopg2://user:pw@host:5432/tsb"}',
            },
        }

    def get_uri(self) -> str:
        """The metastore's SQLAlchemy URL (see module docstring for the resolution order)."""
        if os.environ.get(METASTORE_URL_ENV):
            return os.environ[METASTORE_URL_ENV]
        conn = self._find_connection()
        if conn is None:
            return default_sqlite_url()
        return connection_to_url(conn)

    def _find_connection(self) -> Any | None:
        try:
            return self.get_connection(self.tsb_conn_id)
        except Exception as exc:  # AirflowNotFoundException, or no Airflow configured at all
            if self.tsb_conn_id != self.default_conn_name:
                raise
            self.log.debug("no connection %s (%s); using the embedded SQLite metastore", self.tsb_conn_id, exc)
            return None

    def get_conn(self) -> MetaStore:
        """A :class:`MetaStore` on the resolved URL (engines are pooled per URL and process)."""
        return metastore_for_url(self.get_uri())

    @cached_property
    def metastore(self) -> MetaStore:
        """Same as :meth:`get_conn`, cached on the hook."""
        return self.get_conn()

    def barrier_committed(self, tables: list[str], barrier: int) -> bool:
        """``barrier_committed(tables, barrier)``: the barrier is WRITTEN in every table (COMMIT).

        Raises:
            UnknownTableError: a table is not registered.
        """
        store = self.get_conn()
        states = [store.table_states.table_state(table, barrier) for table in tables]
        return not states or CommitState.of(s.state if s is not None else None for s in states) is CommitState.COMMIT

    def lag_report(self, tables: list[str], barrier: int) -> str:
        """One line per table: the barrier it has reached and how far it lags behind ``barrier``.

        The time lag is measured from the generation of the oldest barrier the table still
        misses (seconds).
        """
        store = self.get_conn()
        lines = []
        for table in tables:
            info = store.registry.table(table)
            newest = store.table_states.newest_written(table)
            reached = newest.barrier if newest else 0
            if reached >= barrier:
                lines.append(f"{info.name}: at barrier {reached}, WRITTEN (not lagging)")
                continue
            missing = reached + 1
            try:
                since = store.barriers.barrier(info.topology, missing).created_at_ms
                lag_s = max(0.0, (now_ms() - since) / 1000)
                lag = f"lagging {lag_s:.1f} s"
            except TsbError:
                lag = f"barrier {missing} not generated yet"
            lines.append(
                f"{info.name}: at barrier {reached if newest else 'none'}, waiting for barrier {barrier} "
                f"({barrier - reached} barrier(s) behind, {lag})"
            )
        return "; ".join(lines)

    def test_connection(self) -> tuple[bool, str]:
        """Check that the metastore is reachable and migrated (Airflow's "Test" button)."""
        try:
            revision = self.get_conn().check()
        except Exception as exc:
            return False, str(exc)
        return True, f"tsb metastore reachable at revision {revision}"


def connection_to_url(conn: Any) -> str:
    """Turn an Airflow connection into a SQLAlchemy URL for the metastore.

    Raises:
        ValueError: the connection type is not usable (names the connection and its type).
    """
    extra = conn.extra_dejson or {}
    if extra.get("sqlalchemy_url"):
        return str(extra["sqlalchemy_url"])
    conn_type = (conn.conn_type or "").lower()
    if conn_type == "sqlite" or (conn_type == "tsb" and extra.get("dialect") == "sqlite"):
        return f"sqlite:///{conn.host}"
    if conn_type in ("tsb", "postgres", "postgresql"):
        if not conn.host:
            return default_sqlite_url()
        auth = ""
        if conn.login:
            auth = quote_plus(conn.login)
            if conn.password:
                auth += ":" + quote_plus(conn.password)
            auth += "@"
        port = f":{conn.port}" if conn.port else ""
        return f"postgresql+psycopg2://{auth}{conn.host}{port}/{conn.schema or 'tsb'}"
    raise ValueError(
        f"connection {conn.conn_id!r} has type {conn.conn_type!r}; the tsb metastore needs a 'tsb', "
        "'postgres' or 'sqlite' connection, or extra {'sqlalchemy_url': ...}"
    )


def metastore_for_url(url: str) -> MetaStore:
    """A process-wide :class:`MetaStore` per URL (one connection pool each)."""
    store = _ENGINES.get(url)
    if store is None:
        store = _ENGINES[url] = MetaStore(url)
    return store
