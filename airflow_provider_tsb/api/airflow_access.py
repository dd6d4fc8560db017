"""The REST API's authorization inside Airflow: topologies -> their DAGs -> the auth manager.

:class:`AirflowTopologyAccess` implements :class:`~airflow_provider_tsb.api.access.TopologyAccess`
for one request of one user (rules in :mod:`airflow_provider_tsb.api.access`):

1. the topology's tables come from the tsb metastore;
2. the DAGs of a topology are the active (not stale) DAGs with a task whose **outlet asset** is
   named after one of those tables -- Airflow's ``task_outlet_asset_reference``, written by the
   dag-processor from the DAG files (the job tasks of ``TsbTopologyTaskGroup`` declare their sinks
   as outlets, :func:`airflow_provider_tsb.assets.table_asset`). The link is Airflow's own record
   of the DAG files, so no API call can forge it;
3. each DAG is checked with ``get_auth_manager().is_authorized_dag(method, DagDetails(id,
   team_name))`` (Airflow "Access Control"; the team comes from the DAG's bundle in multi-team
   mode), as ``airflow.api_fastapi.core_api.security.requires_access_dag`` does. A topology with
   no DAG is checked with ``DagDetails(id=None)``: Airflow's "all DAGs" permission.

Answers are cached for the request (one instance per request). The link of steps 1 and 2 (a
topology's tables, a table's DAGs) is also kept per process for ``[tsb] access_cache_seconds``
(default :data:`DEFAULT_ACCESS_CACHE_SECONDS`; ``0`` turns it off): it changes only when a topology
is registered or a DAG file is parsed, and reading it costs a metastore and an Airflow-database
query per request (docs/benchmarks.md, "REST API under many readers"). The auth manager's decision
(step 3) is never cached here: a user's role change applies to the next request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cachetools import TTLCache

from airflow_provider_tsb.api.access import Method, TopologyAccess, default_location_roots
from airflow_provider_tsb.caches import CACHES

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from airflow_provider_tsb.metastore.store import MetaStore


#: default seconds the topology -> tables -> DAGs link is kept per process (``[tsb] access_cache_seconds``)
DEFAULT_ACCESS_CACHE_SECONDS = 5.0


def access_cache_seconds() -> float:
    """``[tsb] access_cache_seconds``: seconds the topology/DAG link is kept per process (0: off).

    Raises:
        ValueError: the setting is not a number from 0 to 3600 (names the setting and value).
    """
    from airflow_provider_tsb.api.limits import config_seconds

    return config_seconds("access_cache_seconds", DEFAULT_ACCESS_CACHE_SECONDS)


class LinkCache:
    """A thread-safe per-process cache of the link (a topology's tables, a table's DAG ids) with
    a time to live; ``seconds == 0`` keeps nothing.

    Args:
        seconds: time to live of an entry, seconds.
        maxsize: most entries kept (the least recently used go first).
    """

    def __init__(self, seconds: float, maxsize: int = 100_000) -> None:
        self.seconds = seconds
        self._cache: TTLCache[tuple[str, str], Any] | None = TTLCache(maxsize, seconds) if seconds > 0 else None
        self._lock = threading.Lock()

    def get_many(
        self, kind: str, keys: Iterable[str], load: Callable[[list[str]], Mapping[str, Any]]
    ) -> dict[str, Any]:
        """``{key: value}`` for ``keys``, calling ``load`` (outside the lock) for the missing ones;
        a key ``load`` leaves out is neither answered nor kept (asked again next time)."""
        keys = list(dict.fromkeys(keys))
        found: dict[str, Any] = {}
        if self._cache is not None:
            with self._lock:
                for k in keys:
                    value = self._cache.get((kind, k), _MISSING)
                    if value is not _MISSING:
                        found[k] = value
        missing = [k for k in keys if k not in found]
        if missing:
            loaded = load(missing)
            found.update(loaded)
            if self._cache is not None:
                with self._lock:
                    for k in missing:
                        if k in loaded:
                            self._cache[(kind, k)] = loaded[k]
        return found


_MISSING = object()
_link_cache: LinkCache | None = None


def _forget_links() -> None:
    global _link_cache
    _link_cache = None


CACHES.on_clear("api.access_links", _forget_links)


def link_cache() -> LinkCache:
    """The process's :class:`LinkCache` (built on first use from ``[tsb] access_cache_seconds``)."""
    global _link_cache
    if _link_cache is None:
        _link_cache = LinkCache(access_cache_seconds())
    return _link_cache


