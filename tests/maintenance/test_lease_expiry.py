"""A lease holds, and an expired version is never handed out (issue 12 item 2).

Real processes (``dev/lease_world.py``), real Delta tables, real delta-rs vacuum, the
metastore on SQLite and PostgreSQL. The many-iterations version is ``benchmarks/lease_races.py``.
"""

from __future__ import annotations

import os

import pytest
from fastapi.testclient import TestClient

from airflow_provider_tsb.api.routes import create_metaservice_app
from airflow_provider_tsb.delta.log_cleanup import list_log
from airflow_provider_tsb.exceptions import ExpiredVersionError, TsbError
from airflow_provider_tsb.maintenance.expiry import expire_snapshots
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.resolutions import to_arrow
from dev import lease_world as lw

pytestmark = pytest.mark.slow


def _world(store: MetaStore, tmp_path, barriers: int, *, consumer: bool = False) -> dict[str, str]:
    locations = lw.build(store, str(tmp_path / "wh"), consumer=consumer)
    for _ in range(barriers):
        lw.write_barrier(store, locations)
    return locations


def test_forced_order_lease_between_expiry_read_and_vacuum(store: MetaStore, metastore_url: str, tmp_path) -> None:
    """The lease is taken after expiry read the leases and before it vacuumed (forced order).

    Before issue 12 (``unsafe``): the lease was granted and lost its files (1 of 1). Now expiry's
    marks are committed first, under the lock leases take: the lease is refused with a tsb error
    naming the table, the barrier and the retention, and nothing granted is lost."""
    locations = _world(store, tmp_path, 4)
    before = lw.forced_order(metastore_url, locations, str(tmp_path), unsafe=True, barrier=1)
    assert before["granted"] and before["lost"] == 1, before  # the bug, reproduced

    locations = {**locations}
    lw.write_barrier(store, locations)  # barrier 5
    after = lw.forced_order(metastore_url, locations, str(tmp_path), unsafe=False, barrier=2)
    assert not after["granted"] and after["lost"] == 0, after
    assert "barrier 2" in after["refused"] and lw.SNAP in after["refused"]
    assert "keep_barriers=1" in after["refused"]


def test_lease_taken_before_expiry_keeps_its_files(store: MetaStore, tmp_path) -> None:
    locations = _world(store, tmp_path, 5)
    res = store.resolution.resolve([lw.SNAP], as_of=2, lease_seconds=60)
    result = expire_snapshots(store, lw.SNAP, 1)
    assert result["newly_expired"] > 0 and result["removed_files"] > 0
    assert lw.check_snap(to_arrow(res)[lw.SNAP], 2)  # leased: still readable after vacuum
    assert store.expiry.expired_barriers(lw.SNAP) == [1, 3, 4]
    store.leases.release(res.lease_id)
    expire_snapshots(store, lw.SNAP, 1)
    assert store.expiry.expired_barriers(lw.SNAP) == [1, 2, 3, 4]  # released: expired now, for good
    assert locations


def test_expired_barrier_is_marked_and_refused(store: MetaStore, tmp_path) -> None:
    _world(store, tmp_path, 5)
    unleased = store.resolution.resolve([lw.SNAP], as_of=3)  # resolved before expiry, read after: #6978's reader
    expire_snapshots(store, lw.SNAP, 2)
    assert store.expiry.expired_barriers(lw.SNAP) == [1, 2, 3]
    with pytest.raises(ExpiredVersionError) as info:
        store.resolution.resolve([lw.SNAP], as_of=1)
    err = info.value
    assert isinstance(err, TsbError) and err.table == lw.SNAP and err.barrier == 1 and err.keep_barriers == 2
    assert "barrier 1" in str(err) and "keep_barriers=2" in str(err) and "oldest barrier still readable" in str(err)
    with pytest.raises(ExpiredVersionError, match="keep_barriers=2"):
        store.resolution.resolve([lw.SNAP], as_of=2, lease_seconds=30)
    with pytest.raises(ExpiredVersionError, match=r"barrier 1 \(Delta version 0\)"):
        store.leases.create({lw.SNAP: 0}, 30)
    with pytest.raises(ExpiredVersionError):
        store.leases.create({lw.SNAP: (0, 4)}, 30)  # a job's input range that reaches an expired version
    # through the REST API: 410 Gone naming the barrier and the retention
    answer = TestClient(create_metaservice_app(store, prefix="/tsb/api/v1")).post(
        "/tsb/api/v1/versions", json={"tables": [lw.SNAP], "as_of": 1})
    assert answer.status_code == 410, answer.text
    assert answer.json()["error"] == "ExpiredVersionError" and "keep_barriers=2" in answer.json()["detail"]
    # the read of an answer resolved before expiry: the tsb error, not delta-rs's FileNotFoundError
    with pytest.raises(ExpiredVersionError, match="snapshot expiry"):
        to_arrow(unleased)
    # REPEATABLE_READ and READ_COMMITTED answer a kept barrier; AS OF a kept one works
    assert store.resolution.resolve([lw.SNAP], "repeatable-read").barrier == 5
    assert store.resolution.resolve([lw.SNAP], "read-committed").barrier == 5
    assert lw.check_snap(to_arrow(store.resolution.resolve([lw.SNAP], as_of=4))[lw.SNAP], 4)
    # dry run: nothing more marked
    dry = expire_snapshots(store, lw.SNAP, 1, dry_run=True)
    assert dry["dry_run"] and store.expiry.expired_barriers(lw.SNAP) == [1, 2, 3]


