"""Delta ``add`` statistics from Parquet footers (driver side: footers only, never data)."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq


def _stat_value(value: Any) -> Any | None:
    """Return a JSON-safe Delta stats value, or ``None`` for types whose stats are skipped.

    Kept: integers, finite floats, strings, dates (ISO). Skipped (no min/max, still correct,
    only less data skipping): timestamps, decimals, binary, booleans, NaN.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    return None


def footer_stats(fs: pafs.FileSystem, path: str) -> tuple[int, str]:
    """Read one Parquet footer and return ``(num_records, Delta stats JSON)``.

    Stats: ``numRecords``, ``nullCount`` of every top-level primitive column, ``minValues`` /
    ``maxValues`` where every row group has them (see :func:`_stat_value`).
    Cost: one footer read (a few KiB), independent of the data size.
    """
    with fs.open_input_file(path) as handle:
        meta = pq.ParquetFile(handle).metadata
    num_rows = meta.num_rows
    nulls: dict[str, int] = {}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    unusable: set[str] = set()
    for rg_index in range(meta.num_row_groups):
        rg = meta.row_group(rg_index)
        for col_index in range(rg.num_columns):
            col = rg.column(col_index)
            name = col.path_in_schema
            if "." in name:
                unusable.add(name)
                continue
            st = col.statistics
            if st is None or not st.has_null_count:
                unusable.add(name)
                continue
            nulls[name] = nulls.get(name, 0) + st.null_count
            if not st.has_min_max:
                if st.null_count < rg.num_rows:
                    mins.pop(name, None)
                    maxs.pop(name, None)
                    unusable.add(f"minmax:{name}")
                continue
            lo, hi = _stat_value(st.min), _stat_value(st.max)
            if lo is None or hi is None:
                unusable.add(f"minmax:{name}")
                continue
            mins[name] = lo if name not in mins else min(mins[name], lo)
            maxs[name] = hi if name not in maxs else max(maxs[name], hi)
    for name in list(nulls):
        if name in unusable:
            nulls.pop(name)
    for name in list(mins):
        if name in unusable or f"minmax:{name}" in unusable:
            mins.pop(name)
            maxs.pop(name, None)
    stats = {"numRecords": num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    return num_rows, json.dumps(stats, separators=(",", ":"))
