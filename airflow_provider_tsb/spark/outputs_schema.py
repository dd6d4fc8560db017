"""The schema of a sink's output against its Delta table: additive evolution, or a clear refusal.

A barrier's output may add columns to its sink table (additive schema evolution, Delta protocol
"Schema Serialization Format": a ``metaData`` action with the new ``schemaString``). Rules, checked
on the driver before anything is written:

* a column of the table missing from the output is refused (a dropped column);
* a column whose type differs is refused unless the output's type widens losslessly to the
  table's (``byte``/``short``/``int`` to ``long``/``double``, ``float`` to ``double``; nested
  nullability differences are ignored): the output is cast to the table's type;
* a new column is added as nullable (older rows read back as null) unless the sink's declared
  schema (``Sink.schema``) says ``NOT NULL``: a new non-nullable column is refused (older rows
  would break it).

Refusals raise :class:`SchemaChangeError` naming the table, the barrier, the column and what to do.
Partition columns are fixed at creation: :func:`check_partition_columns`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StructField,
    StructType,
)

from airflow_provider_tsb.exceptions import SchemaChangeError

_WIDENS_TO: dict[type[DataType], tuple[type[DataType], ...]] = {
    ByteType: (ShortType, IntegerType, LongType, DoubleType),
    ShortType: (IntegerType, LongType, DoubleType),
    IntegerType: (LongType, DoubleType),
    LongType: (),
    FloatType: (DoubleType,),
}


def nullable_schema(schema: StructType) -> StructType:
    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])


def _loose(data_type: DataType) -> DataType:
    """``data_type`` with every nested field, element and value nullable (for comparisons)."""
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _loose(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_loose(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_loose(data_type.keyType), _loose(data_type.valueType), True)
    return data_type


def _castable(actual: DataType, target: DataType) -> bool:
    if isinstance(actual, NullType) or _loose(actual) == _loose(target):
        return True
    return isinstance(target, _WIDENS_TO.get(type(actual), ()))


def evolve_schema(
    output: StructType,
    table_schema: StructType,
    *,
    table: str,
    barrier: int,
    declared: StructType | None = None,
) -> StructType:
    """The table's schema after this barrier: its columns, then the output's new columns (nullable).

    Args:
        output: the barrier output's schema.
        table_schema: the Delta table's current schema.
        table: sink table name (for errors).
        barrier: barrier id (for errors).
        declared: the sink's declared schema (``Sink.schema`` parsed), for ``NOT NULL``.

    Raises:
        SchemaChangeError: a dropped column, a changed type or a new non-nullable column.
    """
    names = set(output.fieldNames())
    known = set(table_schema.fieldNames())
    where = f"table {table}, barrier {barrier}"
    dropped = [f.name for f in table_schema.fields if f.name not in names]
    if dropped:
        raise SchemaChangeError(
            f"{where}: the output has no column(s) {dropped} of the Delta table (a dropped column). Only additive "
            "schema changes are applied; keep the column in the output (e.g. F.lit(None).cast(<its type>)), "
            "or write a new table"
        )
    actual = {f.name: f.dataType for f in output.fields}
    for field in table_schema.fields:
        if not _castable(actual[field.name], field.dataType):
            raise SchemaChangeError(
                f"{where}: column {field.name!r} is {actual[field.name].simpleString()} in the output but "
                f"{field.dataType.simpleString()} in the Delta table (a changed type; only lossless widening is "
                f"cast). Cast it in the app (F.col({field.name!r}).cast({field.dataType.simpleString()!r})), or "
                "add a new column with the new type"
            )
    declared_fields = {f.name: f for f in declared.fields} if declared is not None else {}
    added: list[StructField] = []
    for field in output.fields:
        if field.name in known:
            continue
        spec = declared_fields.get(field.name)
        if spec is not None and not spec.nullable:
            raise SchemaChangeError(
                f"{where}: new column {field.name!r} is declared NOT NULL in the sink's schema, but the rows "
                "already in the table have no value for it (a new non-nullable column). Declare it nullable, "
                "or write a new table"
            )
        added.append(StructField(field.name, field.dataType, True, field.metadata))
    return StructType([*table_schema.fields, *added])


def check_partition_columns(table: str, location: str, existing: Sequence[str], declared: Sequence[str]) -> None:
    """Refuse a change of partition columns of an existing table.

    Raises:
        SchemaChangeError: ``declared`` (``Sink.partition_by``) differs from the table's.
    """
    if list(existing) != list(declared):
        raise SchemaChangeError(
            f"table {table}: the sink declares partition_by={tuple(declared)!r} but the Delta table at "
            f"{location!r} is partitioned by {tuple(existing)!r}. Delta cannot change a table's partition "
            f"columns in place: declare partition_by={tuple(existing)!r}, or write a new table"
        )


def align_to_table(df: DataFrame, location: str, table_schema: StructType) -> DataFrame:
    """``df`` with the columns of ``table_schema`` in its order, cast where the types differ
    (the caller checked the change with :func:`evolve_schema`)."""
    missing = [f.name for f in table_schema.fields if f.name not in df.columns]
    extra = [c for c in df.columns if c not in table_schema.fieldNames()]
    if missing or extra:
        raise ValueError(
            f"output for {location!r} does not match the table schema: missing columns {missing}, "
            f"unexpected columns {extra}"
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
