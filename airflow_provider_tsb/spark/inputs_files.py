"""Read a plain Delta table's files with Spark at exact versions (delta-rs lists them).

delta-rs supplies the file lists (driver, metadata only); Spark executors read the Parquet
files. Table data is never collected to the driver. Only for tables without reader features
(tsb's own sinks, delta-rs roots): :func:`airflow_provider_tsb.spark.inputs.uses_delta_reader`
sends the others to Spark's Delta reader; called directly on one, they raise.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from airflow_provider_tsb.delta.integrity import verify_version
from airflow_provider_tsb.delta.log import join, normalize_location, read_commit_actions
from airflow_provider_tsb.delta.snapshots import Snapshot, snapshot_at
from airflow_provider_tsb.exceptions import DeltaLogError, UnsupportedTableFeatureError
from airflow_provider_tsb.spark.epochs import (
    CHANGE_TYPE,
    COMMIT_VERSION,
    METADATA,
    Ranges,
    add_entries,
    barrier_of,
    change_schema,
    check_epochs,
    overlaps,
)
from airflow_provider_tsb.spark.frames import BARRIER_COLUMN, read_files, spark_schema
from airflow_provider_tsb.spark.timing import phase


def _check_supported(table: Snapshot, location: str) -> None:
    features = set(table.reader_features)
    if "deletionVectors" in features or "columnMapping" in features:
        raise UnsupportedTableFeatureError(
            f"Delta table {location!r} uses reader features {sorted(features)}: deletion vectors and "
            "column mapping are not supported by the tsb Spark reader; rewrite the table without them "
            "(e.g. REORG/purge deletion vectors, or recreate it with delta.columnMapping.mode=none)"
        )


def _group_key(
    partition_values: Mapping[str, str | None] | None, partition_columns: Iterable[str]
) -> tuple[tuple[str, str | None], ...]:
    values = partition_values or {}
    return tuple((c, values.get(c)) for c in partition_columns)




def read_snapshot(
    spark: SparkSession, location: str, version: int, *, within: Ranges | None = None,
    exclude: Collection[str] | None = None,
) -> DataFrame:
    """Return the Delta table at ``location`` as of ``version`` as a lazy DataFrame.

    Columns: the table schema (partition columns filled from the partition values). An empty
    table gives an empty DataFrame with that schema. Cost on the driver: one snapshot load
    (file list and schema) from the per-process snapshot cache
    (:func:`~airflow_provider_tsb.delta.snapshots.snapshot_at`: free when this version was read
    before, incremental from an earlier one); data is read by the executors.

    ``within``, ``exclude`` and the errors: as :func:`airflow_provider_tsb.spark.inputs.read_snapshot`.
    """
    loc = normalize_location(location)
    with phase("delta_log"):
        table = snapshot_at(loc, version)
        verify_version(loc, version, None, name=loc, barrier=None, table=table.add_actions)
        _check_supported(table, loc)
        schema = spark_schema(table)
        partition_columns = list(table.partition_columns)
        groups: dict[tuple[tuple[str, str | None], ...], list[str]] = defaultdict(list)
        if partition_columns or within or exclude:
            for entry in add_entries(table, stats_of=list(within or {})):
                if (within and not overlaps(entry, within)) or (exclude and entry["path"] in exclude):
                    continue
                groups[_group_key(entry["partitionValues"], partition_columns)].append(join(loc, entry["path"]))
        else:
            paths = table.add_actions.column("path").to_pylist() if table.add_actions.num_rows else []
            if paths:
                groups[()] = [join(loc, p) for p in paths]
    df = read_files(spark, schema, partition_columns, groups)
    return df if df is not None else spark.createDataFrame([], schema)


def read_changes(
    spark: SparkSession, location: str, from_version: int | None, to_version: int, *,
    barriers: Sequence[tuple[int, int]] = (),
) -> DataFrame:
    """Return the changes of the epoch ``(from_version, to_version]`` as a lazy DataFrame.

    ``from_version=None`` (or -1) means from the table's creation. Columns: table schema
    (as of ``to_version``) + ``_change_type`` (``insert`` / ``delete`` / ``update_preimage`` /
    ``update_postimage``) + ``_commit_version``. Per commit, following the Delta change data
    feed rules: if the commit has ``cdc`` actions (table with ``delta.enableChangeDataFeed``),
    its ``_change_data`` files are read; otherwise files added with ``dataChange`` are inserts
    and files removed with ``dataChange`` are deletes (correct for whole-file rewrites, e.g.
    overwrite, restore, or copy-on-write updates: old rows out, new rows in). For an
    append-only root table this is exactly the rows appended in the epoch.

    The files of one kind (and partition) are one scan, whatever the number of commits: each
    row's ``_commit_version`` comes from its file's name (``_metadata.file_path``), so a range
    of many small commits costs Spark one relation, not one per commit.

    Args:
        barriers: the epochs of a micro-batch, ``[(barrier, version)]`` in ascending order, the
            last version ``to_version``: each row gets :data:`BARRIER_COLUMN` (int), the first
            barrier whose version is at or above its commit version (barrier ``b``'s epoch is
            ``(version of the barrier before, version of b]``).

    Cost on the driver: one log-file read per version in the range + one snapshot load.

    Raises:
        DeltaLogError: a commit in the range is missing from the log.
        ValueError: ``from_version > to_version``; ``barriers`` out of order, not ending at
            ``to_version`` or starting at or below ``from_version``.
    """
    loc = normalize_location(location)
    start = -1 if from_version is None else from_version
    if start > to_version:
        raise ValueError(f"read_changes({loc!r}): from_version {start} > to_version {to_version}")
    check_epochs(loc, start, to_version, barriers)
    with phase("delta_log"):
        table = snapshot_at(loc, to_version)
        _check_supported(table, loc)
        schema = spark_schema(table)
        partition_columns = list(table.partition_columns)
        by_kind: dict[str, dict[tuple[tuple[str, str | None], ...], list[tuple[str, int]]]] = defaultdict(
            lambda: defaultdict(list))
        for version in range(start + 1, to_version + 1):
            actions = read_commit_actions(loc, version)
            if actions is None:
                raise DeltaLogError(f"Delta log of {loc!r} has no commit {version}: cannot read its changes")
            for kind, groups in _changed_files(loc, actions, partition_columns).items():
                for key, urls in groups.items():
                    by_kind[kind][key].extend((url, version) for url in urls)
    frames = [df for kind, groups in sorted(by_kind.items())
              if (df := _read_change_files(spark, schema, partition_columns, groups, kind)) is not None]
    out_schema = change_schema(schema)
    if not frames:
        out = spark.createDataFrame([], out_schema)
    else:
        cols = [f.name for f in out_schema.fields]
        out = reduce(lambda a, b: a.unionByName(b), (f.select(*cols) for f in frames))
    return out.withColumn(BARRIER_COLUMN, barrier_of(barriers)) if barriers else out


def _changed_files(loc: str, actions: list[dict[str, Any]], partition_columns: list[str]
                   ) -> dict[str, dict[tuple[tuple[str, str | None], ...], list[str]]]:
    """The data files of one commit's change, ``{kind: {partition key: [file URL]}}``: its ``cdc``
    files (kind ``cdc``) when it has any, else its ``add`` (``insert``) and ``remove``
    (``delete``) actions with ``dataChange`` (Delta protocol, "Change Data Files")."""
    by_kind: dict[str, dict[tuple[tuple[str, str | None], ...], list[str]]] = defaultdict(lambda: defaultdict(list))
    cdc = [a["cdc"] for a in actions if "cdc" in a]
    if cdc:
        for entry in cdc:
            by_kind["cdc"][_group_key(entry.get("partitionValues"), partition_columns)].append(join(loc, entry["path"]))
        return by_kind
    for kind, name in (("insert", "add"), ("delete", "remove")):
        for a in actions:
            entry = a.get(name)
            if entry and entry.get("dataChange", True):
                key = _group_key(entry.get("partitionValues"), partition_columns)
                by_kind[kind][key].append(join(loc, entry["path"]))
    return by_kind


def _read_change_files(spark: SparkSession, schema: StructType, partition_columns: list[str],
                       groups: Mapping[tuple[tuple[str, str | None], ...], list[tuple[str, int]]],
                       kind: str) -> DataFrame | None:
    """One kind of changed files, ``{partition key: [(file URL, commit version)]}``, as rows with
    ``_commit_version`` (and ``_change_type``: the files' own column for ``cdc``, else ``kind``);
    ``None`` for no files. The files of a partition are one scan per :func:`_scans` round."""
    frames = []
    for key, files in groups.items():
        for versions in _scans(files, schema):
            extra = {COMMIT_VERSION: _version_column(versions)}
            if kind != "cdc":
                extra[CHANGE_TYPE] = F.lit(kind)
            df = read_files(spark, schema, partition_columns, {key: list(versions)}, file_columns=extra,
                            file_schema_extra=[StructField(CHANGE_TYPE, StringType(), True)] if kind == "cdc" else ())
            if df is not None:
                frames.append(df)
    return reduce(lambda a, b: a.unionByName(b), frames) if frames else None


def _scans(files: Sequence[tuple[str, int]], schema: StructType) -> list[dict[str, int]]:
    """``files`` (``[(file URL, commit version)]``) split into scans, ``[{file URL: version}]``:
    one scan when each file is named apart by a short path suffix Spark reports unchanged
    (:func:`_file_keys`), else one scan per version, as when the table has a ``_metadata``
    column (Spark's file metadata column is then hidden)."""
    versions = {v for _, v in files}
    if len(versions) > 1 and METADATA not in schema.fieldNames() and _file_keys([u for u, _ in files]) is not None:
        return [dict(files)]
    by_version: dict[int, dict[str, int]] = defaultdict(dict)
    for url, version in files:
        by_version[version][url] = version
    return [by_version[v] for v in sorted(by_version)]


#: characters a path suffix key may hold: those ``_metadata.file_path`` gives as the log does
#: (no percent-encoding question arises)
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._=/-]+")


def _file_keys(urls: Sequence[str]) -> dict[str, str] | None:
    """``{url: key}``: the shortest path suffix (in components, at most 4) that names every file
    apart (Spark names a task's files alike in every directory of a partitioned write, so the
    file name alone may not); ``None`` when none does or a key holds other characters."""
    parts = {url: url.rstrip("/").split("/") for url in urls}
    for depth in range(1, 5):
        keys = {url: "/".join(p[-depth:]) for url, p in parts.items()}
        if len(set(keys.values())) == len(keys):
            return keys if all(_PLAIN_PATH.fullmatch(k) for k in keys.values()) else None
    return None


def _version_column(versions: Mapping[str, int]) -> Column:
    """``_commit_version`` of a scan's rows: the literal when its files share one version, else
    looked up by each file's path suffix (:func:`_file_keys`) in ``_metadata.file_path``."""
    distinct = set(versions.values())
    if len(distinct) == 1:
        return F.lit(distinct.pop()).cast(LongType())
    keys = _file_keys(list(versions))
    assert keys is not None  # _scans made one scan of several versions only with keys
    depth = keys[next(iter(keys))].count("/") + 1
    by_key = F.create_map(*[c for url, v in versions.items() for c in (F.lit(keys[url]), F.lit(v))])
    parts = F.split(F.col(f"{METADATA}.file_path"), "/")
    key = F.array_join(F.slice(parts, -depth, depth), "/")
    return F.element_at(by_key, key).cast(LongType())


