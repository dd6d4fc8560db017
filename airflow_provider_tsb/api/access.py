"""Who may read and change which topology through the REST API, and where a table may live.

A topology belongs to the Airflow DAGs that run it: the DAGs whose tasks write its tables (the
job tasks of :class:`~airflow_provider_tsb.task_group.TsbTopologyTaskGroup` carry their sink
tables as outlet assets, :mod:`airflow_provider_tsb.assets`). The Airflow implementation,
:class:`~airflow_provider_tsb.api.airflow_access.AirflowTopologyAccess`, asks Airflow's auth
manager about exactly these DAGs, as the Airflow REST API does for the DAGs of a file:

* reading a topology's data (``GET`` views, ``/version``, ``/versions`` without a lease) needs
  read access (``GET``) to every DAG of the topology;
* changing it (registration, unregistration, leases) needs edit access (``PUT``) to every DAG
  of the topology;
* a topology no DAG runs (registered through the API or the ``MetaStore`` only) is checked
  like Airflow's "all DAGs" permission (``DagDetails(id=None)``);
* lists show only the topologies the user may read.

A refusal is :class:`AccessDeniedError` (403) with a fixed message that names nothing.

:class:`AllowAll` is the policy of the standalone MetaService app
(:func:`~airflow_provider_tsb.api.routes.create_metaservice_app`, no authentication).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from airflow_provider_tsb.api.limits import config_value
from airflow_provider_tsb.exceptions import AccessDeniedError

if TYPE_CHECKING:
    from airflow_provider_tsb.metastore.store import MetaStore

#: Methods as Airflow's auth manager names them: ``GET`` reads, ``PUT`` edits.
Method = Literal["GET", "PUT"]
READ: Method = "GET"
EDIT: Method = "PUT"

READ_DENIED = "Forbidden: reading this needs read access to every DAG of its topology (Airflow roles)"
EDIT_DENIED = "Forbidden: this change needs edit access to every DAG of its topology (Airflow roles)"


class TopologyAccess(ABC):
    """The authorization policy of one request (see module docstring).

    Subclasses implement its abstract methods: :meth:`allowed`, :meth:`dags_of`,
    :meth:`dags_of_tables` and :meth:`all_dags`.
    """

    #: roots under which new tables may be placed (``None``: anywhere)
    location_roots: Sequence[str] | None = None
    #: whether ``register/source`` with ``root=true`` may create a root table
    api_root_tables: bool = False
    #: every request is allowed (:class:`AllowAll`): the routes skip reading what to check
    allows_everything: bool = False
    #: the one Delta Sharing share a recipient's token opens (``None``: no such scope)
    share_scope: str | None = None

    def topologies_of(self, store: MetaStore, tables: list[str]) -> dict[str, str]:
        """``{canonical table name: topology}`` of the registered tables among ``tables``
        (``store.registry.topologies_of``: one query; a subclass may keep the answers)."""
        return store.registry.topologies_of(tables)

    @abstractmethod
    def allowed(self, method: Method, topologies: Iterable[str]) -> set[str]:
        """The subset of ``topologies`` the user may ``method``."""
        ...

    @abstractmethod
    def dags_of(self, topology: str) -> frozenset[str]:
        """Ids of the DAGs that run ``topology`` (empty when none does)."""
        ...

    @abstractmethod
    def dags_of_tables(self, tables: Iterable[str]) -> Mapping[str, frozenset[str]]:
        """{table: ids of the DAGs that declare it as an outlet}, for tables some DAG declares."""
        ...

    @abstractmethod
    def all_dags(self, method: Method) -> bool:
        """Whether the user may ``method`` every DAG (Airflow's ``DagDetails(id=None)`` check): what
        a topology no DAG runs, an unknown name, or an unknown job or table needs."""
        ...

    def require_all_dags(self, method: Method) -> None:
        """Raise :class:`AccessDeniedError` unless :meth:`all_dags`."""
        if not self.all_dags(method):
            raise AccessDeniedError(READ_DENIED if method == READ else EDIT_DENIED)

    def require(self, method: Method, topologies: Iterable[str | None]) -> None:
        """Raise :class:`AccessDeniedError` unless the user may ``method`` every topology given.

        ``None`` entries are ignored.
        """
        names = {t for t in topologies if t is not None}
        if names and not names <= self.allowed(method, names):
            raise AccessDeniedError(READ_DENIED if method == READ else EDIT_DENIED)

    def visible(self, names: Sequence[str]) -> list[str]:
        """``names`` the user may read, order kept."""
        ok = self.allowed(READ, names)
        return [n for n in names if n in ok]

    def topology_of_dag(self, dag_id: str, names: Sequence[str]) -> str | None:
        """The topology among ``names`` that DAG ``dag_id`` runs, or ``None``."""
        for name in names:
            if dag_id in self.dags_of(name):
                return name
        return None

    def task_log_urls(self, job_sinks: Mapping[str, Sequence[str]]) -> dict[str, str]:
        """{job id: URL of the log of the Airflow task that ran it last} ({job id: sink tables} in).

        Empty here (a policy without Airflow knows no task); the Airflow policy asks Airflow's
        metadata database (:func:`airflow_provider_tsb.api.airflow_task_logs.task_log_urls`).
        """
        return {}


class AllowAll(TopologyAccess):
    """Everything allowed, no DAGs (the standalone MetaService app; tests and benchmarks)."""

    api_root_tables = True
    allows_everything = True

    def __init__(self, location_roots: Sequence[str] | None = None) -> None:
        self.location_roots = location_roots

    def allowed(self, method: Method, topologies: Iterable[str]) -> set[str]:
        return set(topologies)

    def dags_of(self, topology: str) -> frozenset[str]:
        return frozenset()

    def all_dags(self, method: Method) -> bool:
        return True

    def dags_of_tables(self, tables: Iterable[str]) -> Mapping[str, frozenset[str]]:
        return {}


# ------------------------------------------------------------------ locations
def default_location_roots() -> list[str]:
    """``[tsb] allowed_location_roots`` (comma-separated paths or URIs), else the warehouse.

    The warehouse is :func:`~airflow_provider_tsb.lineage.default_warehouse` (``$TSB_WAREHOUSE``
    or ``$AIRFLOW_HOME/tsb-warehouse``).
    """
    from airflow_provider_tsb.lineage import default_warehouse

    raw = config_value("allowed_location_roots")
    roots = [r.strip() for r in (raw or "").split(",") if r.strip()]
    return roots or [default_warehouse()]
