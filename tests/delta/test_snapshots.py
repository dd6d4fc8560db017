"""The per-process Delta snapshot cache (airflow_provider_tsb.delta.snapshots), no Spark.

Checks the two promises of the cache against fresh delta-rs loads: the latest table always
shows commits made since it was filled (by this process or another), and a historical
snapshot handed out never changes when the cache moves on.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake import Schema as DeltaSchema

from airflow_provider_tsb.delta import commit_barrier_files, is_barrier_committed
from airflow_provider_tsb.delta.commit import StagedFile
from airflow_provider_tsb.delta.conventions import BarrierTag
from airflow_provider_tsb.delta.log import join
from airflow_provider_tsb.delta.snapshots import (
    Snapshot,
    clear,
    latest_table,
    latest_table_or_none,
    snapshot_at,
)
from airflow_provider_tsb.delta.stats import footer_stats
from airflow_provider_tsb.exceptions import TableNotFoundError

SCHEMA = pa.schema([("k", pa.int64())])


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    clear()


def append(location: Path, *keys: int) -> None:
    write_deltalake(str(location), pa.table({"k": list(keys)}, schema=SCHEMA), mode="append")


def rows(snapshot: Snapshot) -> list[int]:
    """The table's rows at the snapshot, read from the snapshot's own file list."""
    paths = snapshot.add_actions.column("path").to_pylist()
    return sorted(k for p in paths for k in pq.read_table(join(snapshot.location, p)).column("k").to_pylist())


def fresh_rows(location: Path, version: int | None = None) -> list[int]:
    return sorted(DeltaTable(str(location), version=version).to_pyarrow_table().column("k").to_pylist())


def test_commit_by_another_process_is_seen(tmp_path: Path) -> None:
    loc = tmp_path / "t"
    append(loc, 1)
    assert latest_table(str(loc)).version() == 0
    code = (
        "import pyarrow as pa, sys; from deltalake import write_deltalake; "
        "write_deltalake(sys.argv[1], pa.table({'k': pa.array([2, 3], pa.int64())}), mode='append')"
    )
    subprocess.run([sys.executable, "-c", code, str(loc)], check=True)
    table = latest_table(str(loc))
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table().column("k").to_pylist()) == [1, 2, 3]
    assert rows(snapshot_at(str(loc), 1)) == [1, 2, 3] == fresh_rows(loc, 1)


def test_historical_snapshot_is_not_changed_by_advancing(tmp_path: Path) -> None:
    loc = tmp_path / "t"
    append(loc, 1)
    append(loc, 2)
    old = snapshot_at(str(loc), 1)
    latest_table(str(loc))
    append(loc, 3)
    append(loc, 4)
    assert latest_table(str(loc)).version() == 3  # the shared latest table moved on
    newer = snapshot_at(str(loc), 3)  # the private cursor moved forward from 1 to 3
    assert (old.version, rows(old)) == (1, [1, 2]) == (1, fresh_rows(loc, 1))
    assert old.add_actions.num_rows == 2
    assert (newer.version, rows(newer)) == (3, [1, 2, 3, 4])
    assert snapshot_at(str(loc), 1) is old  # cached per (location, version)
    assert rows(snapshot_at(str(loc), 0)) == [1] == fresh_rows(loc, 0)  # older than the cursor


def test_deleted_and_recreated_table_is_reloaded(tmp_path: Path) -> None:
    loc = tmp_path / "t"
    append(loc, 1)
    append(loc, 2)
    assert latest_table(str(loc)).version() == 1
    shutil.rmtree(loc)
    assert latest_table_or_none(str(loc)) is None
    with pytest.raises(TableNotFoundError):
        latest_table(str(loc))
    append(loc, 7)
    append(loc, 8)
    append(loc, 9)
    table = latest_table(str(loc))
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table().column("k").to_pylist()) == [7, 8, 9]


def test_recreated_table_is_reloaded_while_cached(tmp_path: Path) -> None:
    loc = tmp_path / "t"
    append(loc, 1)
    assert latest_table(str(loc)).version() == 0
    shutil.rmtree(loc)
    append(loc, 5)  # version 0 again, a different commit file
    append(loc, 6)
    table = latest_table(str(loc))
    assert (table.version(), sorted(table.to_pyarrow_table().column("k").to_pylist())) == (1, [5, 6])


def _stage(loc: Path, barrier: int, key: int) -> StagedFile:
    rel = f"tsb_staging/j/0/{barrier}/a/part-0.parquet"
    (loc / rel).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"k": [key]}, schema=SCHEMA), loc / rel)
    num, stats = footer_stats(pafs.LocalFileSystem(), str(loc / rel))
    size = (loc / rel).stat().st_size
    return StagedFile(rel, size, 0, num, stats)


def test_commits_through_the_cache_are_exactly_once_and_seen(tmp_path: Path) -> None:
    loc = tmp_path / "sink"
    schema = DeltaSchema.from_arrow(SCHEMA)
    versions = []
    for barrier in (1, 2, 3):
        tag = BarrierTag(barrier=barrier, job_id="j", inputs={}, attempt="a")
        out = commit_barrier_files(str(loc), [_stage(loc, barrier, barrier)], tag=tag, mode="append", schema=schema)
        versions.append(out.version)
        assert is_barrier_committed(str(loc), "j", barrier)
        assert latest_table(str(loc)).version() == out.version
    assert versions == [0, 1, 2]
    replay = commit_barrier_files(
        str(loc), [], tag=BarrierTag(barrier=2, job_id="j", inputs={}, attempt="b"), mode="append", schema=schema
    )
    assert (replay.committed, replay.version) == (False, 1)
    assert fresh_rows(loc) == [1, 2, 3] == rows(snapshot_at(str(loc), 2))
    assert DeltaTable(str(loc)).version() == 2


def test_newest_version_follows_other_writers_and_a_recreated_table(tmp_path: Path) -> None:
    """``newest_version`` (a root's version at barrier generation) equals a fresh load's after
    commits by another process, and after the table is deleted and created again; it never
    loads the new commits (the cached latest table stays where it was)."""
    from airflow_provider_tsb.delta.snapshots import newest_version

    loc = tmp_path / "t"
    with pytest.raises(TableNotFoundError):
        newest_version(str(loc))
    append(loc, 1)
    assert newest_version(str(loc)) == 0
    held = latest_table(str(loc))
    code = (
        "import pyarrow as pa, sys; from deltalake import write_deltalake\n"
        "for k in range(3): write_deltalake(sys.argv[1], pa.table({'k': pa.array([k], pa.int64())}), mode='append')"
    )
    subprocess.run([sys.executable, "-c", code, str(loc)], check=True)
    assert newest_version(str(loc)) == 3 == DeltaTable(str(loc)).version()
    assert held.version() == 0  # not advanced: only the number was asked
    append(loc, 9)
    assert newest_version(str(loc)) == 4
    shutil.rmtree(loc)
    with pytest.raises(TableNotFoundError):
        newest_version(str(loc))
    append(loc, 5)  # version 0 of a new table
    assert newest_version(str(loc)) == 0
    shutil.rmtree(loc)
    for k in range(6):  # re-created past the version seen last: the fingerprint tells
        append(loc, k)
    assert newest_version(str(loc)) == 5 == DeltaTable(str(loc)).version()
