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
from dev.dataplane import write_sink

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


def test_a_group_of_barriers_compacts_once_on_its_first_barrier(spark, tmp_path: Path) -> None:
    """An ``append`` sink's barriers staged by one Spark job (``stage_outputs``: a micro-batch of
    several barriers) compact too: the group's first barrier carries the compaction planned on
    the table before the group, its later barriers only their own files; the rows equal an
    uncompacted twin's at every barrier and each barrier's changes are its own rows."""
    import uuid

    from airflow_provider_tsb.delta.conventions import staging_dir
    from airflow_provider_tsb.delta.sink_log import SinkLog
    from airflow_provider_tsb.spark.barrier_commit import StagedAttempt, write_barrier
    from airflow_provider_tsb.spark.outputs import stage_outputs, tag_outputs
    from airflow_provider_tsb.spark.write_options import WriteOptions, WriteTarget

    compacted, twin = str(tmp_path / "compacted"), str(tmp_path / "twin")
    for b in range(1, 5):  # 8 small files, written one barrier at a time without compaction
        for loc in (compacted, twin):
            write_sink(spark, output(spark, b), table="t", location=loc, job_id="j", barrier=b, mode="append")
    small = DeltaTable(compacted).get_add_actions(flatten=True).num_rows
    assert small >= MIN_FILES
    group = [5, 6, 7]
    options = WriteOptions(mode="append", compaction=Compaction(min_files=MIN_FILES))
    log = SinkLog.read(compacted, "j", barrier=group[0], snapshot=True)
    rel_dirs = {b: f"{staging_dir('j', log.epoch.epoch, b)}/{uuid.uuid4().hex}" for b in group}
    group_dir = f"{staging_dir('j', log.epoch.epoch, group[0])}/{uuid.uuid4().hex}"
    staged = stage_outputs(spark, tag_outputs({b: output(spark, b) for b in group}), group,
                           WriteTarget("t", compacted, "j", 5, {}, None), options, log, rel_dirs, group_dir)
    assert staged is not None, "a compacting append sink's group was not written by one Spark job"
    for b in group:
        attempt = StagedAttempt(rel_dirs[b].rsplit("/", 1)[1], rel_dirs[b], staged[b])
        write_barrier(spark, None, WriteTarget("t", compacted, "j", b, {}, None), options, staged=attempt)
        write_sink(spark, output(spark, b), table="t", location=twin, job_id="j", barrier=b, mode="append")
        version = version_of_barrier(compacted, b)
        assert rows_of(compacted, version) == rows_of(twin, version_of_barrier(twin, b)), b
        actions = read_commit_actions(compacted, version) or []
        removes = [a["remove"] for a in actions if "remove" in a]
        rearranged = [a["add"] for a in actions if "add" in a and not a["add"]["dataChange"]]
        if b == group[0]:
            assert len(removes) == small and not any(r["dataChange"] for r in removes), removes
            assert rearranged, "the group's first barrier added no compacted file"
        else:
            assert not removes and not rearranged, (b, actions)
        changes = read_changes(spark, compacted, version - 1, version).collect()
        assert sorted((r.id, r.v, r._change_type) for r in changes) == sorted(
            (i, v, "insert") for i, v in output(spark, b).collect()), b
    final = DeltaTable(compacted).get_add_actions(flatten=True).num_rows
    own = sum(1 for b in group for f in staged[b].files if f.data_change)
    twin_files = DeltaTable(twin).get_add_actions(flatten=True).num_rows
    assert final == len(rearranged_files(staged[group[0]])) + own < twin_files


def rearranged_files(staged) -> list:
    """The staged files a compaction wrote (``dataChange = false``)."""
    return [f for f in staged.files if not f.data_change]


def test_a_sinks_default_compaction_follows_its_mode() -> None:
    """``Sink(compaction=None)``: merge sinks at 16 small files, append sinks at 50
    (``APPEND_MIN_FILES``), overwrite sinks never; ``False`` turns it off, ``True`` is ``Compaction()``."""
    from airflow_provider_tsb.spark.model import Sink
    from airflow_provider_tsb.spark.outputs_compaction import APPEND_MIN_FILES

    assert APPEND_MIN_FILES == 50
    assert Sink(mode="append").compaction_options == Compaction(min_files=50)
    assert Sink(mode="merge", keys=("id",)).compaction_options == Compaction(min_files=16)
    assert Sink(mode="overwrite").compaction_options is None
    assert Sink(mode="append", compaction=False).compaction_options is None
    assert Sink(mode="append", compaction=True).compaction_options == Compaction()
    assert Sink(mode="append", compaction=Compaction(min_files=4)).options.compaction == Compaction(min_files=4)
