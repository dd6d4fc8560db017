"""Maintenance of a topology's tables: snapshot expiry and rollback (revision).

* :meth:`TsbMaintenanceHook.expire_all` expires every table's old snapshots: see
  :mod:`airflow_provider_tsb.maintenance.expiry` (marks the expired versions in the metastore under the
  lock leases take, then vacuums; never removes a version a live lease or a registered job
  still needs).
* :meth:`TsbMaintenanceHook.rollback` rolls a table and every table downstream of it back to
  barrier k: see :mod:`airflow_provider_tsb.maintenance.revision`.

:class:`~airflow_provider_tsb.operators.maintenance.TsbSnapshotExpiryOperator` and
:class:`~airflow_provider_tsb.operators.maintenance.TsbRollbackOperator` call this hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook, use_storage_connection
from airflow_provider_tsb.maintenance.retention import RetentionPolicy
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.names import normalize_table_name
from airflow_provider_tsb.topology import Topology


def expire_snapshots(store: MetaStore, table: str, keep_barriers: int, **kwargs: Any) -> dict[str, Any]:
    """Expire ``table``'s old versions: see :func:`airflow_provider_tsb.maintenance.expiry.expire_snapshots`
    (same arguments and result; this name is kept for existing imports)."""
    from airflow_provider_tsb.maintenance.expiry import expire_snapshots as expire

    return expire(store, table, keep_barriers, **kwargs)


def policy_for(
    table: str, keep_barriers: int, retention: RetentionPolicy | Mapping[str, RetentionPolicy] | None
) -> RetentionPolicy:
    """The policy of ``table``: ``retention`` (or its entry for the table), else the newest
    ``keep_barriers`` barriers."""
    if isinstance(retention, RetentionPolicy):
        return retention
    if retention:
        canonical = {normalize_table_name(k): v for k, v in retention.items()}
        if table in canonical:
            return RetentionPolicy.of(canonical[table])
    return RetentionPolicy(keep_last=keep_barriers)


class TsbMaintenanceHook(BaseHook):
    """Snapshot expiry and rollback over the tables of ``topology`` (see module doc).

    :param topology: the topology.
    :param tsb_conn_id: metastore connection (default ``tsb_default``).
    :param storage_conn_id: Airflow connection of the object storage the tables live on
        (:func:`~airflow_provider_tsb.hooks.metastore.use_storage_connection`); ``None``: local
        tables, or ``$TSB_STORAGE_OPTIONS``.
    """

    conn_name_attr = "tsb_conn_id"
    default_conn_name = TsbMetastoreHook.default_conn_name
    hook_name = "TSB maintenance"

    def __init__(self, topology: Topology, *, tsb_conn_id: str = default_conn_name,
                 storage_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.tsb_conn_id = tsb_conn_id
        self.storage_conn_id = storage_conn_id

    def get_conn(self) -> MetaStore:
        """The metastore of ``tsb_conn_id`` (see :class:`TsbMetastoreHook`), with the storage
        options of ``storage_conn_id`` set for this process first."""
        use_storage_connection(self.storage_conn_id)
        return TsbMetastoreHook(self.tsb_conn_id).get_conn()

    def expire_all(
        self, keep_barriers: int, *, dry_run: bool = False,
        retention: RetentionPolicy | Mapping[str, RetentionPolicy] | None = None,
    ) -> list[dict[str, Any]]:
        """:func:`airflow_provider_tsb.maintenance.expiry.expire_snapshots` on every root and intermediate
        table, by name; one result each (``dry_run``: what would go, nothing marked nor deleted).

        ``retention``: a :class:`~airflow_provider_tsb.maintenance.retention.RetentionPolicy` for every
        table, or ``{table: policy}`` (tables not named keep the newest ``keep_barriers``).
        """
        store = self.get_conn()
        results = []
        for name in sorted(self.topology.tables):
            if self.topology.tables[name].kind == "external":
                continue
            policy = policy_for(name, keep_barriers, retention)
            result = expire_snapshots(store, name, policy, dry_run=dry_run)
            self.log.info("%s: versions from %s kept, barriers %s %sexpired, %s file(s) and %s log file(s) removed",
                          name, result["horizon"], result["expired_barriers"], "would be " if dry_run else "",
                          result["removed_files"], result["removed_log_files"])
            results.append(result)
        return results

    def rollback(self, table: str, barrier: int, *, reprocess: bool = False) -> dict[str, object]:
        """Roll ``table`` and its downstream tables back to ``barrier`` (or reprocess them from
        barrier 1), finishing a pending plan of the same revision first: see
        :func:`airflow_provider_tsb.maintenance.revision.revise`. Returns its result's ``to_xcom()``."""
        from airflow_provider_tsb.maintenance.revision import revise

        return revise(self.get_conn(), self.topology, table, barrier, reprocess=reprocess).to_xcom()
