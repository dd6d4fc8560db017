"""Airflow Assets for the tables of a topology.

Each sink table is an Airflow :class:`~airflow.sdk.Asset` named by its canonical table name,
with the Delta location as URI (``file:///...`` for local paths), in the asset group ``tsb``.
The job operator emits one asset event per committed barrier with
``extra={"barrier": n, "version": v}`` (Airflow docs, "Asset-aware scheduling").
"""

from __future__ import annotations

import os

from airflow.sdk import Asset

from airflow_provider_tsb.names import normalize_table_name
from airflow_provider_tsb.topology import Topology


def location_uri(location: str) -> str:
    """``/abs/path`` -> ``file:///abs/path``; URIs with a scheme (``s3://``...) unchanged."""
    if "://" in location:
        return location
    return "file://" + os.path.abspath(location)


def table_asset(topology: Topology, table: str) -> Asset:
    """The Asset of ``table`` (a table of ``topology``)."""
    name = normalize_table_name(table)
    return Asset(name=name, uri=location_uri(topology.location(name)), group="tsb")