def test_repeatable_read_never_answers_an_expired_version(store: MetaStore, tmp_path) -> None:
    """A table of Q lags (its consumer job is not protected): the newest COMMIT barrier over Q is
    expired in the other table; resolution refuses it instead of handing it out."""
    locations = _world(store, tmp_path, 1, consumer=True)
    lw.write_deltalake(locations[lw.SUMMARY], lw.pa.table({"b": [1], "n": [20]}), mode="append",
                       commit_properties=lw._tags(1, "sum_job"))
    store.table_states.record_written(lw.SUMMARY, 1, 0, "sum_job")
    for _ in range(4):
        lw.write_barrier(store, locations)
    # registered consumer sum_job is at barrier 1: expiry keeps everything it has still to read
    expire_snapshots(store, lw.SNAP, 1)
    assert store.expiry.expired_barriers(lw.SNAP) == []
    assert store.resolution.resolve([lw.SNAP, lw.SUMMARY], "repeatable-read").barrier == 1
    # without consumer protection the lagging pair's common barrier is expired: refused, not answered
    expire_snapshots(store, lw.SNAP, 1, consumers=False)
    for level in ("repeatable-read", "read-committed"):
        with pytest.raises(ExpiredVersionError, match=f"barrier 1 .* of table '{lw.SNAP}'"):
            store.resolution.resolve([lw.SNAP, lw.SUMMARY], level)


def test_race_writer_expiry_readers(store: MetaStore, metastore_url: str, tmp_path) -> None:
    """A writer committing barriers, an expiry loop and readers (leased and not) in their own
    processes: no lease loses files, no expiry cycle fails, no expired version is handed out, a
    read without a lease either reads the right rows or gets the tsb error."""
    locations = _world(store, tmp_path, 3)
    counts = lw.race(metastore_url, locations, str(tmp_path), seconds=60, barriers=8, readers=2, unleased_readers=1,
                     keep_barriers=2, interval=0.1)
    assert counts["barriers"] == 8 and counts["leases"] > 3 and counts["expiry_cycles"] > 4, counts
    assert counts["lost"] == 0 and counts["failed"] == 0 and counts["stale_versions"] == 0, counts
    assert counts["wrong"] == 0 and counts["raw_errors"] == 0, counts
    assert counts["refused"] + store.expiry.expired_barriers(lw.SNAP).__len__() > 0, counts  # expiry did expire


