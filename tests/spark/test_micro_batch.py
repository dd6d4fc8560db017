"""``TsbApp(process_micro_batch=...)`` (``spark/micro_batch.py``): a micro-batch of several
barriers built by one call over one scan of their epochs, on real Spark (Connect) and Delta.

The runner's own entry point (:func:`~airflow_provider_tsb.spark.runner.run_barrier_group`)
takes barriers 2-4 of an ``append`` sink; checked on the data: one commit per barrier holding
exactly its epoch's rows, the call made once, and the user mistakes (no barrier column, rows
tagged outside the micro-batch, a ``merge`` sink) refused or routed to ``process`` with nothing
committed. The operator-level run (its own processes, the metastore catalog) is
``test_micro_batch_streaming.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_tsb.delta import version_of_barrier
from airflow_provider_tsb.exceptions import BarrierColumnError
from airflow_provider_tsb.spark import BARRIER_COLUMN, BarrierContext, MicroBatchContext, Sink, TsbApp
from airflow_provider_tsb.spark.app_run import AppRun
from airflow_provider_tsb.spark.inputs import read_changes
from airflow_provider_tsb.spark.plans import BarrierPlan
from airflow_provider_tsb.spark.runner import run_barrier, run_barrier_group

pytestmark = [pytest.mark.spark]

SRC, SINK = "raw.events", "out.events"
ROWS = 5  # rows per root commit; barrier b's epoch is the root's commits 2b-1 and 2b


def _root(tmp_path: Path, barriers: int) -> str:
    """A root table with two commits per barrier: version ``v`` (1-based) holds ids ``v*10 ..``."""
    location = str(tmp_path / "root")
    write_deltalake(location, pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.int64())}))
    for version in range(1, 2 * barriers + 1):
        ids = list(range(version * 10, version * 10 + ROWS))
        write_deltalake(location, pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([version] * ROWS)}),
                        mode="append")
    return location


def _plans(barriers: list[int]) -> list[BarrierPlan]:
    return [BarrierPlan(barrier=b, ts_ms=1_700_000_000_000 + b, inputs={SRC: 2 * b},
                        previous_barrier=b - 1 if b > 1 else None,
                        previous_inputs={SRC: 2 * (b - 1)} if b > 1 else {}) for b in barriers]


class Calls:
    """An app whose ``process`` and ``process_micro_batch`` record the barriers they were called for."""

    def __init__(self, micro: Callable[[DataFrame, MicroBatchContext], DataFrame] | None, mode: str = "append"):
        self.process_calls: list[int] = []
        self.micro_calls: list[list[int]] = []
        self._micro = micro
        sink = Sink(mode="append") if mode == "append" else Sink(mode="merge", keys=("id",))
        self.app = TsbApp(job_id="events_job", sources={SRC: None}, sinks={SINK: sink}, process=self.process,
                          process_micro_batch=self.process_micro_batch if micro is not None else None)

    def process(self, ctx: BarrierContext) -> dict[str, DataFrame]:
        self.process_calls.append(ctx.barrier)
        return {SINK: ctx.changes(SRC).where(F.col("_change_type") == "insert").select("id", "v")}

    def process_micro_batch(self, ctx: MicroBatchContext) -> dict[str, DataFrame]:
        self.micro_calls.append(ctx.barriers)
        assert self._micro is not None
        return {SINK: self._micro(ctx.changes(SRC).where(F.col("_change_type") == "insert"), ctx)}


def _keep_barrier(changes: DataFrame, ctx: MicroBatchContext) -> DataFrame:
    return changes.select("id", "v", ctx.barrier_column)


def _setup(tmp_path: Path, spark: object, calls: Calls) -> dict[str, str]:
    """The root with 4 barriers' commits, and the sink created by barrier 1 run alone."""
    locations = {SRC: _root(tmp_path, 4), SINK: str(tmp_path / "sink")}
    run_barrier(AppRun(spark, calls.app, None, locations), _plans([1])[0])
    return locations


def _sink_ids_at(location: str, barrier: int) -> list[int]:
    version = version_of_barrier(location, barrier)
    assert version is not None, barrier
    return sorted(DeltaTable(location, version=version).to_pyarrow_table().column("id").to_pylist())


def _root_ids_upto(barrier: int) -> list[int]:
    return sorted(i for version in range(1, 2 * barrier + 1) for i in range(version * 10, version * 10 + ROWS))


