"""Snapshot expiry's metadata cleanup (``delta/log_cleanup.py``): the log files below the newest
checkpoint at or before the oldest kept version go, every kept version stays loadable and right.

Real Delta tables (delta-rs, a checkpoint every 10 versions: ``dev/lease_world.py``), real
vacuum, the metastore on SQLite and PostgreSQL. The race with a fast writer, leased readers and
the expiry loop in their own processes is ``test_expiry_keeps_up_with_a_fast_writer``.
"""

from __future__ import annotations

import os

import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta.barriers import version_of_barrier, versions_of_barriers
from airflow_provider_tsb.delta.log import open_table
from airflow_provider_tsb.delta.log_cleanup import cleanup_metadata, list_log, log_start
from airflow_provider_tsb.exceptions import DeltaLogError, ExpiredVersionError
from airflow_provider_tsb.maintenance.expiry import expire_snapshots
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.resolutions import to_arrow
from dev import lease_world as lw

pytestmark = pytest.mark.slow


def _commit_versions(location: str) -> list[int]:
    return sorted(list_log(location).commits)


def test_expiry_cleans_the_log_below_the_oldest_kept_versions_checkpoint(store: MetaStore, tmp_path) -> None:
    locations = lw.build(store, str(tmp_path / "wh"))
    for _ in range(35):  # snap: version b-1 for barrier b, checkpoints at 9, 19, 29
        lw.write_barrier(store, locations)
    snap = locations[lw.SNAP]
    assert log_start(snap) == 0 and sorted(list_log(snap).checkpoints) == [9, 19, 29]
    leased = store.resolution.resolve([lw.SNAP], as_of=13, lease_seconds=120)  # pins version 12
    unleased = store.resolution.resolve([lw.SNAP], as_of=5)  # resolved before expiry, no lease
    assert leased.tables[lw.SNAP].version == 12

    dry = expire_snapshots(store, lw.SNAP, 3, dry_run=True)
    assert dry["log_start"] == 9 and dry["removed_log_files"] == 9 and log_start(snap) == 0  # 0-8.json, nothing gone
    result = expire_snapshots(store, lw.SNAP, 3)
    # the lease's version 12 is the oldest kept: the log starts at checkpoint 9, not 29
    assert result["log_start"] == 9 and result["removed_log_files"] == 9, result
    assert _commit_versions(snap) == list(range(9, 35)) and log_start(snap) == 9
    assert lw.check_snap(to_arrow(leased)[lw.SNAP], 13)  # the lease holds
    with pytest.raises(ExpiredVersionError, match=r"barrier 5 \(Delta version 4\)"):
        to_arrow(unleased)  # the tsb error, not delta-rs's "no files in log segment"
    for barrier in (33, 34, 35):
        assert lw.check_snap(to_arrow(store.resolution.resolve([lw.SNAP], as_of=barrier))[lw.SNAP], barrier)
        assert version_of_barrier(snap, barrier) == barrier - 1
    # the lineage walks end where the log starts: an expired barrier is not in it, no error
    assert version_of_barrier(snap, 3) is None
    assert sorted(versions_of_barriers(snap, None)) == list(range(10, 36))
    with pytest.raises(DeltaLogError, match="version 4"):
        open_table(snap, 4)

    store.leases.release(leased.lease_id)
    result = expire_snapshots(store, lw.SNAP, 3)  # kept: versions 32-34: checkpoint 29
    assert result["log_start"] == 29 and _commit_versions(snap) == list(range(29, 35)), result
    assert sorted(list_log(snap).checkpoints) == [29]
    assert len(DeltaTable(snap).history()) == 6
    again = expire_snapshots(store, lw.SNAP, 3)
    assert again["removed_log_files"] == 0 and again["log_start"] == 29
    # the writer goes on, the next checkpoint comes, and the next expiry moves the start up
    for _ in range(10):
        lw.write_barrier(store, locations)
    assert expire_snapshots(store, lw.SNAP, 3)["log_start"] == 39
    assert lw.check_snap(to_arrow(store.resolution.resolve([lw.SNAP], "repeatable-read"))[lw.SNAP], 45)
    # the root table: barriers pin its versions the same way
    events = expire_snapshots(store, lw.EVENTS, 3)
    assert events["log_start"] == 39 and log_start(locations[lw.EVENTS]) == 39
    assert DeltaTable(locations[lw.EVENTS]).version() == 44


def test_a_hole_in_the_log_is_still_an_error_and_cleanup_can_be_turned_off(store: MetaStore, tmp_path) -> None:
    """Only a log that starts at a checkpoint ends a lineage walk quietly: a commit missing above
    where the log starts is a lost commit. ``delta.enableExpiredLogCleanup=false`` (a table
    property) and ``cleanup_metadata=False`` keep the log."""
    locations = lw.build(store, str(tmp_path / "wh"))
    for _ in range(25):
        lw.write_barrier(store, locations)
    snap = locations[lw.SNAP]
    assert cleanup_metadata(snap, 24, configuration={"delta.enableExpiredLogCleanup": "false"}).deleted == ()
    assert expire_snapshots(store, lw.SNAP, 2, cleanup_metadata=False)["removed_log_files"] == 0
    assert log_start(snap) == 0
    os.remove(os.path.join(snap, "_delta_log", f"{21:020d}.json"))
    with pytest.raises(DeltaLogError, match="no commit 21"):
        version_of_barrier(snap, 20)
    # a cleanup cut short (oldest first) still leaves a log that loads from its checkpoint
    doomed = cleanup_metadata(snap, 23, dry_run=True)
    assert doomed.checkpoint == 19 and doomed.deleted[0].endswith(f"{0:020d}.json")
    for path in doomed.deleted[:5]:
        os.remove(path)
    assert log_start(snap) == 9 and DeltaTable(snap, version=20).version() == 20
