"""Checks of a table registration that need the metastore (the registry lock held): the
topology is registered, and a new root table of a live topology already holds data.

A topology with barriers generates each next barrier from the Delta version of every root
table; a root registered there before its first commit would make every generation fail.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_provider_tsb.exceptions import TopologyError
from airflow_provider_tsb.metastore.models import BarrierRow, TableRow, TopologyRow


def check_known_topology(s: Session, topology: str, table: str) -> None:
    """TopologyError unless ``topology`` is registered (names it and the table)."""
    if s.get(TopologyRow, topology) is None:
        known = sorted(s.scalars(select(TopologyRow.name)))
        raise TopologyError(
            f"table {table!r}: topology {topology!r} is not registered (registered: {known}); register the "
            "topology from its DAG file first (`tsb barrier create TOPOLOGY --dags PATH`, or the barrier task)"
        )


def check_root_joins(s: Session, topology: str, table: str, kind: str, location: str) -> None:
    """TopologyError when ``table`` would be a new root table of ``topology``, which has barriers,
    and no Delta table is at ``location`` yet."""
    if kind != "root" or s.scalar(select(TableRow.id).where(TableRow.name == table)) is not None:
        return
    if s.scalar(select(BarrierRow.barrier_id).where(BarrierRow.topology == topology).limit(1)) is None:
        return
    from deltalake import DeltaTable

    from airflow_provider_tsb.delta.storage import storage_options

    if not DeltaTable.is_deltatable(location, storage_options=storage_options(location)):
        raise TopologyError(
            f"root table {table!r} would join topology {topology!r}, which has barriers, with no Delta table at "
            f"{location!r}: every next barrier reads its version. Write its first data there, then register it"
        )
