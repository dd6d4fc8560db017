"""Maintenance operators: snapshot expiry and rollback (revision) of a topology's tables.

* :class:`TsbSnapshotExpiryOperator` removes data files no longer needed by the newest
  ``keep_barriers`` barriers of each table, nor by any version pinned by a live lease or still
  to be read by a registered job (FLIP-276 "MetaService": snapshots in use).
* :class:`TsbRollbackOperator` rolls a table and every table downstream of it back to barrier k
  (or empties them for a reprocess from barrier 1) as a revision recorded in the metastore
  before any table is touched, resumable by the task's retry
  (:mod:`airflow_provider_tsb.maintenance.revision`); the jobs then reprocess k+1.. on their next run.

Both hold parameters and templating; the logic is
:class:`~airflow_provider_tsb.hooks.maintenance.TsbMaintenanceHook`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_tsb.hooks.maintenance import TsbMaintenanceHook
from airflow_provider_tsb.maintenance.retention import RetentionPolicy
from airflow_provider_tsb.topology import Topology


class TsbSnapshotExpiryOperator(BaseOperator):
    """Expire old snapshots of every table of a topology
    (see :func:`airflow_provider_tsb.maintenance.expiry.expire_snapshots`).

    Per table: the versions to go are marked expired in the metastore under the lock leases
    take (a lease on them is refused from then on, resolution never answers them), then Delta
    vacuum deletes their files, retried with backoff when a job's commit wins the race.

    :param topology: the topology.
    :param keep_barriers: newest WRITTEN barriers kept readable per table (AS OF works on them).
    :param retention: a :class:`~airflow_provider_tsb.maintenance.retention.RetentionPolicy` (the newest
        ``keep_last`` barriers, one per hour for ``hourly_hours``, one per day for
        ``daily_days``, by barrier timestamp) for every table, or ``{table: policy}``; tables
        without one keep the newest ``keep_barriers``.
    :param dry_run: report what would go; mark and delete nothing.
    :param tsb_conn_id: metastore connection.
    :param storage_conn_id: Airflow connection of the object storage the tables live on
        (``aws``, ``wasb``/``adls``, ``google_cloud_platform``); ``None``: local tables, or
        ``$TSB_STORAGE_OPTIONS``.

    Returns (XCom) one ``expire_snapshots`` result per table.
    """

    def __init__(
        self, *, topology: Topology, keep_barriers: int = 10, dry_run: bool = False,
        retention: RetentionPolicy | Mapping[str, RetentionPolicy] | None = None,
        tsb_conn_id: str = "tsb_default", storage_conn_id: str | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if keep_barriers < 1:
            raise ValueError(f"{self.task_id}: keep_barriers must be at least 1, got {keep_barriers}")
        self.topology = topology
        self.keep_barriers = keep_barriers
        self.dry_run = dry_run
        self.retention = retention
        self.tsb_conn_id = tsb_conn_id
        self.storage_conn_id = storage_conn_id

    def execute(self, context: Any) -> list[dict[str, Any]]:
        """Expire every root and intermediate table's old snapshots."""
        hook = TsbMaintenanceHook(self.topology, tsb_conn_id=self.tsb_conn_id, storage_conn_id=self.storage_conn_id)
        return hook.expire_all(self.keep_barriers, dry_run=self.dry_run, retention=self.retention)


class TsbRollbackOperator(BaseOperator):
    """Roll ``table`` and everything downstream of it back to ``barrier`` (a revision), or
    reprocess them from barrier 1 (see :mod:`airflow_provider_tsb.maintenance.revision`).

    The revision is recorded as a plan before any table is touched; a failure leaves it pending
    and the task's retry (or ``tsb rollback TABLE --resume``) finishes it. While it is pending
    the jobs writing its tables are refused; their streaming checkpoints are reset.

    :param topology: the topology.
    :param table: an intermediate table (templated).
    :param barrier: the barrier to go back to (templated); must be WRITTEN in the tables.
        Ignored with ``reprocess``.
    :param reprocess: empty the tables so the jobs process every barrier again from barrier 1
        (templated: a bool, or ``"true"``/``"false"``).
    :param tsb_conn_id: metastore connection.
    :param storage_conn_id: Airflow connection of the object storage the tables live on
        (``aws``, ``wasb``/``adls``, ``google_cloud_platform``); ``None``: local tables, or
        ``$TSB_STORAGE_OPTIONS``.

    Returns (XCom) ``{"revision", "barrier", "tables": {table: Delta version}, "checkpoints",
    "resumed"}``. Raises ``ValueError`` for a root table (root tables are written from outside)
    or a barrier that is not an integer >= 1.
    """

    template_fields = ("table", "barrier", "reprocess")

    def __init__(
        self,
        *,
        topology: Topology,
        table: str,
        barrier: int | str = 0,
        reprocess: bool | str = False,
        tsb_conn_id: str = "tsb_default",
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.table = table
        self.barrier = barrier
        self.reprocess = reprocess
        self.tsb_conn_id = tsb_conn_id
        self.storage_conn_id = storage_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        """Roll the table and its downstream tables back to the rendered barrier."""
        try:
            barrier = int(self.barrier)
        except (TypeError, ValueError):
            raise ValueError(f"{self.task_id}: barrier must be an integer >= 1, got {self.barrier!r}") from None
        reprocess = self.reprocess
        if isinstance(reprocess, str):
            if reprocess.strip().lower() not in ("true", "false", ""):
                raise ValueError(f"{self.task_id}: reprocess must be true or false, got {reprocess!r}")
            reprocess = reprocess.strip().lower() == "true"
        hook = TsbMaintenanceHook(self.topology, tsb_conn_id=self.tsb_conn_id, storage_conn_id=self.storage_conn_id)
        try:
            return hook.rollback(self.table, barrier, reprocess=bool(reprocess))
        except ValueError as exc:
            raise ValueError(f"{self.task_id}: {exc}") from exc
