"""Revision: roll a table and every table downstream of it back to a barrier.

Restores each intermediate table to barrier k (Delta ``RESTORE`` through delta-rs, bumping the
table's ``tsb.epoch`` so that txn versions of undone commits do not mark barriers k+1.. as done,
see :mod:`airflow_provider_tsb.delta.restore`) and forgets their states above k in the
metastore; the jobs then reprocess k+1.. on their next run.
"""

from __future__ import annotations

import logging

import networkx as nx

from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.names import normalize_table_name
from airflow_provider_tsb.topology import Topology

log = logging.getLogger(__name__)


def downstream_tables(topology: Topology, table: str) -> list[str]:
    """``table`` and every table computed from it, upstream first (topological order)."""
    graph = topology.graph
    start = f"table:{normalize_table_name(table)}"
    reach = nx.descendants(graph, start) | {start}
    order = [n for n in nx.topological_sort(graph) if n in reach and n.startswith("table:")]
    return [n.split(":", 1)[1] for n in order]


def rollback(store: MetaStore, topology: Topology, table: str, barrier: int) -> dict[str, int]:
    """Restore intermediate ``table`` and every intermediate table downstream of it to ``barrier``.

    Returns ``{table: restored Delta version}``.

    Raises:
        ValueError: ``table`` is not an intermediate table of the topology (root tables are
            written from outside and cannot be rolled back).
        BarrierNotInTableError: a table holds no version of ``barrier``.
    """
    from airflow_provider_tsb.delta.restore import restore_to_barrier

    name = normalize_table_name(table)
    if topology.tables.get(name) is None or topology.tables[name].kind == "root":
        raise ValueError(f"{name!r} is not an intermediate table of topology "
                         f"{topology.name!r}; only tables written by jobs can be rolled back")
    restored: dict[str, int] = {}
    for downstream in downstream_tables(topology, name):
        if topology.tables[downstream].kind != "intermediate":
            continue
        result = restore_to_barrier(topology.location(downstream), barrier)
        store.rollback_table(downstream, barrier)
        restored[downstream] = result.target_version
        log.info("restored %s to barrier %s: %s", downstream, barrier, result)
    return restored
