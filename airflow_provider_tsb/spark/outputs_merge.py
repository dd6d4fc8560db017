"""Merge (upsert by key) of a barrier's output into a sink table (driver side, lazy plans)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame


def merge_rows(current: DataFrame, update: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Upsert: rows of ``current`` whose key is not in ``update``, plus all ``update`` rows."""
    if not keys:
        raise ValueError("merge mode needs key columns")
    update_keys = update.select(*keys).distinct()
    kept = current.join(update_keys, on=list(keys), how="left_anti")
    return kept.unionByName(update.select(*current.columns))