def test_a_writer_committing_during_vacuum_fails_no_expiry_and_vacuum_adds_no_version(
    store: MetaStore, tmp_path
) -> None:
    """Issue 25 item 2: with delta-rs's logged vacuum, a job's commit (an overwrite: a ``remove``)
    between the marks and the vacuum failed the vacuum's ``VACUUM START`` commit with
    ``CommitFailedError`` ("a concurrent transaction deleted data this operation read"); without
    retries the cycle failed, and a table committing every second never shrank. Vacuum now
    deletes without committing: the cycle succeeds, the log gets no version from it, and the
    writer's new barrier stays readable."""
    from deltalake import DeltaTable

    locations = _world(store, tmp_path, 4)
    written: list[int] = []
    result = expire_snapshots(store, lw.SNAP, 1, max_retries=0,
                              before_vacuum=lambda plan: written.append(lw.write_barrier(store, locations)))
    assert result["attempts"] == 1 and result["removed_files"] == 3, result  # barriers 1-3's files
    head = DeltaTable(locations[lw.SNAP]).version()
    assert head == result["latest_version"] + 1  # the writer's commit; none from vacuum
    history = [c.get("operation") for c in DeltaTable(locations[lw.SNAP]).history()]
    assert not any(str(op).startswith("VACUUM") for op in history), history
    res = store.resolution.resolve([lw.SNAP])
    assert res.barrier == written[0] == 5 and lw.check_snap(to_arrow(res)[lw.SNAP], 5)
    again = expire_snapshots(store, lw.SNAP, 1, max_retries=0)
    assert again["removed_files"] == 1 and DeltaTable(locations[lw.SNAP]).version() == head, again


def test_expiry_keeps_up_with_a_fast_writer(store: MetaStore, metastore_url: str, tmp_path) -> None:
    """A writer committing barriers back to back (no pause) and an expiry loop with no pause, in
    their own processes: no cycle fails, no lease loses files, and the table's data files stay
    as few as the retention keeps (``benchmarks/lease_races.py --fast-writer`` for the long run)."""
    locations = _world(store, tmp_path, 3)
    counts = lw.race(metastore_url, locations, str(tmp_path), seconds=60, barriers=40, readers=1, unleased_readers=0,
                     keep_barriers=2, interval=0.0, expiry_pause=0.0)
    assert counts["barriers"] == 40 and counts["expiry_cycles"] > 10, counts
    assert counts["failed"] == 0 and counts["lost"] == 0 and counts["stale_versions"] == 0, counts
    assert counts["removed_log_files"] > 0, counts  # metadata cleanup ran beside the writer's commits
    result = expire_snapshots(store, lw.SNAP, 2)
    files = [p for p in os.listdir(locations[lw.SNAP]) if p.endswith(".parquet")]
    assert len(files) <= 3, files  # the two kept barriers' files (+ one a lease may pin)
    # the log starts at the newest checkpoint before the kept versions (one every 10): at most
    # 10 + 2 commits left of 43, and every kept barrier reads right
    log = list_log(locations[lw.SNAP])
    assert result["log_start"] == min(log.commits) == 39 and len(log.commits) <= 12, (result, sorted(log.commits))
    for barrier in (42, 43):
        assert lw.check_snap(to_arrow(store.resolution.resolve([lw.SNAP], as_of=barrier))[lw.SNAP], barrier)


def test_paimon_5819_registered_consumer_keeps_what_it_reads(store: MetaStore, metastore_url: str, tmp_path) -> None:
    """apache/paimon#5819: snapshots expired under a registered consumer. Here a slow running job
    (``sum_job``, input leases of spark/input_leases.py, metastore catalog) reads every barrier
    while expiry keeps only the newest one: it loses none and reads each one right."""
    locations = _world(store, tmp_path, 2, consumer=True)
    counts = lw.race(metastore_url, locations, str(tmp_path), seconds=60, barriers=6, readers=0, unleased_readers=0,
                     consumer=True, keep_barriers=1, interval=0.1)
    assert counts["consumer_lost"] == 0 and counts["consumer_wrong"] == 0 and counts["failed"] == 0, counts
    assert counts["consumed"] == counts["barriers"] + 2, counts


def test_paimon_6978_reader_starting_during_expiration(store: MetaStore, metastore_url: str, tmp_path) -> None:
    """apache/paimon#6978: a reader that starts from the oldest snapshot while expiry is between
    its marks and its deletes. Here it is refused with the tsb error (it never sees a snapshot
    whose files are going); a reader that resolved just before gets the tsb error on read."""
    locations = _world(store, tmp_path, 4)
    early = store.resolution.resolve([lw.SNAP], as_of=1)
    out = lw.forced_order(metastore_url, locations, str(tmp_path), unsafe=False, barrier=1)
    assert not out["granted"] and "has expired" in out["refused"], out
    with pytest.raises(ExpiredVersionError):
        to_arrow(early)
    assert os.path.exists(locations[lw.SNAP])
