"""Merge (upsert and delete by key) of a barrier's output into a sink table, rewriting only the
files that hold affected keys (copy-on-write; driver side, lazy plans plus small actions).

For a ``merge`` sink with key columns ``keys`` and an optional ``delete_when`` SQL condition:

1. the output's rows where ``delete_when`` is true delete their key; the others upsert it
   (a null condition counts as false);
2. the candidate files are the table's files whose key statistics (Delta ``minValues`` /
   ``maxValues``) overlap the [min, max] of the output's keys (one aggregate over the output);
3. the affected files are the candidates holding a key of the output: the executors read only
   the key columns of the candidates with ``_metadata.file_path`` (Spark's hidden file
   metadata column) and semi-join them with the output's keys; the driver collects the paths;
4. the rows to write are the affected files' rows whose key is not in the output, plus the
   upserted rows; the barrier's single commit removes the affected files (``remove`` actions)
   and adds the new ones.

Files without an affected key are untouched: the commit's ``remove`` count is the number of
files that held an affected key. The output must hold at most one row per key (deduplicate in
``process``): :func:`check_unique_keys` refuses a barrier whose output has two rows for one
key before anything is reported or committed (rows with a null key component are inserted as
they are).

Two orders of these steps (:mod:`airflow_provider_tsb.spark.outputs`):

* with ``delete_when`` (:func:`plan_merge`): the flagged output is persisted, one action checks
  its keys and fills the cache, the affected files are found, and one write stores the kept
  rows with the upserts;
* without it (the upserts-only merge of most aggregating jobs): the output is written first,
  straight from its plan (one Spark job, as a plain write; no cache, no action before it),
  then its keys are checked on the written files (:func:`summarize_staged_keys`: on the driver
  from their key columns when small, else one Spark action over them; a duplicate deletes the
  attempt directory), the bounds come from the same pass, and only when candidate files exist
  is the semi-join run (:func:`affected_files`, against the written files' keys) and the kept
  rows written as a second write into the attempt directory (:func:`kept_rows`), so such a
  barrier adds up to twice ``max_files`` files (auto compaction bounds the count).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from airflow_provider_tsb.delta.commit import RemovedFile
from airflow_provider_tsb.delta.log import filesystem, join
from airflow_provider_tsb.delta.snapshots import Snapshot
from airflow_provider_tsb.exceptions import DuplicateKeyError
from airflow_provider_tsb.spark.frames import partition_literal, read_files, spark_schema, with_columns_of

DELETE_FLAG = "__tsb_delete"
FILE_COLUMN = "__tsb_file"
#: most rows of a merge output whose keys the driver checks itself (:func:`summarize_staged_keys`)
DRIVER_KEY_ROWS = 1_000_000


@dataclass(frozen=True)
class KeySummary:
    """What one aggregation over a merge output's keys tells (rows with a null key component
    left out: they are inserted as they are and match nothing).

    Attributes:
        max_rows_per_key: the most rows one key has (0 for an output without keys).
        bounds: ``{key column: (min, max)}`` over the output's keys (``(None, None)`` when empty).
        rows: the output's complete keys (one column per key) when the driver computed the
            summary from a non-empty output (:func:`summarize_staged_keys`), else ``None``.
    """

    max_rows_per_key: int
    bounds: dict[str, tuple[Any, Any]]
    rows: pa.Table | None = None


def summarize_keys(df: DataFrame, keys: Sequence[str]) -> KeySummary:
    """Rows per key and the keys' bounds of a merge output, in one Spark action (which, on a
    persisted output, also fills its cache for the merge's later reads)."""
    complete = reduce(lambda a, b: a & b, [F.col(k).isNotNull() for k in keys])
    per_key = df.where(complete).groupBy(*keys).count()
    row = per_key.agg(
        F.max("count").alias("max_rows"),
        *[F.min(k).alias(f"lo_{i}") for i, k in enumerate(keys)],
        *[F.max(k).alias(f"hi_{i}") for i, k in enumerate(keys)],
    ).collect()[0]
    return KeySummary(int(row["max_rows"] or 0), {k: (row[f"lo_{i}"], row[f"hi_{i}"]) for i, k in enumerate(keys)})


