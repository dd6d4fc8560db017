"""Arrow tables from Python rows and from delta-rs's Arrow exports, without pyarrow's pandas probe.

``pa.table(...)``, ``pa.array(<Python list>)`` and ``pa.Table.from_pylist`` first ask whether their
input is a pandas object, and that question imports pandas (about 55 MB of RSS) into a process
that never uses it: the barrier emitter writes one barrier-log row and reads a few Delta logs per
barrier. Arrow's C data interface (``__arrow_c_stream__``, ``__arrow_c_array__``; the Arrow
"C Stream Interface" and "PyCapsule Interface" specifications) and arro3's array constructor ask
nothing of pandas, so the two functions here build the same tables through them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import arro3.core as ac
import pyarrow as pa

__all__ = ["rows_table", "stream_table"]


def stream_table(data: Any) -> pa.Table:
    """A pyarrow table of an Arrow C stream exporter, e.g. delta-rs's
    ``DeltaTable.get_add_actions()`` (an arro3 table): ``pa.table(data)`` without the pandas probe."""
    return pa.RecordBatchReader.from_stream(data).read_all()


def rows_table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """``rows`` (dicts by field name; a missing key is null) as a table of ``schema``: the table
    ``pa.Table.from_pylist(rows, schema=schema)`` gives, for fields of Arrow's primitive types,
    strings and maps of them (a map value as a dict or a sequence of key/value pairs).

    Raises:
        TypeError: a field of another type (names it).
    """
    return pa.Table.from_arrays([_column([row.get(f.name) for row in rows], f) for f in schema], schema=schema)


def _column(values: list[Any], field: pa.Field) -> pa.Array:
    kind = field.type
    if pa.types.is_map(kind):
        offsets, keys, items, valid = [0], [], [], []
        for value in values:
            pairs = list(value.items()) if isinstance(value, Mapping) else list(value or ())
            keys.extend(k for k, _ in pairs)
            items.extend(v for _, v in pairs)
            offsets.append(len(keys))
            valid.append(value is not None)
        mask = None if all(valid) else _column([not v for v in valid], pa.field("mask", pa.bool_()))
        return pa.MapArray.from_arrays(_column(offsets, pa.field("offsets", pa.int32())),
                                       _column(keys, kind.key_field), _column(items, kind.item_field),
                                       type=kind, mask=mask)
    if not (pa.types.is_primitive(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise TypeError(f"rows_table: field {field.name!r} of type {kind} is not a primitive, string or map type")
    return pa.array(ac.Array(values, ac.DataType.from_arrow(kind)))
