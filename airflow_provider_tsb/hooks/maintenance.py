"""Maintenance of a topology's tables: snapshot expiry and rollback (revision).

* :func:`expire_snapshots` removes data files no longer needed by the newest ``keep_barriers``
  WRITTEN barriers of a table, nor by any version pinned by a live reader lease (FLIP-276
  "MetaService": snapshots in use). It uses Delta's ``vacuum`` with ``keep_versions``
  (delta-rs), so the kept versions stay readable by time travel.
* :meth:`TsbMaintenanceHook.rollback` restores a table and every table downstream of it to
  barrier k (Delta ``RESTORE`` through delta-rs, bumping the table's ``tsb.epoch`` so that txn
  versions of undone commits do not mark barriers k+1.. as done) and forgets their states above
  k in the metastore; the jobs then reprocess k+1.. on their next run.

:class:`~airflow_provider_tsb.operators.maintenance.TsbSnapshotExpiryOperator` and
:class:`~airflow_provider_tsb.operators.maintenance.TsbRollbackOperator` call this hook.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook
from airflow_provider_tsb.metastore.store import BarrierState, MetaStore
from airflow_provider_tsb.names import normalize_table_name
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


def downstream_tables(topology: Topology, table: str) -> list[str]:
    """``table`` and every table computed from it, upstream first (topological order)."""
    graph = topology.graph
    start = f"table:{normalize_table_name(table)}"
    reach = nx.descendants(graph, start) | {start}
    order = [n for n in nx.topological_sort(graph) if n in reach and n.startswith("table:")]
    return [n.split(":", 1)[1] for n in order]


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

    def rollback(self, table: str, barrier: int) -> dict[str, int]:
        """Restore intermediate ``table`` and every intermediate table downstream of it to ``barrier``.

        Returns ``{table: restored Delta version}``.

        Raises:
            ValueError: ``table`` is not an intermediate table of the topology (root tables are
                written from outside and cannot be rolled back).
            BarrierNotInTableError: a table holds no version of ``barrier``.
        """
        from airflow_provider_tsb.delta.restore import restore_to_barrier

        name = normalize_table_name(table)
        if self.topology.tables.get(name) is None or self.topology.tables[name].kind == "root":
            raise ValueError(f"{name!r} is not an intermediate table of topology "
                             f"{self.topology.name!r}; only tables written by jobs can be rolled back")
        store = self.get_conn()
        restored: dict[str, int] = {}
        for downstream in downstream_tables(self.topology, name):
            if self.topology.tables[downstream].kind != "intermediate":
                continue
            result = restore_to_barrier(self.topology.location(downstream), barrier)
            store.rollback_table(downstream, barrier)
            restored[downstream] = result.target_version
            self.log.info("restored %s to barrier %s: %s", downstream, barrier, result)
        return restored