def duplicate_key_error(table: str, barrier: int, keys: Sequence[str], dups: Sequence[Mapping[str, Any]]
                        ) -> DuplicateKeyError:
    """The error of a merge output with several rows for one key: ``dups`` are up to three
    ``{key column: value, ..., "count": rows}``."""
    shown = ", ".join(f"{dict(zip(keys, [r[k] for k in keys], strict=True))} ({r['count']} rows)" for r in dups)
    return DuplicateKeyError(
        f"table {table}, barrier {barrier}: the merge output has several rows for one key: {shown}. A merge "
        f"sink takes at most one row per key {list(keys)}: deduplicate in process(), e.g. "
        "df.dropDuplicates(keys), or keep the newest row of each key with a window"
    )


def check_unique_keys(
    df: DataFrame, keys: Sequence[str], *, table: str, barrier: int, summary: KeySummary | None = None,
) -> KeySummary:
    """Refuse an output with more than one row for a key of a merge sink; returns its
    :class:`KeySummary` (one Spark action, none when ``summary`` is given and the keys are
    unique; a second one names the duplicates).

    Raises:
        DuplicateKeyError: names the table, the barrier, up to three duplicated keys with their
            row counts, and what to do.
    """
    summary = summary or summarize_keys(df, keys)
    if summary.max_rows_per_key <= 1:
        return summary
    complete = reduce(lambda a, b: a & b, [F.col(k).isNotNull() for k in keys])
    dups = df.where(complete).groupBy(*keys).count().where(F.col("count") > 1).limit(3).collect()
    if dups:
        raise duplicate_key_error(table, barrier, keys, [r.asDict() for r in dups])
    return summary


def summarize_staged_keys(
    fs: pafs.FileSystem, directory: str, keys: Sequence[str], partition_by: Sequence[str] = (), *, table: str,
    barrier: int,
) -> KeySummary | None:
    """:func:`check_unique_keys` of a merge output already written into ``directory`` (an
    attempt directory on ``fs``; ``partition_by``: its ``col=value/`` directories), computed on
    the driver from the files' key columns (pyarrow, no Spark job); ``None`` when the driver
    should not do it: more than :data:`DRIVER_KEY_ROWS` rows (the footers' counts), a key that
    is a partition column (not in the files) or of a floating-point type (Spark's grouping
    normalizes NaN and -0.0). Files whose names start with ``_`` or ``.`` (Spark's ``_SUCCESS``
    and checksums) are not data.

    Raises:
        DuplicateKeyError: as :func:`check_unique_keys`.
    """
    if any(k in partition_by for k in keys):
        return None
    dataset = pads.dataset(directory, filesystem=fs, format="parquet")
    if not dataset.files:
        return KeySummary(0, {k: (None, None) for k in keys})
    if dataset.count_rows() > DRIVER_KEY_ROWS:
        return None
    rows = dataset.to_table(columns=list(keys)).drop_null()
    if any(pa.types.is_floating(rows.schema.field(k).type) for k in keys):
        return None
    counts = rows.group_by(list(keys)).aggregate([([], "count_all")]).rename_columns([*keys, "count"])
    most = pc.max(counts.column("count")).as_py() or 0
    if most > 1:
        dups = counts.filter(pc.greater(counts.column("count"), 1)).slice(0, 3).to_pylist()
        raise duplicate_key_error(table, barrier, keys, dups)
    bounds = {k: tuple(pc.min_max(rows.column(k)).values()) for k in keys}
    return KeySummary(int(most), {k: (lo.as_py(), hi.as_py()) for k, (lo, hi) in bounds.items()}, rows)


