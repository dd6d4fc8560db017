"""Maintenance of a topology's tables: snapshot expiry and rollback (revision).

* :class:`TsbSnapshotExpiryOperator` removes data files no longer needed by the newest
  ``keep_barriers`` barriers of each table, nor by any version pinned by a live reader lease
  (FLIP-276 "MetaService": snapshots in use). It uses Delta's ``vacuum`` with
  ``keep_versions`` (delta-rs), so the kept versions stay readable by time travel.
* :class:`TsbRollbackOperator` restores a table and every table downstream of it to barrier k
  (Delta ``RESTORE`` through delta-rs, bumping the table's ``tsb.epoch`` so that txn versions of
  undone commits do not mark barriers k+1.. as done) and forgets their states above k in the
  metastore; the jobs then reprocess k+1.. on their next run.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
from airflow.sdk import BaseOperator

from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook
from airflow_provider_tsb.metastore.store import MetaStore
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
    history = [s for s in store.table_history(info.name, limit=keep_barriers * 4) if s.state == "WRITTEN"]
    keep = {s.version for s in history[:keep_barriers] if s.version is not None}
    keep |= store.leased_versions(info.name)
    dt = DeltaTable(info.location)
    keep.add(dt.version())
    removed = dt.vacuum(
        retention_hours=0, dry_run=dry_run, enforce_retention_duration=False, keep_versions=sorted(keep)
    )
    return {"table": info.name, "kept_versions": sorted(keep), "removed_files": len(removed)}


class TsbSnapshotExpiryOperator(BaseOperator):
    """Expire old snapshots of every table of a topology (see :func:`expire_snapshots`).

    :param topology: the topology.
    :param keep_barriers: newest WRITTEN barriers kept readable per table.
    :param tsb_conn_id: metastore connection.

    Returns (XCom) one :func:`expire_snapshots` result per table.
    """

    def __init__(
        self, *, topology: Topology, keep_barriers: int = 10, tsb_conn_id: str = "tsb_default", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if keep_barriers < 1:
            raise ValueError(f"{self.task_id}: keep_barriers must be at least 1, got {keep_barriers}")
        self.topology = topology
        self.keep_barriers = keep_barriers
        self.tsb_conn_id = tsb_conn_id

    def execute(self, context: Any) -> list[dict[str, Any]]:
        store = TsbMetastoreHook(self.tsb_conn_id).get_conn()
        results = []
        for name in sorted(self.topology.tables):
            if self.topology.tables[name].kind == "external":
                continue
            result = expire_snapshots(store, name, self.keep_barriers)
            self.log.info("%s: kept versions %s, removed %s file(s)", name, result["kept_versions"],
                          result["removed_files"])
            results.append(result)
        return results


def downstream_tables(topology: Topology, table: str) -> list[str]:
    """``table`` and every table computed from it, upstream first."""
    graph = topology.graph
    start = f"table:{normalize_table_name(table)}"
    reach = nx.descendants(graph, start) | {start}
    order = [n for n in nx.topological_sort(graph) if n in reach and n.startswith("table:")]
    return [n.split(":", 1)[1] for n in order]


class TsbRollbackOperator(BaseOperator):
    """Restore ``table`` and everything downstream of it to ``barrier`` (a revision).

    :param topology: the topology.
    :param table: an intermediate table (templated).
    :param barrier: the barrier to go back to (templated); must be WRITTEN in the tables.
    :param tsb_conn_id: metastore connection.

    Raises ``ValueError`` for a root table (root tables are written from outside).
    """

    template_fields = ("table", "barrier")

    def __init__(
        self, *, topology: Topology, table: str, barrier: int | str, tsb_conn_id: str = "tsb_default", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.table = table
        self.barrier = barrier
        self.tsb_conn_id = tsb_conn_id

    def execute(self, context: Any) -> dict[str, int]:
        from airflow_provider_tsb.delta.restore import restore_to_barrier

        barrier = int(self.barrier)
        name = normalize_table_name(self.table)
        if self.topology.tables.get(name) is None or self.topology.tables[name].kind == "root":
            raise ValueError(f"{self.task_id}: {name!r} is not an intermediate table of topology "
                             f"{self.topology.name!r}; only tables written by jobs can be rolled back")
        store = TsbMetastoreHook(self.tsb_conn_id).get_conn()
        restored: dict[str, int] = {}
        for table in downstream_tables(self.topology, name):
            if self.topology.tables[table].kind != "intermediate":
                continue
            result = restore_to_barrier(self.topology.location(table), barrier)
            store.rollback_table(table, barrier)
            restored[table] = result.target_version
            self.log.info("restored %s to barrier %s: %s", table, barrier, result)
        return restored