def test_one_call_builds_a_micro_batch_and_each_barrier_commits_its_own_rows(tmp_path: Path, spark: object) -> None:
    calls = Calls(_keep_barrier)
    locations = _setup(tmp_path, spark, calls)
    done = run_barrier_group(AppRun(spark, calls.app, None, locations), _plans([2, 3, 4]))
    assert done == [2, 3, 4]
    assert calls.micro_calls == [[2, 3, 4]] and calls.process_calls == [1]
    versions = [version_of_barrier(locations[SINK], b) for b in (1, 2, 3, 4)]
    assert versions == [0, 1, 2, 3]  # a commit per barrier, in order
    for b in (1, 2, 3, 4):
        assert _sink_ids_at(locations[SINK], b) == _root_ids_upto(b), b
    # the group's files share their names (a task names its files alike in every barrier's
    # directory); a read of the sink's changes still gives each row its own commit, in one scan
    names = [p.rsplit("/", 1)[-1] for v in (1, 2, 3) for p in DeltaTable(locations[SINK], version=v).file_uris()
             if f"/{v + 1}/" in p]
    assert len(names) > len(set(names)), names
    changes = read_changes(spark, locations[SINK], 0, 3, barriers=[(2, 1), (3, 2), (4, 3)])
    assert changes._explain_string().count("FileScan parquet") == 1  # noqa: SLF001 - the plan, not the rows
    rows = changes.collect()
    assert len(rows) == 6 * ROWS
    assert all(r[BARRIER_COLUMN] == (r["id"] // 10 + 1) // 2 == r["_commit_version"] + 1 for r in rows)


def test_the_changes_of_a_micro_batch_carry_each_rows_barrier(tmp_path: Path, spark: object) -> None:
    location = _root(tmp_path, 4)
    rows = read_changes(spark, location, 2, 8, barriers=[(2, 4), (3, 6), (4, 8)]).collect()
    assert len(rows) == 6 * ROWS
    for row in rows:  # root version v belongs to barrier ceil(v / 2)
        assert row[BARRIER_COLUMN] == (row["_commit_version"] + 1) // 2 and row["v"] == row["_commit_version"]
    with pytest.raises(ValueError, match="must ascend by barrier and version, end at to_version 8"):
        read_changes(spark, location, 2, 8, barriers=[(3, 6), (2, 4)])


def test_a_micro_batch_of_a_hundred_barriers_tags_each_row(tmp_path: Path, spark: object) -> None:
    """The barrier column is one flat expression: built as chained ``when``s it nested a level per
    barrier, and Spark Connect refused a micro-batch of 96 (``Exceeded upb_DecodeOptions_MaxDepth``)."""
    location = _root(tmp_path, 60)
    barriers = [(b, 2 * b) for b in range(1, 61)] + [(60 + b, 120 + b) for b in range(1, 41)]
    for version in range(121, 161):  # 40 more commits, a barrier each: 100 barriers
        write_deltalake(location, pa.table({"id": pa.array([version * 10], pa.int64()), "v": pa.array([version])}),
                        mode="append")
    rows = read_changes(spark, location, 0, 160, barriers=barriers).select("v", BARRIER_COLUMN).collect()
    assert len(rows) == 120 * ROWS + 40
    assert all(r[BARRIER_COLUMN] == ((r["v"] + 1) // 2 if r["v"] <= 120 else r["v"] - 60) for r in rows)


@pytest.mark.parametrize(
    ("micro", "message"),
    [
        (lambda changes, ctx: changes.select("id", "v"),
         rf"job events_job, table {SINK}: the micro-batch's output \(barriers from 2\) has no {BARRIER_COLUMN} column"),
        (lambda changes, ctx: changes.select("id", "v", F.when(F.col("v") == 7, F.lit(9)).otherwise(
            F.col(BARRIER_COLUMN)).alias(BARRIER_COLUMN)),
         rf"barriers 2-4 has output rows whose {BARRIER_COLUMN} is 9, not one of its barriers \[2, 3, 4\]"),
        (lambda changes, ctx: changes.select("id", "v", F.lit(None).cast("int").alias(BARRIER_COLUMN)),
         rf"has output rows whose {BARRIER_COLUMN} is null"),
    ],
    ids=["no-barrier-column", "a-barrier-outside", "null-barrier"],
)
def test_a_micro_batch_without_its_barriers_is_refused_and_commits_nothing(
    tmp_path: Path, spark: object, micro: Callable[[DataFrame, MicroBatchContext], DataFrame], message: str
) -> None:
    calls = Calls(micro)
    locations = _setup(tmp_path, spark, calls)
    with pytest.raises(BarrierColumnError, match=message):
        run_barrier_group(AppRun(spark, calls.app, None, locations), _plans([2, 3, 4]))
    assert DeltaTable(locations[SINK]).version() == 0 and version_of_barrier(locations[SINK], 2) is None
    staged = [p for p in Path(locations[SINK], "tsb_staging").rglob("*.parquet")]
    assert staged and all(p.relative_to(locations[SINK]).parts[3] == "1" for p in staged)  # the group's: deleted
    assert _sink_ids_at(locations[SINK], 1) == _root_ids_upto(1)


def test_a_merge_sink_runs_process_per_barrier(tmp_path: Path, spark: object) -> None:
    calls = Calls(_keep_barrier, mode="merge")
    locations = _setup(tmp_path, spark, calls)
    assert run_barrier_group(AppRun(spark, calls.app, None, locations), _plans([2, 3, 4])) == [2, 3, 4]
    assert calls.micro_calls == [] and calls.process_calls == [1, 2, 3, 4]
    for b in (2, 3, 4):
        assert _sink_ids_at(locations[SINK], b) == _root_ids_upto(b), b


def test_a_range_of_a_table_with_a_metadata_column_is_read_a_scan_per_commit(tmp_path: Path, spark: object) -> None:
    """A table with a ``_metadata`` column hides Spark's file metadata column, so the file of a
    row cannot be asked: each commit is its own scan, and every row still gets its own commit
    version and barrier."""
    location = str(tmp_path / "metadata")
    for version in range(3):
        write_deltalake(location, pa.table({"id": pa.array([version * 10, version * 10 + 1], pa.int64()),
                                            "_metadata": pa.array([f"m{version}"] * 2)}), mode="append")
    changes = read_changes(spark, location, 0, 2, barriers=[(5, 1), (6, 2)])
    assert changes._explain_string().count("FileScan parquet") == 2  # noqa: SLF001 - the plan, not the rows
    rows = changes.collect()
    assert sorted((r["id"], r["_commit_version"], r[BARRIER_COLUMN], r["_metadata"]) for r in rows) == [
        (10, 1, 5, "m1"), (11, 1, 5, "m1"), (20, 2, 6, "m2"), (21, 2, 6, "m2")]
