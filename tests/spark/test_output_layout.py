"""A barrier's output written before Spark is asked for its schema
(:func:`airflow_provider_tsb.spark.outputs._write_as_is`), on the Spark Connect session jobs use:

* an output in the table's own layout is committed as written (its files keep the output's
  column order and types);
* an output that needs the checked path (reordered columns, a narrower type, a new column) is
  committed as that path writes it: cast, in the table's order, evolved; the files of the first
  write are deleted, so the barrier's attempt directory holds exactly the commit's files;
* refusals keep their messages and leave nothing behind;
* a merge finds the files holding an updated key on the driver, the same files Spark's
  semi-join finds.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta.barriers import version_of_barrier
from airflow_provider_tsb.delta.commit import StagedFile
from airflow_provider_tsb.delta.log import read_commit_actions
from airflow_provider_tsb.delta.snapshots import snapshot_at
from airflow_provider_tsb.spark import outputs
from airflow_provider_tsb.spark.outputs import SchemaChangeError
from airflow_provider_tsb.spark.outputs_merge import affected_files, summarize_staged_keys
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


def test_a_merge_finds_the_files_of_updated_keys_on_the_driver_as_spark_does(tmp_path: Path, spark: Any) -> None:
    loc = str(tmp_path / "m")
    outputs._checked_barriers_left.clear()
    ddl = "carrier string, day date, flights long"
    day = dt.date(2013, 1, 1)
    for b in range(1, 5):  # four files, each one carrier's days
        _write(spark, loc, b, [(c, day + dt.timedelta(days=d), 1) for c in ("AA", "B6", "DL", "UA")[b - 1:b]
                               for d in range(5)], ddl, mode="merge", keys=("carrier", "day"), max_files=1)
    snapshot = snapshot_at(loc, DeltaTable(loc).version())
    assert snapshot.add_actions.num_rows == 4
    update = spark.createDataFrame([("B6", day, 9), ("UA", day + dt.timedelta(days=4), 9), ("ZZ", day, 9)], ddl)
    staged = tmp_path / "staged"
    update.coalesce(1).write.parquet(str(staged))
    files = [StagedFile(p.name, p.stat().st_size, 0, 3, "{}") for p in staged.glob("*.parquet")]
    summary = summarize_staged_keys(pafs.LocalFileSystem(), str(staged), files, ("carrier", "day"),
                                    table=TABLE, barrier=5)
    assert summary is not None and summary.rows is not None and summary.rows.num_rows == 3
    keys = update.select("carrier", "day")
    on_driver, candidates, total = affected_files(spark, loc, snapshot, keys, ("carrier", "day"), summary.bounds,
                                                  output_keys=summary.rows)
    by_spark, candidates_spark, _ = affected_files(spark, loc, snapshot, keys, ("carrier", "day"), summary.bounds)
    holding = {p for p in snapshot.add_actions.column("path").to_pylist()
               if set(pq.read_table(f"{loc}/{p}", columns=["carrier"]).column("carrier").to_pylist()) & {"B6", "UA"}}
    assert {e["path"] for e in on_driver} == {e["path"] for e in by_spark} == holding
    assert len(holding) == 2 and candidates == candidates_spark and total == 4

    # and through a barrier: the merge removes exactly those files
    _write(spark, loc, 5, [("B6", day, 9), ("UA", day + dt.timedelta(days=4), 9), ("ZZ", day, 9)], ddl,
           mode="merge", keys=("carrier", "day"))
    removed = {a["remove"]["path"] for a in read_commit_actions(loc, version_of_barrier(loc, 5)) or []
               if "remove" in a}
    assert removed == holding
    got = {(r["carrier"], r["day"]): r["flights"] for r in DeltaTable(loc).to_pyarrow_table().to_pylist()}
    assert len(got) == 21 and got[("B6", day)] == 9 and got[("UA", day + dt.timedelta(days=4))] == 9
    assert got[("ZZ", day)] == 9 and got[("DL", day)] == 1
