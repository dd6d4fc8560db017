"""The schema of a sink's output against its Delta table (driver side)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType


def _nullable(schema: StructType) -> StructType:
    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])


def _align_to_table(df: DataFrame, location: str, table_schema: StructType) -> DataFrame:
    missing = [f.name for f in table_schema.fields if f.name not in df.columns]
    extra = [c for c in df.columns if c not in table_schema.fieldNames()]
    if missing or extra:
        raise ValueError(
            f"output for {location!r} does not match the table schema: missing columns {missing}, "
            f"unexpected columns {extra} (schema evolution is not supported)"
        )
    actual = {f.name: f.dataType for f in df.schema.fields}
    if [f.name for f in df.schema.fields] == table_schema.fieldNames() and all(
        actual[f.name] == f.dataType for f in table_schema.fields
    ):
        return df  # already the table's columns and types: no projection (saves driver round trips)
    return df.select(
        *[
            F.col(f.name) if actual[f.name] == f.dataType else F.col(f.name).cast(f.dataType).alias(f.name)
            for f in table_schema.fields
        ]
    )
