"""A merge sink finds the table's files holding an updated key
(:func:`airflow_provider_tsb.spark.outputs_merge.affected_files`), on the Spark Connect session
jobs use: on the driver (pyarrow over the candidates' key columns) when the output's keys were
summarized there, else by a Spark semi-join; both find the same files, and a barrier's commit
removes exactly the files that held an updated key.
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
from airflow_provider_tsb.delta.log import read_commit_actions
from airflow_provider_tsb.delta.snapshots import snapshot_at
from airflow_provider_tsb.spark import outputs_merge
from airflow_provider_tsb.spark.outputs_merge import affected_files, summarize_staged_keys
from dev.dataplane import write_sink

pytestmark = [pytest.mark.spark]

TABLE = "tsb.mart.daily"


def _write(spark: Any, loc: str, barrier: int, rows: list[tuple], ddl: str, **kw: Any) -> Any:
    return write_sink(spark, spark.createDataFrame(rows, ddl), table=TABLE, location=loc, job_id="j",
                      barrier=barrier, mode=kw.pop("mode", "append"), inputs={}, **kw)


def test_a_merge_finds_the_files_of_updated_keys_on_the_driver_as_spark_does(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    loc = str(tmp_path / "m")
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
    summary = summarize_staged_keys(pafs.LocalFileSystem(), str(staged), ("carrier", "day"), table=TABLE, barrier=5)
    assert summary is not None and summary.rows is not None and summary.rows.num_rows == 3
    keys = update.select("carrier", "day")
    on_driver, candidates, total = affected_files(spark, loc, snapshot, keys, ("carrier", "day"), summary.bounds,
                                                  output_keys=summary.rows)
    by_spark, candidates_spark, _ = affected_files(spark, loc, snapshot, keys, ("carrier", "day"), summary.bounds)
    holding = {p for p in snapshot.add_actions.column("path").to_pylist()
               if set(pq.read_table(f"{loc}/{p}", columns=["carrier"]).column("carrier").to_pylist()) & {"B6", "UA"}}
    assert {e["path"] for e in on_driver} == {e["path"] for e in by_spark} == holding
    assert len(holding) == 2 and candidates == candidates_spark and total == 4
    # candidates of more rows than the driver reads: Spark's semi-join, the same files
    entries = [e for e in outputs_merge._active_files(snapshot, ("carrier", "day"))]
    monkeypatch.setattr(outputs_merge, "DRIVER_KEY_ROWS", 4)
    assert outputs_merge._affected_on_driver(loc, entries, ("carrier", "day"), summary.rows, []) is None
    over, _, _ = affected_files(spark, loc, snapshot, keys, ("carrier", "day"), summary.bounds,
                                output_keys=summary.rows)
    assert {e["path"] for e in over} == holding
    monkeypatch.undo()

    # and through a barrier: the merge removes exactly those files
    _write(spark, loc, 5, [("B6", day, 9), ("UA", day + dt.timedelta(days=4), 9), ("ZZ", day, 9)], ddl,
           mode="merge", keys=("carrier", "day"))
    removed = {a["remove"]["path"] for a in read_commit_actions(loc, version_of_barrier(loc, 5)) or []
               if "remove" in a}
    assert removed == holding
    got = {(r["carrier"], r["day"]): r["flights"] for r in DeltaTable(loc).to_pyarrow_table().to_pylist()}
    assert len(got) == 21 and got[("B6", day)] == 9 and got[("UA", day + dt.timedelta(days=4))] == 9
    assert got[("ZZ", day)] == 9 and got[("DL", day)] == 1
