"""A barrier's output written before Spark is asked for its schema
(:func:`airflow_provider_tsb.spark.outputs._write_as_is`), on the Spark Connect session jobs use:

* an output in the table's own layout is committed as written (its files keep the output's
  column order and types);
* an output that needs the checked path (reordered columns, a narrower type, a new column) is
  committed as that path writes it: cast, in the table's order, evolved; the files of the first
  write are deleted, so the barrier's attempt directory holds exactly the commit's files;
* refusals keep their messages and leave nothing behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta.barriers import version_of_barrier
from airflow_provider_tsb.delta.log import read_commit_actions
from airflow_provider_tsb.spark import outputs
from airflow_provider_tsb.spark.outputs import SchemaChangeError
from airflow_provider_tsb.spark.outputs_staging import STAGING_DIR
from tsb_dev.dataplane import write_sink

pytestmark = [pytest.mark.spark]

TABLE = "tsb.mart.layout"


def _write(spark: Any, loc: str, barrier: int, rows: list[tuple], ddl: str, **kw: Any) -> Any:
    return write_sink(spark, spark.createDataFrame(rows, ddl), table=TABLE, location=loc, job_id="j",
                      barrier=barrier, mode=kw.pop("mode", "append"), inputs={}, **kw)


def _staged_parquet(loc: str, barrier: int) -> set[str]:
    """Parquet files of ``barrier``'s attempt directories, relative to the table root."""
    root = Path(loc)
    return {str(p.relative_to(root)) for p in (root / STAGING_DIR).glob(f"j/*/{barrier}/*/*.parquet")}


def _adds(loc: str, barrier: int) -> set[str]:
    version = version_of_barrier(loc, barrier)
    assert version is not None, f"barrier {barrier} has no commit"
    return {a["add"]["path"] for a in read_commit_actions(loc, version) or [] if "add" in a}


def _file_layout(loc: str, path: str) -> list[tuple[str, str]]:
    schema = pq.read_schema(f"{loc}/{path}")
    return [(f.name, str(f.type)) for f in schema]


def test_outputs_in_the_table_layout_commit_as_written_and_others_take_the_checked_path(
    tmp_path: Path, spark: Any,
) -> None:
    loc = str(tmp_path / "t")
    outputs._checked_barriers_left.clear()
    _write(spark, loc, 1, [(1, "a", 10)], "id long, name string, value long")
    _write(spark, loc, 2, [(2, "b", 20)], "id long, name string, value long")
    assert _staged_parquet(loc, 2) == _adds(loc, 2)
    assert [_file_layout(loc, p) for p in _adds(loc, 2)] == [[("id", "int64"), ("name", "string"),
                                                              ("value", "int64")]]

    # reordered columns and a narrower type: the first write is deleted, the checked path casts
    _write(spark, loc, 3, [(30, 3, "c")], "value int, id long, name string")
    assert _staged_parquet(loc, 3) == _adds(loc, 3), "the as-is write's files were left in the attempt directory"
    assert [_file_layout(loc, p) for p in _adds(loc, 3)] == [[("id", "int64"), ("name", "string"),
                                                              ("value", "int64")]]
    # after a miss the sink takes the checked path for a while (no write twice every barrier)
    assert outputs._checked_barriers_left[outputs.normalize_location(loc)] == outputs.CHECKED_AFTER_MISS
    outputs._checked_barriers_left.clear()

    # a new column: the as-is files are deleted, the schema evolves
    _write(spark, loc, 4, [(4, "d", 40, "x")], "id long, name string, value long, note string")
    assert _staged_parquet(loc, 4) == _adds(loc, 4)
    assert [f.name for f in DeltaTable(loc).schema().fields] == ["id", "name", "value", "note"]
    outputs._checked_barriers_left.clear()
    _write(spark, loc, 5, [(5, "e", 50, None)], "id long, name string, value long, note string")
    assert outputs.normalize_location(loc) not in outputs._checked_barriers_left

    rows = sorted(DeltaTable(loc).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "name": "a", "value": 10, "note": None}, {"id": 2, "name": "b", "value": 20, "note": None},
        {"id": 3, "name": "c", "value": 30, "note": None}, {"id": 4, "name": "d", "value": 40, "note": "x"},
        {"id": 5, "name": "e", "value": 50, "note": None},
    ]


def test_refusals_name_the_fault_and_leave_no_file(tmp_path: Path, spark: Any) -> None:
    loc = str(tmp_path / "r")
    outputs._checked_barriers_left.clear()
    _write(spark, loc, 1, [(1, 10)], "id long, value long", mode="merge", keys=("id",))
    head = DeltaTable(loc).version()
    cases = [
        ("id long", {"mode": "merge", "keys": ("id",)},
         "table tsb.mart.layout, barrier 2: the output has no column(s) ['value'] of the Delta table"),
        ("id long, value string", {"mode": "merge", "keys": ("id",)},
         "table tsb.mart.layout, barrier 2: column 'value' is string in the output but bigint"),
        ("key long, value long", {"mode": "merge", "keys": ("key",)},
         "table tsb.mart.layout, barrier 2: the output has no column(s) ['id'] of the Delta table"),
        ("id long, value long", {"mode": "merge", "keys": ("nope",)},
         "table tsb.mart.layout, barrier 2: the output has no column(s) ['nope'] named in the sink's keys"),
    ]
    for ddl, kw, message in cases:
        outputs._checked_barriers_left.clear()
        with pytest.raises(SchemaChangeError) as err:
            _write(spark, loc, 2, [(2, "x" if "string" in ddl else 20)[: len(ddl.split(","))]], ddl, **kw)
        assert message in str(err.value), str(err.value)
        assert DeltaTable(loc).version() == head
        assert _staged_parquet(loc, 2) == set(), f"{ddl}: files left behind"
