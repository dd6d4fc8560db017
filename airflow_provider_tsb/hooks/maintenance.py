"""Maintenance of a topology's tables: snapshot expiry and rollback (revision).

* :func:`expire_snapshots` removes data files no longer needed by the newest ``keep_barriers``
  WRITTEN barriers of a table, nor by any version pinned by a live reader lease (FLIP-276
  "MetaService": snapshots in use). It uses Delta's ``vacuum`` with ``keep_versions``
  (delta-rs), so the kept versions stay readable by time travel.
* :meth:`TsbMaintenanceHook.rollback` rolls a table and every table downstream of it back to
  barrier k: see :mod:`airflow_provider_tsb.revision`.

:class:`~airflow_provider_tsb.operators.maintenance.TsbSnapshotExpiryOperator` and
:class:`~airflow_provider_tsb.operators.maintenance.TsbRollbackOperator` call this hook.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook
from airflow_provider_tsb.metastore.store import BarrierState, MetaStore
from airflow_provider_tsb.topology import Topology


def expire_snapshots(store: MetaStore, table: str, keep_barriers: int, *, dry_run: bool = False) -> dict[str, Any]:
    """Vacuum ``table`` keeping the versions of its newest ``keep_barriers`` WRITTEN barriers and
    every leased version.

    Args:
        store: the metastore.
        table: table name.
        keep_barriers: how many of the newest WRITTEN barriers stay readable (>= 1).
        dry_run: list the files without deleting them.

    Returns:
        ``{"table", "kept_versions": [...], "removed_files": n}``.

    Raises:
        ValueError: ``keep_barriers`` < 1.
        UnknownTableError: the table is not registered.
    """
    from deltalake import DeltaTable

    if keep_barriers < 1:
        raise ValueError(f"keep_barriers must be at least 1, got {keep_barriers}")
    store.expire_leases()
    info = store.table(table)
    history = [s for s in store.table_history(info.name, limit=keep_barriers * 4) if s.state == BarrierState.WRITTEN]
    keep = {s.version for s in history[:keep_barriers] if s.version is not None}
    keep |= store.leased_versions(info.name)
    dt = DeltaTable(info.location)
    keep.add(dt.version())
    removed = dt.vacuum(
        retention_hours=0, dry_run=dry_run, enforce_retention_duration=False, keep_versions=sorted(keep)
    )
    return {"table": info.name, "kept_versions": sorted(keep), "removed_files": len(removed)}


class TsbMaintenanceHook(BaseHook):
    """Snapshot expiry and rollback over the tables of ``topology`` (see module doc).

    :param topology: the topology.
    :param tsb_conn_id: metastore connection (default ``tsb_default``).
    """

    conn_name_attr = "tsb_conn_id"
    default_conn_name = TsbMetastoreHook.default_conn_name
    hook_name = "TSB maintenance"

    def __init__(self, topology: Topology, *, tsb_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.tsb_conn_id = tsb_conn_id

    def get_conn(self) -> MetaStore:
        """The metastore of ``tsb_conn_id`` (see :class:`TsbMetastoreHook`)."""
        return TsbMetastoreHook(self.tsb_conn_id).get_conn()

    def expire_all(self, keep_barriers: int) -> list[dict[str, Any]]:
        """:func:`expire_snapshots` on every root and intermediate table, by name; one result each."""
        store = self.get_conn()
        results = []
        for name in sorted(self.topology.tables):
            if self.topology.tables[name].kind == "external":
                continue
            result = expire_snapshots(store, name, keep_barriers)
            self.log.info("%s: kept versions %s, removed %s file(s)", name, result["kept_versions"],
                          result["removed_files"])
            results.append(result)
        return results

    def rollback(self, table: str, barrier: int, *, reprocess: bool = False) -> dict[str, object]:
        """Roll ``table`` and its downstream tables back to ``barrier`` (or reprocess them from
        barrier 1), finishing a pending plan of the same revision first: see
        :func:`airflow_provider_tsb.revision.revise`. Returns its result's ``to_xcom()``."""
        from airflow_provider_tsb.revision import revise

        return revise(self.get_conn(), self.topology, table, barrier, reprocess=reprocess).to_xcom()