class AirflowTopologyAccess(TopologyAccess):
    """Authorization of ``user`` through Airflow's auth manager (see module docstring).

    Args:
        user: the authenticated Airflow user (``BaseUser``).
        store: the tsb metastore (for the tables of each topology).
    """

    api_root_tables = False

    def __init__(self, user: Any, store: MetaStore) -> None:
        self.user = user
        self.store = store
        self.location_roots = default_location_roots()
        self._tables: dict[str, list[str]] = {}
        self._loaded: set[str] = set()
        self._all_loaded = False
        self._outlets: dict[str, frozenset[str]] = {}
        self._decisions: dict[tuple[Method, str | None], bool] = {}

    # ------------------------------------------------------------------ the link
    def _topology_tables(self, names: Iterable[str] | None = None) -> dict[str, list[str]]:
        """{topology: its table names}: for a few ``names`` one query each, else every table once
        (kept per process, :class:`LinkCache`)."""
        if self._all_loaded:
            return self._tables
        wanted = None if names is None else [n for n in dict.fromkeys(names) if n not in self._loaded]
        if wanted is None or len(wanted) > 3:
            everything = link_cache().get_many("all", [""], lambda _keys: {"": self._all_tables()})[""]
            self._tables = {k: list(v) for k, v in everything.items()}
            self._all_loaded = True
        elif wanted:
            found = link_cache().get_many("topology", wanted, lambda keys: {
                k: tuple(t.name for t in self.store.registry.tables(k)) for k in keys
            })
            self._tables.update({k: list(v) for k, v in found.items()})
            self._loaded.update(wanted)
        return self._tables

    def _all_tables(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for t in self.store.registry.tables():
            out.setdefault(t.topology, []).append(t.name)
        return {k: tuple(v) for k, v in out.items()}

    def topologies_of(self, store: MetaStore, tables: list[str]) -> dict[str, str]:
        """``{canonical table name: topology}`` of the registered tables among ``tables``; the
        registered ones are kept per process (:class:`LinkCache`), unregistered ones read again."""
        from airflow_provider_tsb.names import normalize_table_name

        names = list(dict.fromkeys(normalize_table_name(t) for t in tables))
        return link_cache().get_many("table", names, store.registry.topologies_of)

    def dags_of_tables(self, tables: Iterable[str]) -> Mapping[str, frozenset[str]]:
        """{table: active DAG ids with a task whose outlet asset is named after it} (tables
        without one are absent; kept per process, :class:`LinkCache`)."""
        wanted = [t for t in dict.fromkeys(tables) if t not in self._outlets]
        if wanted:
            self._outlets.update(link_cache().get_many("outlets", wanted, outlet_dags))
        return {t: self._outlets[t] for t in tables if self._outlets.get(t)}

    def task_log_urls(self, job_sinks: Mapping[str, Sequence[str]]) -> dict[str, str]:
        """{job id: Airflow UI URL of its newest task instance} (:mod:`.airflow_task_logs`).

        The links are an aid: when Airflow's database cannot be read they are left out (logged)
        and the topology is still answered.
        """
        from sqlalchemy.exc import SQLAlchemyError

        from airflow_provider_tsb.api.airflow_task_logs import task_log_urls

        try:
            return task_log_urls(job_sinks)
        except SQLAlchemyError as exc:
            log.warning("task log links of jobs %s left out: Airflow's database: %s", sorted(job_sinks), exc)
            return {}

    def dags_of(self, topology: str) -> frozenset[str]:
        """Ids of the active DAGs that write a table of ``topology``."""
        tables = self._topology_tables([topology]).get(topology, [])
        return frozenset().union(*self.dags_of_tables(tables).values()) if tables else frozenset()

    # ------------------------------------------------------------------ the auth manager
    def _decide(self, method: Method, dag_ids: Iterable[str | None]) -> None:
        todo = [d for d in dict.fromkeys(dag_ids) if (method, d) not in self._decisions]
        if not todo:
            return
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

        teams = _team_names([d for d in todo if d is not None])
        manager = get_auth_manager()
        for dag_id in todo:
            self._decisions[(method, dag_id)] = bool(
                manager.is_authorized_dag(
                    method=method, details=DagDetails(id=dag_id, team_name=teams.get(dag_id) if dag_id else None),
                    user=self.user,
                )
            )

    def all_dags(self, method: Method) -> bool:
        """Airflow's "all DAGs" permission: ``is_authorized_dag(method, DagDetails(id=None))``."""
        self._decide(method, [None])
        return self._decisions[(method, None)]

    def allowed(self, method: Method, topologies: Iterable[str]) -> set[str]:
        """The topologies of ``topologies`` whose every DAG the user may ``method``."""
        names = list(dict.fromkeys(topologies))
        tables = self._topology_tables(names)
        all_tables = [t for n in names for t in tables.get(n, [])]
        self.dags_of_tables(all_tables)
        needed = {n: self.dags_of(n) for n in names}
        self._decide(method, [d for dags in needed.values() for d in dags] + [None])
        return {
            n for n, dags in needed.items()
            if (all(self._decisions[(method, d)] for d in dags) if dags else self._decisions[(method, None)])
        }


def outlet_dags(tables: list[str]) -> dict[str, frozenset[str]]:
    """{table: ids of the active DAGs with a task whose outlet asset is named after it} for every
    table of ``tables`` (an empty set when none); queries Airflow's metadata database."""
    from airflow.models.asset import AssetModel, TaskOutletAssetReference
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    found: dict[str, set[str]] = {t: set() for t in tables}
    with create_session() as session:
        for start in range(0, len(tables), 500):
            rows = session.execute(
                select(AssetModel.name, TaskOutletAssetReference.dag_id)
                .join(TaskOutletAssetReference, TaskOutletAssetReference.asset_id == AssetModel.id)
                .join(DagModel, DagModel.dag_id == TaskOutletAssetReference.dag_id)
                .where(AssetModel.name.in_(tables[start : start + 500]), DagModel.is_stale.is_(False))
            )
            for name, dag_id in rows:
                found[name].add(dag_id)
    return {t: frozenset(d) for t, d in found.items()}


def _team_names(dag_ids: list[str]) -> dict[str, str | None]:
    """{dag id: owning team} (Airflow multi-team mode; empty on Airflow versions without teams)."""
    if not dag_ids:
        return {}
    from airflow.models.dag import DagModel

    mapping = getattr(DagModel, "get_dag_id_to_team_name_mapping", None)
    if mapping is None:
        return {}
    return dict(mapping(dag_ids))