def merge_rows(current: DataFrame, update: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Upsert: rows of ``current`` whose key is not in ``update``, plus all ``update`` rows."""
    if not keys:
        raise ValueError("merge mode needs key columns")
    update_keys = update.select(*keys).distinct()
    kept = current.join(update_keys, on=list(keys), how="left_anti")
    return kept.unionByName(update.select(*current.columns))


@dataclass(frozen=True)
class MergePlan:
    """What a merge barrier writes and removes.

    Attributes:
        rows: the rows to write (lazy): kept rows of the affected files + the upserted rows.
        removed: the affected files (to remove in the barrier's commit).
        candidates: files read to find them (after statistics pruning).
        files: active files of the table before the merge.
    """

    rows: DataFrame
    removed: list[RemovedFile]
    candidates: int
    files: int


def split_deletes(update: DataFrame, delete_when: str | None) -> DataFrame:
    """``update`` with a boolean :data:`DELETE_FLAG` column (``delete_when``, null as false)."""
    flag = F.coalesce(F.expr(delete_when), F.lit(False)) if delete_when else F.lit(False)
    return update.withColumn(DELETE_FLAG, flag)


def _stat(value: Any) -> Any | None:
    """A Python value comparable with Delta statistics (as :mod:`delta.stats` writes them)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float | str):
        return value
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    return None


def _active_files(snapshot: Any, keys: Sequence[str]) -> list[dict[str, Any]]:
    actions = snapshot.add_actions
    names = set(actions.column_names)
    part = [c for c in actions.column_names if c.startswith("partition.")]
    stats = [f"{k}.{c}" for c in keys for k in ("min", "max") if f"{k}.{c}" in names]
    counted = ["num_records"] if "num_records" in names else []
    rows = actions.select(["path", "size_bytes", *counted, *part, *stats]).to_pylist() if actions.num_rows else []
    return [
        {
            "path": r["path"],
            "size": int(r["size_bytes"]),
            "num_records": r.get("num_records"),
            "partitionValues": {c[len("partition.") :]: (None if r[c] is None else str(r[c])) for c in part},
            "min": {c: r.get(f"min.{c}") for c in keys},
            "max": {c: r.get(f"max.{c}") for c in keys},
        }
        for r in rows
    ]


def _overlaps(entry: Mapping[str, Any], ranges: Mapping[str, tuple[Any, Any]]) -> bool:
    for column, (lo, hi) in ranges.items():
        fmin, fmax = entry["min"].get(column), entry["max"].get(column)
        if fmin is None or fmax is None or lo is None or hi is None:
            continue
        try:
            if fmin > hi or fmax < lo:
                return False
        except TypeError:  # statistics of another type than the key: no pruning on it
            continue
    return True


def _groups(location: str, entries: Sequence[Mapping[str, Any]], partition_columns: Sequence[str]) -> dict:
    groups: dict[tuple[tuple[str, str | None], ...], list[str]] = defaultdict(list)
    for entry in entries:
        key = tuple((c, entry["partitionValues"].get(c)) for c in partition_columns)
        groups[key].append(join(location, entry["path"]))
    return groups


def _key_files(
    spark: SparkSession, location: str, entries: Sequence[Mapping[str, Any]], schema: StructType,
    partition_columns: Sequence[str], keys: Sequence[str],
) -> DataFrame:
    """Key columns + :data:`FILE_COLUMN` (the file's URI) of the rows of ``entries``' files."""
    types = {f.name: f.dataType for f in schema.fields}
    data_schema = StructType([f for f in schema.fields if f.name not in partition_columns])
    frames = []
    for part_values, paths in _groups(location, entries, partition_columns).items():
        values = dict(part_values)
        df = spark.read.schema(data_schema).parquet(*paths)
        cols = [
            partition_literal(values[k], types[k]).alias(k) if k in values else F.col(k) for k in keys
        ]
        frames.append(df.select(*cols, F.col("_metadata.file_path").alias(FILE_COLUMN)))
    return reduce(lambda a, b: a.unionByName(b), frames)


def affected_files(
    spark: SparkSession, location: str, snapshot: Any, update_keys: DataFrame, keys: Sequence[str],
    bounds: Mapping[str, tuple[Any, Any]], *, output_keys: pa.Table | None = None,
) -> tuple[list[Mapping[str, Any]], int, int]:
    """The files of ``snapshot`` holding a key of ``update_keys`` (the output's key columns):
    ``(affected entries, candidates read, active files)``. The candidates are the files whose
    key statistics overlap ``bounds`` (the output's :attr:`KeySummary.bounds`). With
    ``output_keys`` (:attr:`KeySummary.rows`) and candidates of at most
    :data:`DRIVER_KEY_ROWS` rows, the driver semi-joins their key columns itself
    (:func:`_affected_on_driver`, pyarrow, no Spark job); otherwise one small Spark action
    semi-joins them with ``update_keys`` (none without candidates)."""
    entries = _active_files(snapshot, keys)
    if not entries or all(lo is None for lo, _hi in bounds.values()):  # no rows (or only null keys)
        return [], 0, len(entries)
    ranges = {k: (_stat(lo), _stat(hi)) for k, (lo, hi) in bounds.items()}
    candidates = [e for e in entries if _overlaps(e, ranges)]
    if not candidates:
        return [], 0, len(entries)
    if output_keys is not None:
        on_driver = _affected_on_driver(location, candidates, keys, output_keys, list(snapshot.partition_columns))
        if on_driver is not None:
            return on_driver, len(candidates), len(entries)
    hits = (
        _key_files(spark, location, candidates, spark_schema(snapshot), list(snapshot.partition_columns), keys)
        .join(update_keys, on=list(keys), how="left_semi")
        .select(FILE_COLUMN).distinct().collect()
    )
    hit_paths = {unquote(row[0]) for row in hits}
    by_name: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for entry in candidates:
        by_name[entry["path"].rsplit("/", 1)[-1]].append(entry)
    affected: list[Mapping[str, Any]] = []
    for uri in hit_paths:
        for entry in by_name.get(uri.rsplit("/", 1)[-1], []):
            if uri.endswith("/" + unquote(entry["path"])) and entry not in affected:
                affected.append(entry)
    return affected, len(candidates), len(entries)


def _affected_on_driver(
    location: str, candidates: Sequence[Mapping[str, Any]], keys: Sequence[str], output_keys: pa.Table,
    partition_columns: Sequence[str],
) -> list[Mapping[str, Any]] | None:
    """The ``candidates`` holding one of ``output_keys`` (complete keys, no floating point: see
    :func:`summarize_staged_keys`), found on the driver: each candidate's key columns are read
    with pyarrow and semi-joined with ``output_keys``. ``None`` (the caller asks Spark) for
    candidates of more than :data:`DRIVER_KEY_ROWS` rows in all or of unknown row counts, a key
    that is a partition column, a file outside the table root, or key columns pyarrow cannot
    read or cast to the output's types."""
    if any(k in partition_columns for k in keys) or any("://" in e["path"] for e in candidates):
        return None
    counts = [e.get("num_records") for e in candidates]
    if any(c is None for c in counts) or sum(counts) > DRIVER_KEY_ROWS:  # type: ignore[arg-type]
        return None
    fs, root = filesystem(location)
    types = pa.schema([pa.field(k, output_keys.schema.field(k).type) for k in keys])  # nullable
    wanted = output_keys.select(list(keys)).cast(types)
    affected = []
    try:
        for entry in candidates:
            held = pq.read_table(f"{root}/{unquote(entry['path'])}", columns=list(keys), filesystem=fs)
            held = held.select(list(keys)).drop_null().cast(types)
            if held.num_rows and held.join(wanted, list(keys), join_type="left semi").num_rows:
                affected.append(entry)
    except (pa.ArrowException, KeyError, ValueError):
        return None
    return affected


def kept_rows(
    spark: SparkSession, location: str, snapshot: Any, affected: Sequence[Mapping[str, Any]], update_keys: DataFrame,
    keys: Sequence[str], schema: StructType,
) -> tuple[DataFrame, list[RemovedFile]] | None:
    """The rows of the ``affected`` files whose key is not in ``update_keys``, in ``schema``
    (lazy), and the files' ``remove`` actions; ``None`` without affected files."""
    if not affected:
        return None
    partition_columns = list(snapshot.partition_columns)
    old_rows = read_files(spark, spark_schema(snapshot), partition_columns,
                          _groups(location, affected, partition_columns))
    assert old_rows is not None
    kept = with_columns_of(old_rows.join(update_keys, on=list(keys), how="left_anti"), schema)
    removed = [RemovedFile(e["path"], e["size"], dict(e["partitionValues"])) for e in affected]
    return kept, removed


def plan_merge(
    spark: SparkSession, snapshot: Snapshot, flagged: DataFrame, keys: Sequence[str], schema: StructType,
    summary: KeySummary | None = None,
) -> MergePlan:
    """Plan a merge of ``flagged`` (the output with :data:`DELETE_FLAG`) into the table at
    ``snapshot`` (:class:`~airflow_provider_tsb.delta.snapshots.Snapshot`, the sink's version the
    barrier writes on).

    ``schema``: the table's schema after this barrier (new columns of the affected files' kept
    rows are null). ``summary``: the output's :class:`KeySummary` when already known (else one
    Spark action computes it); one more small action finds the affected paths.
    """
    location = snapshot.location
    upserts = flagged.where(~F.col(DELETE_FLAG)).drop(DELETE_FLAG).select(*schema.fieldNames())
    update_keys = flagged.select(*keys).distinct()
    if snapshot.add_actions.num_rows == 0:
        return MergePlan(upserts, [], 0, 0)
    bounds = (summary or summarize_keys(flagged, keys)).bounds
    affected, candidates, files = affected_files(spark, location, snapshot, update_keys, keys, bounds)
    kept = kept_rows(spark, location, snapshot, affected, update_keys, keys, schema)
    if kept is None:
        return MergePlan(upserts, [], candidates, files)
    return MergePlan(kept[0].unionByName(upserts), kept[1], candidates, files)
