"""Root-table ingestion with delta-rs (root tables are written from outside the topology)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from airflow_provider_tsb.delta.log import normalize_location


def append_rows(location: str, rows: pa.Table, *, metadata: dict[str, Any] | None = None) -> int:
    """Append ``rows`` to the root table at ``location`` (created if missing); one commit.

    Args:
        location: table location.
        rows: Arrow table (its schema becomes the table schema on creation).
        metadata: extra commit metadata (e.g. ``{"ingest.day": "2013-01-01"}``).

    Returns:
        The new Delta version.
    """
    loc = normalize_location(location)
    write_deltalake(
        loc,
        rows,
        mode="append",
        commit_properties=CommitProperties(custom_metadata=metadata) if metadata else None,
    )
    return DeltaTable(loc).version()


def append_words(location: str, words: list[str]) -> int:
    """Append ``words`` (one row each, column ``word``) to a words root table; the new version."""
    return append_rows(location, pa.table({"word": pa.array(words, pa.string())}))
