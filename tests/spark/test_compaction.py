"""Auto compaction of a sink's small files in the barrier's own commit (issue 21: a merge sink's
file count grew with every barrier, and so did every read of the whole table).

Barriers written with :func:`write_barrier` on the session's Spark Connect server: the rows are
those of an uncompacted twin table at every barrier, the file count stays bounded, the
compaction's adds and removes carry ``dataChange = false``, and the change feed of each barrier
holds only its own rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta.barriers import version_of_barrier
from airflow_provider_tsb.delta.log import read_commit_actions
from airflow_provider_tsb.spark.inputs import read_changes
from airflow_provider_tsb.spark.outputs_compaction import Compaction
from tsb_dev.dataplane import write_sink

pytestmark = [pytest.mark.spark]

BARRIERS = 7
MIN_FILES = 3


def rows_of(location: str, version: int | None = None) -> list[tuple]:
    table = DeltaTable(location, version=version).to_pyarrow_table()
    return sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


def output(spark, barrier: int):
    """Two new ids per barrier (one file each) and, from barrier 2 on, an update of id 1."""
    rows = [(barrier * 10, barrier), (barrier * 10 + 1, barrier)]
    if barrier > 1:
        rows.append((1, barrier))
    return spark.createDataFrame(rows, "id long, v long").repartition(2)


@pytest.mark.parametrize("mode", ["merge", "append"])
def test_compaction_keeps_rows_bounds_files_and_hides_from_changes(spark, tmp_path: Path, mode: str) -> None:
    compacted, twin = str(tmp_path / "compacted"), str(tmp_path / "twin")
    keys = ("id",) if mode == "merge" else ()
    for b in range(1, BARRIERS + 1):
        for loc, compaction in ((compacted, Compaction(min_files=MIN_FILES)), (twin, None)):
            write_sink(spark, output(spark, b), table="t", location=loc, job_id="j", barrier=b, mode=mode,
                       inputs={}, keys=keys, compaction=compaction)
        version = version_of_barrier(compacted, b)
        assert rows_of(compacted, version) == rows_of(twin, version_of_barrier(twin, b)), b
        files = DeltaTable(compacted, version=version).get_add_actions(flatten=True).num_rows
        added = [a for a in read_commit_actions(compacted, version) or [] if "add" in a and a["add"]["dataChange"]]
        assert files <= MIN_FILES - 1 + len(added), (b, files)  # below the threshold + the barrier's own files
    twin_files = DeltaTable(twin).get_add_actions(flatten=True).num_rows
    assert twin_files > MIN_FILES + 2, twin_files  # without compaction the count grows with the barriers
    rearranging = 0
    for b in range(2, BARRIERS + 1):
        version = version_of_barrier(compacted, b)
        actions = read_commit_actions(compacted, version) or []
        quiet = [a for a in actions if ("add" in a and not a["add"]["dataChange"])
                 or ("remove" in a and not a["remove"]["dataChange"])]
        rearranging += bool(quiet)
        if mode == "append":  # the epoch's changes are the barrier's rows only, compaction or not
            changes = read_changes(spark, compacted, version - 1, version).collect()
            assert sorted((r.id, r.v, r._change_type) for r in changes) == sorted(
                (i, v, "insert") for i, v in output(spark, b).collect()
            ), b
    assert rearranging >= 2, "compaction never ran"
