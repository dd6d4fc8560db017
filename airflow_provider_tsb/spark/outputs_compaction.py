"""Auto compaction of a sink's small files inside a barrier's own commit.

A merge sink rewrites only the files that hold an affected key
(:mod:`airflow_provider_tsb.spark.outputs_merge`), so every barrier adds its output files and
the table's file count grows with the number of barriers: a reader of the whole table (the
flights ``carrier_ranking`` job reads ``carrier_daily_delay`` at every barrier) then lists,
plans and opens one more file per barrier, for ever, so the reader's barriers grow slower as the
history grows.

When the table's small files (below :attr:`Compaction.target_bytes`) number at least
:attr:`Compaction.min_files`, the barrier's commit also rewrites them: the executors read them
and write their rows into the attempt directory (one file per ``target_bytes`` of input), and
the commit removes the small files and adds the new ones with ``dataChange = false`` (Delta
protocol "Add File and Remove File": a rearrangement of data, as ``OPTIMIZE`` commits it), so
change readers (:func:`~airflow_provider_tsb.spark.inputs.read_changes`,
:func:`~airflow_provider_tsb.spark.inputs.change_ranges`) see only the barrier's own changes.
The table's rows at the barrier's version are exactly those without compaction. The file count
of the table stays below ``min_files`` plus the files one barrier adds; Databricks' auto
compaction (``delta.autoOptimize.autoCompact``, ``minNumFiles`` 50, 128 MiB files) is the same
rule run as a separate commit after the write.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from airflow_provider_tsb.delta.commit import RemovedFile, StagedFile
from airflow_provider_tsb.delta.compaction import (  # noqa: F401 - re-exported: the sinks' options
    APPEND_MIN_FILES,
    DEFAULT_MIN_FILES,
    DEFAULT_TARGET_BYTES,
    Compaction,
)
from airflow_provider_tsb.delta.log import join
from airflow_provider_tsb.delta.snapshots import Snapshot
from airflow_provider_tsb.spark.frames import read_files, spark_schema, with_columns_of


@dataclass(frozen=True)
class CompactionPlan:
    """The small files a barrier's commit rewrites.

    Attributes:
        files: the files, as ``{"path", "size", "partitionValues"}`` of the snapshot's ``add``
            actions (``path`` relative to the table root).
        bytes: their total size on storage.
    """

    files: tuple[dict[str, Any], ...]
    bytes: int


def plan_compaction(snapshot: Snapshot, options: Compaction | None, exclude: Collection[str] = ()) -> CompactionPlan:
    """The small files of ``snapshot`` to rewrite, or an empty plan (below ``min_files``, or
    ``options`` is ``None``).

    Args:
        snapshot: the table at the version the barrier's commit is made on.
        exclude: paths the barrier's commit removes anyway (a merge's affected files).

    Cost: one pass over the snapshot's ``add`` actions (no data read).
    """
    if options is None or snapshot.add_actions.num_rows == 0:
        return CompactionPlan((), 0)
    actions = snapshot.add_actions
    part = [c for c in actions.column_names if c.startswith("partition.")]
    small = [
        {
            "path": row["path"],
            "size": int(row["size_bytes"]),
            "partitionValues": {c[len("partition.") :]: (None if row[c] is None else str(row[c])) for c in part},
        }
        for row in actions.select(["path", "size_bytes", *part]).to_pylist()
        if int(row["size_bytes"]) < options.target_bytes and row["path"] not in exclude
    ]
    if len(small) < options.min_files:
        return CompactionPlan((), 0)
    return CompactionPlan(tuple(small), sum(f["size"] for f in small))


def compacted_rows(
    spark: SparkSession, location: str, snapshot: Snapshot, plan: CompactionPlan, schema: StructType,
    options: Compaction,
) -> DataFrame:
    """The rows of the plan's files in the table's schema after the barrier (columns added by
    the barrier are null), repartitioned to one partition per ``target_bytes`` (lazy)."""
    partition_columns = list(snapshot.partition_columns)
    groups: dict[tuple[tuple[str, str | None], ...], list[str]] = defaultdict(list)
    for entry in plan.files:
        key = tuple((c, entry["partitionValues"].get(c)) for c in partition_columns)
        groups[key].append(join(location, entry["path"]))
    rows = read_files(spark, spark_schema(snapshot), partition_columns, groups)
    if rows is None:
        raise ValueError(f"compaction of {location!r}: the plan has no files")
    return with_columns_of(rows, schema).coalesce(max(1, math.ceil(plan.bytes / options.target_bytes)))


def rearranged(files: Sequence[StagedFile], plan: CompactionPlan) -> tuple[list[StagedFile], list[RemovedFile]]:
    """The commit's actions of a compaction: ``files`` (written from the plan's rows) added and
    the plan's files removed, all with ``dataChange = false``."""
    adds = [StagedFile(f.path, f.size, f.modification_time, f.num_records, f.stats, f.partition_values,
                       data_change=False) for f in files]
    removes = [RemovedFile(e["path"], e["size"], dict(e["partitionValues"]), data_change=False) for e in plan.files]
    return adds, removes
