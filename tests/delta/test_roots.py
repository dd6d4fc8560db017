"""The event-time watermark of a root table (``airflow_provider_tsb.delta.roots``), no Spark:
moved forward commit by commit, it equals the one read from every live file's statistics."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_tsb.delta import roots
from airflow_provider_tsb.delta.roots import event_time_watermark
from airflow_provider_tsb.delta.snapshots import clear

UTC = dt.UTC


def _append(loc: Path, *hours: int, day: dt.date | None = None) -> int:
    base = dt.datetime(2013, 1, 1, tzinfo=UTC)
    table = pa.table({
        "ts": pa.array([base + dt.timedelta(hours=h) for h in hours], pa.timestamp("us", tz="UTC")),
        "day": pa.array([day or dt.date(2013, 1, 1) + dt.timedelta(days=h // 24) for h in hours], pa.date32()),
        "n": pa.array(list(hours), pa.int64()),
    })
    write_deltalake(str(loc), table, mode="append")
    return DeltaTable(str(loc)).version()


def _from_snapshot(loc: Path, version: int, column: str) -> int | None:
    return roots._snapshot_watermark(str(loc), version, column)


def test_the_watermark_moved_forward_equals_the_snapshots(tmp_path: Path, monkeypatch) -> None:
    loc = tmp_path / "root"
    read = []
    real = roots._snapshot_watermark
    monkeypatch.setattr(roots, "_snapshot_watermark", lambda *a: read.append(a[1]) or real(*a))
    for step, hours in enumerate([(1, 5), (3,), (30, 2), (7,)]):
        version = _append(loc, *hours)
        for column in ("ts", "day", "n"):
            assert event_time_watermark(str(loc), version, column) == real(str(loc), version, column), (step, column)
    assert read == [0, 0, 0]  # only the first version of each column was read from its snapshot
    base = dt.datetime(2013, 1, 1, tzinfo=UTC)
    assert event_time_watermark(str(loc), version, "ts") == int((base + dt.timedelta(hours=30)).timestamp() * 1000)
    assert event_time_watermark(str(loc), version, "n") == 30
    # two versions at once, and the same version again
    _append(loc, 40)
    version = _append(loc, 35)
    assert event_time_watermark(str(loc), version, "n") == 40 == real(str(loc), version, "n")
    assert event_time_watermark(str(loc), version, "n") == 40
    assert read == [0, 0, 0]


def test_a_delete_an_older_version_and_a_recreated_table_read_the_snapshot(tmp_path: Path) -> None:
    loc = tmp_path / "root"
    _append(loc, 1)
    version = _append(loc, 50)
    assert event_time_watermark(str(loc), version, "n") == 50
    DeltaTable(str(loc)).delete("n = 50")  # a remove: the max goes down
    version = DeltaTable(str(loc)).version()
    assert event_time_watermark(str(loc), version, "n") == 1 == _from_snapshot(loc, version, "n")
    assert event_time_watermark(str(loc), 1, "n") == 50  # an older version
    version = _append(loc, 2)
    assert event_time_watermark(str(loc), version, "n") == 2
    shutil.rmtree(loc)
    clear(str(loc))  # the snapshot cache keys snapshots by (location, version): forget the old table's
    for hour in (9, 8, 7, 6, 5):  # created again, past the version seen last
        version = _append(loc, hour)
    assert event_time_watermark(str(loc), version, "n") == 9 == _from_snapshot(loc, version, "n")


def test_append_rows_writes_through_its_loaded_table_and_follows_other_writers(tmp_path: Path) -> None:
    """``append_rows`` keeps the table it loaded: another writer's commit in between, a table
    deleted and created again at the same location and a refused batch all give the right next
    version and rows; a batch of another schema gets delta-rs's error naming the field."""
    loc = str(tmp_path / "root")
    assert [roots.append_rows(loc, pa.table({"a": [i]})) for i in (1, 2)] == [0, 1]
    write_deltalake(loc, pa.table({"a": [3]}), mode="append")  # another process's commit
    assert roots.append_rows(loc, pa.table({"a": [4]})) == 3
    assert sorted(DeltaTable(loc).to_pyarrow_table()["a"].to_pylist()) == [1, 2, 3, 4]
    shutil.rmtree(loc)  # deleted and created again: fewer versions than the table it kept
    assert [roots.append_rows(loc, pa.table({"a": [i]})) for i in (5, 6)] == [0, 1]
    with pytest.raises(Exception, match="Field b not found"):  # delta-rs's SchemaMismatchError
        roots.append_rows(loc, pa.table({"b": ["x"]}))
    assert roots.append_rows(loc, pa.table({"a": [7]}), end_of_input=True) == 2
    assert sorted(DeltaTable(loc).to_pyarrow_table()["a"].to_pylist()) == [5, 6, 7]
    assert roots.input_ended(loc)


def test_a_root_tables_auto_compaction_keeps_its_rows_its_watermark_and_its_end_of_input(
    tmp_path: Path, monkeypatch
) -> None:
    """``append_rows(compaction=...)``: once the table has ``min_files`` small files the append is
    followed by an ``OPTIMIZE`` commit (``dataChange = false``, ``tsb.compaction``) and
    ``append_rows`` answers its version; every row stays once, the live files stay below
    ``min_files``, the event-time watermark moves over the compaction without reading a snapshot,
    change readers see only the appends' rows, and an end-of-input marker is never followed by
    a compaction."""
    from airflow_provider_tsb.delta.compaction import Compaction
    from airflow_provider_tsb.spark.inputs import change_ranges

    loc = str(tmp_path / "root")
    options = Compaction(min_files=4)
    read = []
    real = roots._snapshot_watermark
    monkeypatch.setattr(roots, "_snapshot_watermark", lambda *a: read.append(a[1]) or real(*a))
    versions = []
    for i in range(10):
        versions.append(roots.append_rows(loc, pa.table({"n": [i]}), compaction=options))
        table = DeltaTable(loc)
        assert versions[-1] == table.version() and len(table.file_uris()) < options.min_files, i
        assert event_time_watermark(loc, versions[-1], "n") == i
    assert versions == [0, 1, 2, 4, 5, 6, 8, 9, 10, 12]
    assert read == [0]  # the first version only: the compactions did not send it to a snapshot
    history = DeltaTable(loc).history()
    compactions = [h for h in history if h["operation"] == "OPTIMIZE"]
    assert [h["version"] for h in compactions] == [12, 8, 4] and all(h[roots.COMPACTION] == "auto" for h in compactions)
    assert sorted(DeltaTable(loc).to_pyarrow_table().column("n").to_pylist()) == list(range(10))
    # the epoch of the last append and the compaction that moved its row: the compacted file's range
    assert change_ranges(loc, 10, 12, ["n"]) == {"n": (0, 9)}
    assert change_ranges(loc, 9, 10, ["n"]) == {"n": (8, 8)}
    assert change_ranges(loc, 11, 12, ["n"]) == {"n": None}  # a compaction alone changes nothing
    # the end-of-input marker stays the newest commit, with three small files waiting
    for i in range(10, 12):
        roots.append_rows(loc, pa.table({"n": [i]}), compaction=options)
    marker = roots.append_rows(loc, pa.table({"n": [12]}), compaction=options, end_of_input=True)
    assert DeltaTable(loc).version() == marker and roots.input_ended(loc)
    with pytest.raises(ValueError, match="min_files=1"):
        Compaction(min_files=1)
