"""Spark DataFrame primitives over a Delta table's Parquet files: the table's schema as Spark's,
files read in a schema, older rows in a newer schema.

Leaf helpers (they call no other module of the package), used by the reads
(:mod:`~airflow_provider_tsb.spark.inputs`) and by the writes (:mod:`~airflow_provider_tsb.spark.outputs`,
its merge and its compaction). Delta schema JSON is Spark's ``StructType`` JSON (Delta protocol
"Schema Serialization Format"), so the conversion is a parse.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructField, StructType

__all__ = ["BARRIER_COLUMN", "partition_literal", "read_files", "spark_schema", "with_columns_of"]

#: the barrier of each row when one frame holds several barriers' rows: a micro-batch's changes
#: (:func:`~airflow_provider_tsb.spark.inputs.read_changes` with ``barriers``) and its outputs,
#: which are written partitioned by it (:func:`~airflow_provider_tsb.spark.outputs.stage_outputs`)
BARRIER_COLUMN = "_tsb_barrier"


def spark_schema(table: object) -> StructType:
    """Return the Spark schema of a loaded ``DeltaTable`` or of a cached
    :class:`~airflow_provider_tsb.delta.snapshots.Snapshot` (which has ``schema_json``)."""
    text = getattr(table, "schema_json", None)
    if text is None:
        text = table.schema().to_json()  # type: ignore[attr-defined]
    return StructType.fromJson(json.loads(text))


def partition_literal(value: str | None, data_type: DataType) -> Column:
    return F.lit(value).cast(data_type)


def read_files(
    spark: SparkSession,
    schema: StructType,
    partition_columns: Sequence[str],
    groups: Mapping[tuple[tuple[str, str | None], ...], list[str]],
    file_columns: Mapping[str, Column] | None = None,
    file_schema_extra: Sequence[StructField] = (),
) -> DataFrame | None:
    """Read groups of files sharing partition values, one scan per group; ``None`` if there are
    no files.

    Columns: ``schema``'s (partition columns from the group's values), then
    ``file_schema_extra`` (columns the files hold beyond the table's), then ``file_columns``
    (``{name: expression}`` evaluated on the scan itself, so they may read Spark's hidden
    ``_metadata`` file column)."""
    data_schema = StructType([f for f in schema.fields if f.name not in partition_columns] + list(file_schema_extra))
    types = {f.name: f.dataType for f in schema.fields}
    frames: list[DataFrame] = []
    for part_values, paths in groups.items():
        df = spark.read.schema(data_schema).parquet(*paths)
        if file_columns:
            df = df.withColumns(dict(file_columns))
        for name, value in part_values:
            df = df.withColumn(name, partition_literal(value, types[name]))
        frames.append(df)
    if not frames:
        return None
    out_cols = [f.name for f in schema.fields] + [f.name for f in file_schema_extra] + list(file_columns or {})
    return reduce(lambda a, b: a.unionByName(b), (f.select(*out_cols) for f in frames))


def with_columns_of(df: DataFrame, schema: StructType) -> DataFrame:
    """``df`` (rows of an older table version) with ``schema``'s columns: the new ones null."""
    have = set(df.columns)
    return df.select(
        *[F.col(f.name) if f.name in have else F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields]
    )
