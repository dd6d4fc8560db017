"""The Delta ``add`` metadata of Parquet files written under a table root: the files of an
attempt directory (:func:`staged_files`), their Hive-style partition values and the statistics
of their footers (driver side: footers only, never data; Delta protocol "Per-file Statistics").
"""

from __future__ import annotations

import datetime as dt
import json
import math
import posixpath
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_tsb.delta.commit import StagedFile
from airflow_provider_tsb.delta.log import filesystem


def _stat_value(value: Any, *, upper: bool = False) -> Any | None:
    """Return a JSON-safe Delta stats value, or ``None`` for types whose stats are skipped.

    Kept: integers, finite floats, strings, dates (ISO ``2013-01-01``) and timestamps (ISO
    8601 with milliseconds, Delta protocol "Per-file Statistics": ``...T05:00:00.000Z`` for
    ``timestamp``, no zone for ``timestamp_ntz``). Delta stores timestamp statistics at
    millisecond precision, so a maximum (``upper``) with microseconds is rounded *up* to the
    next millisecond: a bound, never a value the file exceeds. Skipped (no min/max, still
    correct, only less data skipping): decimals, binary, booleans, NaN.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value
    if isinstance(value, dt.datetime):
        return _timestamp_stat(value, upper=upper)
    if isinstance(value, dt.date):
        return value.isoformat()
    return None


def _timestamp_stat(value: dt.datetime, *, upper: bool) -> str:
    """``value`` as Delta's millisecond ISO string (``Z`` when zoned: UTC)."""
    if upper and value.microsecond % 1000:
        value += dt.timedelta(microseconds=1000 - value.microsecond % 1000)
    else:
        value -= dt.timedelta(microseconds=value.microsecond % 1000)
    if value.tzinfo is not None:
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"


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
            lo, hi = st.min, st.max  # compared as read, formatted once at the end
            if _stat_value(lo) is None or _stat_value(hi) is None:
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
    mins = {name: _stat_value(value) for name, value in mins.items()}
    maxs = {name: _stat_value(value, upper=True) for name, value in maxs.items()}
    stats = {"numRecords": num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    return num_rows, json.dumps(stats, separators=(",", ":"))


#: Spark's directory value of a null partition value (Hive convention).
HIVE_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _list_data_files(fs: pafs.FileSystem, directory: str, *, recursive: bool = False) -> list[pafs.FileInfo]:
    entries = fs.get_file_info(pafs.FileSelector(directory, recursive=recursive, allow_not_found=True))
    files = []
    for entry in entries:
        if entry.type != pafs.FileType.File:
            continue
        if entry.base_name.endswith(".parquet") and not entry.base_name.startswith((".", "_")):
            files.append(entry)
        else:  # _SUCCESS, .crc checksums: not data, never referenced
            fs.delete_file(entry.path)
    return sorted(files, key=lambda e: e.path)


def partition_values_of(subdir: str, partition_by: Sequence[str]) -> dict[str, str | None]:
    """Partition values of a Hive-style directory ``col=value/...`` written by Spark's
    ``partitionBy`` (values unescaped, :data:`HIVE_NULL_PARTITION` as ``None``).

    Raises:
        ValueError: the directory does not name exactly the partition columns, in order.
    """
    parts = [p.split("=", 1) for p in subdir.split("/") if p]
    if [p[0] for p in parts] != list(partition_by) or any(len(p) != 2 for p in parts):
        raise ValueError(f"staged directory {subdir!r} does not match the partition columns {list(partition_by)}")
    return {unquote(k): (None if v == HIVE_NULL_PARTITION else unquote(v)) for k, v in parts}


def staged_files(location: str, rel_dir: str, partition_by: Sequence[str] = ()) -> list[StagedFile]:
    """The data files of an attempt directory (partitioned: in its ``col=value/`` directories),
    with sizes and statistics from their footers (driver side, footers only)."""
    fs, root = filesystem(location)
    base = f"{root}/{rel_dir}"
    infos = _list_data_files(fs, base, recursive=bool(partition_by))

    def one(info: pafs.FileInfo) -> StagedFile:
        num, stats = footer_stats(fs, info.path)
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime else int(time.time() * 1000)
        sub = posixpath.relpath(info.path, base)
        values = partition_values_of(posixpath.dirname(sub), partition_by) if partition_by else {}
        return StagedFile(f"{rel_dir}/{sub}", int(info.size), mtime, num, stats, values)

    if len(infos) <= 1:
        return [one(i) for i in infos]
    with ThreadPoolExecutor(max_workers=min(8, len(infos))) as pool:
        return list(pool.map(one, infos))
