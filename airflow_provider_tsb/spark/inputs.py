"""Read Delta tables with Spark at exact versions: snapshots and epochs of changes.

Two readers, one answer (the same rows, columns and change rules):

* :mod:`.inputs_delta`, **Spark's Delta reader** (``versionAsOf``, the change data feed), for
  every table whose protocol has a reader feature (deletion vectors, column mapping,
  ``timestampNtz``, type widening, v2 checkpoints: :func:`uses_delta_reader`), so users' roots
  are read as their Spark wrote them; and for every table when ``$TSB_SPARK_READER`` is
  ``delta``;
* :mod:`.inputs_files`, the **file list** of a plain table (no reader feature): delta-rs lists
  a version's files and Spark reads them as Parquet, one scan. Spark's Delta reader rebuilds
  each new version's state with Spark jobs, which every barrier of every job would pay
  (docs/engines.md, "Delta's jars", gives the cost; ``benchmarks/input_reads.py``).

Table data is never collected to the driver. Set ``TSB_SPARK_READER=files`` to refuse the
Delta reader (a table with reader features then raises ``UnsupportedTableFeatureError``).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from pyspark.sql import DataFrame, SparkSession

from airflow_provider_tsb.delta.log import normalize_location
from airflow_provider_tsb.delta.snapshots import snapshot_at
from airflow_provider_tsb.exceptions import UnsupportedTableFeatureError
from airflow_provider_tsb.spark import inputs_delta, inputs_files
from airflow_provider_tsb.spark.epochs import (
    CHANGE_TYPE,
    COMMIT_VERSION,
    DELETE_TYPES,
    INSERT_TYPES,
    METADATA,
    Ranges,
    change_ranges,
    change_schema,
    change_sign,
)
from airflow_provider_tsb.spark.inputs_delta import delta_version

#: ``auto`` (default: Spark's Delta reader for tables with reader features), ``delta`` (always),
#: ``files`` (never)
READER_ENV = "TSB_SPARK_READER"

__all__ = ["CHANGE_TYPE", "COMMIT_VERSION", "DELETE_TYPES", "INSERT_TYPES", "METADATA", "Ranges", "change_ranges",
           "change_schema", "change_sign", "delta_version", "read_changes", "read_snapshot", "uses_delta_reader"]


def uses_delta_reader(location: str, version: int) -> bool:
    """Whether version ``version`` of the table at ``location`` is read with Spark's Delta
    reader (see module docstring; one cached delta-rs snapshot load).

    Raises:
        UnsupportedTableFeatureError: the table has reader features and ``TSB_SPARK_READER=files``.
        ValueError: ``$TSB_SPARK_READER`` is not ``auto``, ``delta`` or ``files``.
    """
    mode = os.environ.get(READER_ENV, "auto").strip().lower() or "auto"
    if mode not in ("auto", "delta", "files"):
        raise ValueError(f"{READER_ENV}={mode!r} is not one of auto, delta, files")
    if mode == "delta":
        return True
    loc = normalize_location(location)
    features = snapshot_at(loc, max(int(version), 0)).reader_features
    if features and mode == "files":
        raise UnsupportedTableFeatureError(
            f"Delta table {loc!r} uses reader features {sorted(features)}, which only Spark's Delta reader "
            f"applies; unset {READER_ENV} (or set it to auto) to read it with Delta's own connector"
        )
    return bool(features)


def read_snapshot(
    spark: SparkSession, location: str, version: int, *, within: Ranges | None = None,
    exclude: Collection[str] | None = None,
) -> DataFrame:
    """The Delta table at ``location`` as of ``version`` as a lazy DataFrame.

    Columns: the table schema. See :func:`.inputs_delta.read_snapshot` and
    :func:`.inputs_files.read_snapshot` (the same contract):

    Args:
        within: data skipping, ``{column: (min, max)}`` (from :func:`change_ranges`): only
            rows of files whose statistics overlap every range; a superset of the rows in the
            ranges (join or filter for exactness); ``None`` for a column selects nothing.
        exclude: paths (relative to the table root) of files to leave out.

    Raises:
        TableNotFoundError: no table at ``location``.
        DeltaLogError: ``version`` does not exist (or its log was cleaned up).
        DeltaLogIntegrityError: the log does not give the live files the commit recorded.
    """
    reader = inputs_delta if uses_delta_reader(location, version) else inputs_files
    return reader.read_snapshot(spark, location, version, within=within, exclude=exclude)


def read_changes(
    spark: SparkSession, location: str, from_version: int | None, to_version: int, *,
    barriers: Sequence[tuple[int, int]] = (),
) -> DataFrame:
    """The changes of the epoch ``(from_version, to_version]`` as a lazy DataFrame: the table's
    columns (as of ``to_version``) + ``_change_type`` + ``_commit_version`` (+ the barrier
    column with ``barriers``). Delta's change data feed rules; see
    :func:`.inputs_delta.read_changes` for the rules and arguments.

    Raises:
        DeltaLogError: a commit in the range is missing from the log.
        ValueError: ``from_version > to_version``, or ``barriers`` out of order.
    """
    reader = inputs_delta if uses_delta_reader(location, to_version) else inputs_files
    return reader.read_changes(spark, location, from_version, to_version, barriers=barriers)
