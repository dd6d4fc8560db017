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

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.exceptions import TsbError
from airflow_provider_tsb.metastore.engine import METASTORE_URL_ENV, default_sqlite_url
from airflow_provider_tsb.metastore.locations import configured_location_roots
from airflow_provider_tsb.metastore.store import CommitState, MetaStore, now_ms
from airflow_provider_tsb.names import normalize_table_name
from airflow_provider_tsb.ui.links import history_path, iso_utc

_ENGINES: dict[str, MetaStore] = CACHES.add("hooks.metastores", {})


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
        #: the URL once :meth:`aget_conn` resolved it (a trigger's hook looks it up once)
        self._uri: str | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Connection form (the provider info's ``ui-field-behaviour``, in the hook's snake_case
        keys; Airflow 3's UI reads the provider info: :mod:`airflow_provider_tsb.get_provider_info`)."""
        from airflow_provider_tsb.get_provider_info import TSB_UI_FIELD_BEHAVIOUR

        return {key.replace("-", "_"): value for key, value in TSB_UI_FIELD_BEHAVIOUR.items()}

    def get_uri(self) -> str:
        """The metastore's SQLAlchemy URL (see module docstring for the resolution order)."""
        if self._uri is not None:
            return self._uri
        if os.environ.get(METASTORE_URL_ENV):
            return os.environ[METASTORE_URL_ENV]
        conn = self._find_connection()
        if conn is None:
            return default_sqlite_url()
        return connection_to_url(conn)

    async def aget_conn(self) -> MetaStore:
        """:meth:`get_conn` for trigger code, on the triggerer's event loop: the connection is
        looked up with the task SDK's async call (``aget_connection``), and this hook keeps the
        URL, so its later calls in worker threads look nothing up. A sync lookup from a worker
        thread, the way :meth:`get_conn` does it, interleaves with the trigger runner's own
        messages to its supervisor; several triggers doing it at once can stall Airflow 3's
        triggerer ("TriggerRunner subprocess event loop appears deadlocked", apache/airflow#66412).

        Raises:
            ValueError: the connection's type is not usable (names it).
        """
        import asyncio

        if self._uri is None:
            if os.environ.get(METASTORE_URL_ENV):
                self._uri = os.environ[METASTORE_URL_ENV]
            else:
                try:
                    conn = await self.aget_connection(self.tsb_conn_id)
                except Exception:  # not found, or no Airflow configured: as _find_connection
                    if self.tsb_conn_id != self.default_conn_name:
                        raise
                    conn = None
                self._uri = default_sqlite_url() if conn is None else connection_to_url(conn)
        return await asyncio.to_thread(metastore_for_url, self._uri)

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
        states = [store.table_states.get(table, barrier) for table in tables]
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
                since = store.barriers.get(info.topology, missing).created_at_ms
                lag_s = max(0.0, (now_ms() - since) / 1000)
                lag = f"lagging {lag_s:.1f} s"
            except TsbError:
                lag = f"barrier {missing} not generated yet"
            lines.append(
                f"{info.name}: at barrier {reached if newest else 'none'}, waiting for barrier {barrier} "
                f"({barrier - reached} barrier(s) behind, {lag})"
            )
        return "; ".join(lines)

    def committed_barriers(
        self, tables: list[str], after: int, limit: int = 100
    ) -> tuple[list[dict[str, Any]], int]:
        """The barriers above ``after`` now committed (WRITTEN) in every table of ``tables``.

        Scans at most ``limit`` barrier ids above ``after`` (up to the lowest newest WRITTEN
        barrier over the tables: a barrier above it cannot be committed in all of them yet).

        Returns:
            (one :func:`committed_barrier_payload` per committed barrier, ascending; the highest
            barrier id scanned: the next call's ``after``).

        Raises:
            UnknownTableError: a table is not registered.
        """
        store = self.get_conn()
        names = [normalize_table_name(t) for t in tables]
        top = committed_head(store, names)
        if top <= after:
            return [], after
        scanned = min(top, after + limit)
        candidates = list(range(after + 1, scanned + 1))
        entries = store.table_states.written_entries(names, candidates)
        payloads = [
            committed_barrier_payload(store, names, b, entries)
            for b in candidates if all((n, b) in entries for n in names)
        ]
        return payloads, scanned

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
        if not conn.host:
            raise ValueError(f"connection {conn.conn_id!r}: dialect sqlite needs Host, the SQLite database file")
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
    """A process-wide :class:`MetaStore` per URL (one connection pool each); its
    ``registry.register_table`` keeps to :func:`configured_location_roots`."""
    store = _ENGINES.get(url)
    if store is None:
        store = _ENGINES[url] = MetaStore(url, location_roots=configured_location_roots())
    return store



def committed_head(store: MetaStore, tables: list[str]) -> int:
    """The lowest newest WRITTEN barrier over ``tables`` (0 when one has none, or no tables):
    no barrier above it is committed in all of them yet.

    Raises:
        UnknownTableError: a table is not registered.
    """
    heads = [store.table_states.newest_written(t) for t in tables]
    if not heads or any(h is None for h in heads):
        return 0
    return min(h.barrier for h in heads if h is not None)


def committed_barrier_payload(
    store: MetaStore, tables: list[str], barrier: int, entries: dict[tuple[str, int], tuple[int, int | None]]
) -> dict[str, Any]:
    """What announces ``barrier`` committed in ``tables`` (JSON values).

    ``barrier``; ``barrier_ts_ms`` / ``barrier_ts`` (the barrier timestamp, epoch ms and ISO 8601
    UTC) and ``ts_kind``, from the first table's topology; ``commit_state`` (``COMMIT``);
    ``versions`` (``{table: Delta version}``); ``lag_s`` (seconds from the barrier's generation
    to its last WRITTEN over the tables); ``tables``; ``tsb_history`` (each table's TSB page).
    ``entries`` is :meth:`~airflow_provider_tsb.metastore.table_states.TableStateManager.written_entries`
    of the tables at the barrier.
    """
    topology = store.registry.table(tables[0]).topology
    try:
        info = store.barriers.get(topology, barrier)
        ts_ms, ts_kind, created = info.ts_ms, str(info.ts_kind), info.created_at_ms
    except TsbError:  # a barrier of another topology of the barrier domain
        ts_ms, ts_kind, created = None, None, None
    written = [entries[(t, barrier)][1] for t in tables if entries[(t, barrier)][1] is not None]
    lag = round(max(0.0, (max(written) - created) / 1000), 3) if written and created is not None else None
    return {
        "barrier": barrier, "barrier_ts_ms": ts_ms, "barrier_ts": iso_utc(ts_ms), "ts_kind": ts_kind,
        "commit_state": str(CommitState.COMMIT), "versions": {t: entries[(t, barrier)][0] for t in tables},
        "lag_s": lag, "tables": list(tables), "topology": topology,
        "tsb_history": {t: history_path(store.registry.table(t).topology, t) for t in tables},
    }


def use_storage_connection(conn_id: str | None) -> dict[str, str]:
    """Set this process's object-storage options (:func:`airflow_provider_tsb.delta.storage.configure`)
    from the Airflow connection ``conn_id`` (``aws``, ``wasb``/``adls``, ``google_cloud_platform``,
    or any connection with a ``storage_options`` extra); returns them. ``None``: nothing is set
    and ``{}`` returned (local tables, or ``$TSB_STORAGE_OPTIONS``).

    Every hook that opens tables takes a ``storage_conn_id`` and calls this before it does.

    Raises:
        AirflowNotFoundException: no connection ``conn_id`` (Airflow's own error, naming it).
    """
    if not conn_id:
        return {}
    from airflow_provider_tsb.delta.storage import configure, storage_options_from_connection

    options = storage_options_from_connection(BaseHook.get_connection(conn_id))
    configure(options)
    return options
