"""Values moved forward commit by commit (``delta/commit_fold.py``): a root table's live-file
figures (``integrity.live_figures``) equal its snapshot's after every kind of commit, with only
the first version read from a snapshot. No Spark."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.delta import integrity, snapshots
from airflow_provider_tsb.delta.commit_fold import CommitFold
from airflow_provider_tsb.delta.integrity import figures_of, live_figures


def _snapshot_figures(loc: Path, version: int) -> integrity.TableFigures:
    return figures_of(DeltaTable(str(loc), version=version))


@pytest.fixture
def snapshot_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The versions a snapshot was read for."""
    reads: list[int] = []
    real = snapshots.snapshot_at
    monkeypatch.setattr(snapshots, "snapshot_at", lambda loc, version, *a, **k: reads.append(version) or real(
        loc, version, *a, **k))
    CACHES.clear("delta.integrity.live_files")
    return reads


def test_live_figures_follow_appends_overwrites_deletes_and_compaction(tmp_path: Path,
                                                                        snapshot_reads: list[int]) -> None:
    loc = tmp_path / "root"
    rows = pa.table({"p": ["a b", "c/d%", "a b"], "x": [1, 2, 3]})
    write_deltalake(str(loc), rows, partition_by=["p"])  # paths URL-encoded in the log
    steps = [
        lambda: write_deltalake(str(loc), rows, mode="append", partition_by=["p"]),
        lambda: DeltaTable(str(loc)).delete("x = 2"),  # removes, then adds the rewritten file
        lambda: write_deltalake(str(loc), rows, mode="append", partition_by=["p"]),
        lambda: DeltaTable(str(loc)).optimize.compact(),  # removes many files, adds one per partition
        lambda: write_deltalake(str(loc), rows.slice(0, 1), mode="overwrite", partition_by=["p"]),
    ]
    assert live_figures(str(loc), 0) == _snapshot_figures(loc, 0)
    for step in steps:
        step()
        version = DeltaTable(str(loc)).version()
        assert live_figures(str(loc), version) == _snapshot_figures(loc, version), step
    assert snapshot_reads == [0]  # every later version moved forward from the commits
    assert live_figures(str(loc), 2) == _snapshot_figures(loc, 2)  # an older version: its snapshot
    assert snapshot_reads == [0, 2]


def test_a_re_added_path_counts_once_and_a_re_created_table_is_read_again(tmp_path: Path,
                                                                          snapshot_reads: list[int]) -> None:
    loc = tmp_path / "root"
    write_deltalake(str(loc), pa.table({"x": [1, 2]}))
    assert live_figures(str(loc), 0).files == 1
    add = next(json.loads(line)["add"] for line in (loc / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
               if line.startswith('{"add"'))
    (loc / "_delta_log" / f"{1:020d}.json").write_text(json.dumps({"add": {**add, "dataChange": False}}) + "\n")
    assert live_figures(str(loc), 1) == _snapshot_figures(loc, 1)  # the digests too: the fold is the snapshot
    assert live_figures(str(loc), 1).as_tuple() == (1, add["size"])
    shutil.rmtree(loc)
    snapshots.clear(str(loc))
    for n in range(3):  # created again, past the version seen last
        write_deltalake(str(loc), pa.table({"x": list(range(n + 5))}), mode="append")
    assert live_figures(str(loc), 2) == _snapshot_figures(loc, 2)
    assert snapshot_reads == [0, 2]


def test_a_fold_over_more_commits_than_its_step_reads_the_snapshot(tmp_path: Path) -> None:
    loc = tmp_path / "t"
    write_deltalake(str(loc), pa.table({"x": [1]}))
    reads: list[int] = []
    fold: CommitFold[int] = CommitFold(lambda n, actions, _k: n + sum("add" in a for a in actions),
                                       lambda _loc, v, _k: reads.append(v) or 1, max_step=2)
    assert fold.at(str(loc), 0) == 1
    for _ in range(3):
        write_deltalake(str(loc), pa.table({"x": [1]}), mode="append")
    assert fold.at(str(loc), 2) == 3 and reads == [0]  # two commits moved over
    assert fold.at(str(loc), 3) == 4 and reads == [0]
    fold.clear()
    assert fold.at(str(loc), 3) == 1 and reads == [0, 3]  # forgotten: the snapshot again
