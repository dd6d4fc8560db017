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

Answers are cached for the request (one instance per request).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_tsb.api.access import Method, TopologyAccess, default_location_roots

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from airflow_provider_tsb.metastore.store import MetaStore


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
        """{topology: its table names}: for a few ``names`` one query each, else every table once."""
        if self._all_loaded:
            return self._tables
        wanted = None if names is None else [n for n in dict.fromkeys(names) if n not in self._loaded]
        if wanted is None or len(wanted) > 3:
            self._tables = {}
            for t in self.store.registry.tables():
                self._tables.setdefault(t.topology, []).append(t.name)
            self._all_loaded = True
        else:
            for name in wanted:
                self._tables[name] = [t.name for t in self.store.registry.tables(name)]
                self._loaded.add(name)
        return self._tables

    def dags_of_tables(self, tables: Iterable[str]) -> Mapping[str, frozenset[str]]:
        """{table: active DAG ids with a task whose outlet asset is named after it}."""
        wanted = [t for t in dict.fromkeys(tables) if t not in self._outlets]
        if wanted:
            from airflow.models.asset import AssetModel, TaskOutletAssetReference
            from airflow.models.dag import DagModel
            from airflow.utils.session import create_session
            from sqlalchemy import select

            found: dict[str, set[str]] = {t: set() for t in wanted}
            with create_session() as session:
                for start in range(0, len(wanted), 500):
                    rows = session.execute(
                        select(AssetModel.name, TaskOutletAssetReference.dag_id)
                        .join(TaskOutletAssetReference, TaskOutletAssetReference.asset_id == AssetModel.id)
                        .join(DagModel, DagModel.dag_id == TaskOutletAssetReference.dag_id)
                        .where(AssetModel.name.in_(wanted[start : start + 500]), DagModel.is_stale.is_(False))
                    )
                    for name, dag_id in rows:
                        found[name].add(dag_id)
            self._outlets.update({t: frozenset(d) for t, d in found.items()})
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


def _team_names(dag_ids: list[str]) -> dict[str, str | None]:
    """{dag id: owning team} (Airflow multi-team mode; empty on Airflow versions without teams)."""
    if not dag_ids:
        return {}
    from airflow.models.dag import DagModel

    mapping = getattr(DagModel, "get_dag_id_to_team_name_mapping", None)
    if mapping is None:
        return {}
    return dict(mapping(dag_ids))
