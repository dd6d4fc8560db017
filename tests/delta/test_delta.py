"""delta-rs side: barrier tags, exactly-once commits, restore-safe app ids (no Spark)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema

from airflow_provider_tsb.delta import (
    BarrierTag,
    StagedFile,
    app_id,
    barrier_of_version,
    commit_barrier_files,
    is_barrier_committed,
    latest_written_barrier,
    restore_to_barrier,
    root_version,
    table_epoch,
    version_of_barrier,
    versions_of_barriers,
)
from airflow_provider_tsb.delta.conventions import RESTORE_BARRIER_KEY, RESTORE_NEXT_EPOCH_KEY
from airflow_provider_tsb.delta.roots import append_words
from airflow_provider_tsb.delta.stats import footer_stats
from airflow_provider_tsb.exceptions import BarrierNotInTableError, TableNotFoundError

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
JOB = "job_a"


def stage(location: Path, barrier: int, rows: int) -> StagedFile:
    rel = f"tsb_staging/{JOB}/0/{barrier}/{time.time_ns()}/part-0.parquet"
    path = location / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"k": list(range(rows)), "v": [f"b{barrier}"] * rows}, schema=SCHEMA), path)
    import pyarrow.fs as pafs

    num, stats = footer_stats(pafs.LocalFileSystem(), str(path))
    return StagedFile(rel, os.path.getsize(path), int(time.time() * 1000), num, stats)


def commit(location: Path, barrier: int, rows: int = 2, mode: str = "append") -> tuple[int, bool]:
    out = commit_barrier_files(
        str(location),
        [stage(location, barrier, rows)],
        tag=BarrierTag(barrier, JOB, {"raw.x": barrier}, ts_ms=1000 * barrier, attempt="a"),
        mode=mode,  # type: ignore[arg-type]
        schema=DeltaSchema.from_arrow(SCHEMA),
    )
    return out.version, out.committed


def test_tags_and_lookups(tmp_path: Path) -> None:
    t = tmp_path / "t"
    assert commit(t, 1) == (0, True)
    assert commit(t, 2) == (1, True)
    assert commit(t, 3, rows=0) == (2, True)  # empty barrier still WRITTEN
    assert barrier_of_version(str(t), 1) == 2
    assert version_of_barrier(str(t), 3) == 2
    assert version_of_barrier(str(t), 4) is None
    assert versions_of_barriers(str(t), 1) == {2: 1, 3: 2}
    assert latest_written_barrier(str(t)) == (3, 2)
    assert DeltaTable(str(t)).transaction_version(app_id(JOB, 0)) == 3
    info = DeltaTable(str(t)).history(1)[0]
    assert info["tsb.barrier"] == "3" and info["tsb.job"] == JOB and info["tsb.ts"] == "3000"
    assert info["tsb.inputs"] == '{"raw.x":3}'
    assert DeltaTable(str(t)).to_pyarrow_table().num_rows == 4


def test_a_sink_log_read_once_answers_every_look_up(tmp_path: Path) -> None:
    """``SinkLog`` (one read per sink and barrier) answers as the per-call look-ups do, a commit
    given a current log commits on it, a stale log is read again (a replay is still discarded),
    and within ``shared_commit_reads`` each commit file is opened once."""
    from unittest import mock

    from airflow_provider_tsb.delta import log as delta_log
    from airflow_provider_tsb.delta.sink_log import SinkLog

    t = tmp_path / "t"
    assert not SinkLog.read(str(t), JOB).exists and SinkLog.read(str(t), JOB).head() is None
    for b in (1, 2, 3):
        commit(t, b)
    log = SinkLog.read(str(t), JOB)
    assert (log.version, log.committed, log.epoch) == (2, 3, table_epoch(str(t)))
    assert log.head() == latest_written_barrier(str(t)) == (3, 2)
    assert [log.version_of(b) for b in (1, 2, 3, 4)] == [version_of_barrier(str(t), b) for b in (1, 2, 3, 4)]
    assert log.is_committed(3) and not log.is_committed(4) and log.attempt_of(2) == "a"
    stale = SinkLog.read(str(t), JOB)
    commit(t, 4)  # committed after the log was read: the commit reads the log again
    out = commit_barrier_files(str(t), [stage(t, 4, 1)], tag=BarrierTag(4, JOB, attempt="b"), mode="append",
                               schema=DeltaSchema.from_arrow(SCHEMA), log=stale)
    assert (out.version, out.committed) == (3, False)
    opened = []
    real = delta_log._read_commit_file
    with mock.patch.object(delta_log, "_read_commit_file", side_effect=lambda *a: opened.append(a) or real(*a)):
        with delta_log.shared_commit_reads():
            SinkLog.read(str(t), JOB).version_of(3)
            barrier_of_version(str(t), 3)
            SinkLog.read(str(t), JOB).head()
    assert sorted(v for _loc, v in opened) == [2, 3], opened  # each commit file once



def test_a_run_reads_each_commit_file_once_across_its_barriers(tmp_path: Path) -> None:
    """A job's run keeps the commit files it read (``CommitMemo``, immutable files: Delta protocol
    "Delta Log Entries"): a barrier's own new commit, read to find its version, is the next
    barrier's log head, read then from the memo; a memo kept by the caller carries over blocks
    (a streaming query's micro-batches); the oldest entries go past its size; an absent commit
    is read again."""
    from unittest import mock

    from airflow_provider_tsb.delta import log as delta_log
    from airflow_provider_tsb.delta.sink_log import SinkLog

    t = tmp_path / "t"
    commit(t, 1)
    opened: list[int] = []
    real = delta_log._read_commit_file
    memo = delta_log.CommitMemo(size=3)
    with mock.patch.object(delta_log, "_read_commit_file", side_effect=lambda *a: opened.append(a[1]) or real(*a)):
        for barrier in (2, 3, 4):  # each as a micro-batch of its own, in one run
            with delta_log.shared_commit_reads(memo) as shared:
                assert shared is memo
                log = SinkLog.read(str(t), JOB)  # the head: the commit before, read by that commit
                assert log.head() == (barrier - 1, barrier - 2)
                out = commit_barrier_files(str(t), [stage(t, barrier, 1)], tag=BarrierTag(barrier, JOB),
                                           mode="append", schema=DeltaSchema.from_arrow(SCHEMA), log=log)
                assert (out.version, out.committed) == (barrier - 1, True)
        assert opened == [0, 1, 2, 3], opened  # version 0 at the first head; then each new commit once
        with delta_log.shared_commit_reads(memo):
            assert delta_log.read_commit_actions(str(t), 99) is None
            assert delta_log.read_commit_actions(str(t), 99) is None  # absent: not kept
            delta_log.read_commit_actions(str(t), 0)  # dropped: only the 3 newest are kept
    assert opened == [0, 1, 2, 3, 99, 99, 0], opened

def test_replay_is_discarded(tmp_path: Path) -> None:
    t = tmp_path / "t"
    commit(t, 1)
    commit(t, 2)
    assert commit(t, 2) == (1, False)
    assert commit(t, 1) == (0, False)
    assert DeltaTable(str(t)).version() == 1
    assert DeltaTable(str(t)).to_pyarrow_table().num_rows == 4


def test_create_is_exactly_once(tmp_path: Path) -> None:
    t = tmp_path / "t"
    assert commit(t, 1) == (0, True)
    assert commit(t, 1) == (0, False)  # a second attempt of the creating barrier
    assert DeltaTable(str(t)).version() == 0


def test_restore_bumps_epoch_and_ignores_undone_txn(tmp_path: Path) -> None:
    t = tmp_path / "t"
    for b in (1, 2, 3, 4):
        commit(t, b, mode="overwrite")
    assert is_barrier_committed(str(t), JOB, 4)
    result = restore_to_barrier(str(t), 2)
    assert result.changed and result.target_version == 1 and result.epoch == 1
    # the txn of epoch 0 still says 4, but barriers 3 and 4 are no longer committed
    assert DeltaTable(str(t)).transaction_version(app_id(JOB, 0)) == 4
    assert not is_barrier_committed(str(t), JOB, 3)
    assert is_barrier_committed(str(t), JOB, 2) and is_barrier_committed(str(t), JOB, 1)
    assert latest_written_barrier(str(t)) == (2, 1)
    assert version_of_barrier(str(t), 3) is None and version_of_barrier(str(t), 2) == 1
    assert table_epoch(str(t)).epoch == 1
    rows = DeltaTable(str(t)).to_pyarrow_table().to_pydict()
    assert set(rows["v"]) == {"b2"}
    # reprocess barrier 3 under app id tsb:job_a@1
    version, committed = commit(t, 3, mode="overwrite")
    assert committed and version_of_barrier(str(t), 3) == version
    assert DeltaTable(str(t)).transaction_version(app_id(JOB, 1)) == 3
    assert commit(t, 3, mode="overwrite")[1] is False
    # idempotent: restoring to the current barrier changes nothing
    assert restore_to_barrier(str(t), 3).changed is False
    # a second restore goes to epoch 2 even though the restored metadata says 0
    assert restore_to_barrier(str(t), 1).epoch == 2
    assert table_epoch(str(t)).epoch == 2 and not is_barrier_committed(str(t), JOB, 2)


def test_restore_interrupted_between_commits(tmp_path: Path) -> None:
    from deltalake import CommitProperties

    t = tmp_path / "t"
    for b in (1, 2, 3):
        commit(t, b)
    DeltaTable(str(t)).restore(
        0, commit_properties=CommitProperties(custom_metadata={RESTORE_BARRIER_KEY: "1", RESTORE_NEXT_EPOCH_KEY: "1"})
    )
    state = table_epoch(str(t))
    assert state.pending and state.epoch == 1
    assert not is_barrier_committed(str(t), JOB, 2)  # already safe before the epoch commit
    result = restore_to_barrier(str(t), 1)  # rerun finishes it
    assert result.epoch == 1 and not table_epoch(str(t)).pending
    assert DeltaTable(str(t)).metadata().configuration["tsb.epoch"] == "1"


def test_errors_name_the_location(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(TableNotFoundError, match="nope"):
        root_version(str(missing))
    words = tmp_path / "words"
    assert append_words(str(words), ["a", "b"]) == 0
    assert append_words(str(words), ["c"]) == 1
    assert root_version(str(words)) == 1
    assert latest_written_barrier(str(words)) is None
    t = tmp_path / "t"
    commit(t, 1)
    with pytest.raises(BarrierNotInTableError, match="barrier 7"):
        restore_to_barrier(str(t), 7)
    assert not is_barrier_committed(str(missing), JOB, 1)


def test_barrier_timer_phases_add_up_to_the_total() -> None:
    """Nested phases are not counted twice; time outside any phase is ``other``; ``before`` counts."""
    import time

    from airflow_provider_tsb.spark.timing import barrier_timer, parse_timing_line, phase

    with barrier_timer("job", 7, before={"poll": 0.5}) as timer:
        with phase("spark"):
            time.sleep(0.05)
            with phase("commit"):
                time.sleep(0.03)
        time.sleep(0.02)
    record = timer.finish()
    phases = record["phases"]
    assert record["barrier"] == 7 and phases["poll"] == 0.5
    assert 0.05 <= phases["spark"] < 0.075 and 0.03 <= phases["commit"] < 0.05
    assert 0.02 <= phases["other"] < 0.04
    assert abs(sum(phases.values()) - record["total_s"]) < 0.002
    assert parse_timing_line("2026 INFO tsb-timing " + __import__("json").dumps(record)) == record
    assert parse_timing_line("no timing here") is None


def test_data_skipping_reads_only_files_whose_statistics_meet_the_epoch(spark, tmp_path) -> None:
    """``change_ranges`` from the epoch's added files' statistics; ``read_snapshot(within=)`` prunes files."""
    import datetime as dt

    import pyarrow as pa

    from airflow_provider_tsb.delta.roots import append_rows
    from airflow_provider_tsb.spark.inputs import change_ranges, read_snapshot

    loc = str(tmp_path / "events")
    utc = dt.UTC
    for day in (1, 2, 3):  # one file per day, disjoint ranges
        hours = [dt.datetime(2013, 1, day, h, tzinfo=utc) for h in (0, 12, 23)]
        rows = {"day": pa.array([day] * 3, pa.int32()), "ts": pa.array(hours, pa.timestamp("us", "UTC"))}
        append_rows(loc, pa.table(rows))
    ranges = change_ranges(loc, 0, 1, ["day", "ts"])  # the epoch (0, 1] added day 2
    assert ranges["day"] == (2, 2)
    assert ranges["ts"][0] == dt.datetime(2013, 1, 2, 0, tzinfo=utc) and ranges["ts"][1].day == 2
    empty = change_ranges(loc, 2, 2, ["day", "ts"])
    assert empty == {"day": None, "ts": None}  # nothing added: an empty range, no file to read
    nothing = read_snapshot(spark, loc, 2, within=empty)
    assert nothing.inputFiles() == [] and nothing.count() == 0 and nothing.columns == ["day", "ts"]
    # a barrier with no row commits one file of 0 records (its footer has no min/max): still empty
    rows = pa.table({"day": pa.array([], pa.int32()), "ts": pa.array([], pa.timestamp("us", "UTC"))})
    assert commit_parquet(loc, rows, barrier=4) == 3
    assert change_ranges(loc, 2, 3, ["day", "ts"]) == {"day": None, "ts": None}
    assert change_ranges(loc, 1, 3, ["day"]) == {"day": (3, 3)}  # with day 3's file
    pruned = read_snapshot(spark, loc, 2, within={"day": ranges["day"]})
    assert len(pruned.inputFiles()) == 1 and sorted(r.day for r in pruned.collect()) == [2, 2, 2]
    by_time = read_snapshot(spark, loc, 2, within={"ts": (ranges["ts"][0], dt.datetime(2013, 1, 3, 0, tzinfo=utc))})
    assert len(by_time.inputFiles()) == 2  # day 3 starts at 00:00, inside the range
    assert read_snapshot(spark, loc, 2, within={"day": (7, 9)}).count() == 0
    assert read_snapshot(spark, loc, 2).count() == 9 and len(read_snapshot(spark, loc, 2).inputFiles()) == 3


def commit_parquet(location: str, rows: pa.Table, barrier: int) -> int:
    """Commit ``rows`` as one Parquet file (even of no row, as a Spark write of an empty barrier
    stages one) through the barrier commit path; the new Delta version."""
    rel = f"part-{barrier}.parquet"
    pq.write_table(rows, os.path.join(location, rel))
    num, stats = footer_stats(pafs.LocalFileSystem(), os.path.join(location, rel))
    staged = StagedFile(rel, os.path.getsize(os.path.join(location, rel)), int(time.time() * 1000), num, stats)
    outcome = commit_barrier_files(location, [staged], tag=BarrierTag(barrier, "job"), mode="append",
                                   schema=DeltaSchema.from_arrow(rows.schema))
    return outcome.version


def test_transaction_version_from_the_newest_commit_equals_delta_rs(tmp_path: Path) -> None:
    """``delta.log.transaction_version`` reads the newest commit's ``txn`` and falls back to
    delta-rs's log replay; at every step it gives delta-rs's answer (Delta protocol
    "Transaction Identifiers")."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    from airflow_provider_tsb.delta.conventions import app_id
    from airflow_provider_tsb.delta.log import transaction_version
    from airflow_provider_tsb.delta.sink_log import SinkLog

    loc = str(tmp_path / "t")
    rows = pa.table({"x": [1]})

    def commit(txn: tuple[str, int] | None) -> DeltaTable:
        props = CommitProperties(app_transactions=[Transaction(*txn)] if txn else None)
        write_deltalake(loc, rows, mode="append", commit_properties=props)
        return DeltaTable(loc)

    job = app_id("job", 0)
    seen, logs = [], []
    for txn in ((job, 1), (job, 2), None, ("other", 9), (job, 3), None):
        table = commit(txn)
        answers = [(transaction_version(table, loc, app), table.transaction_version(app))
                   for app in (job, "other", "never")]
        assert all(ours == theirs for ours, theirs in answers), (txn, answers)
        seen.append(answers[0][0])
        logs.append(SinkLog(loc, "job", table).committed)  # what a barrier of job "job" reads
    assert seen == [1, 2, 2, 2, 3, 3]  # a commit without the job's txn keeps the older one
    assert logs == seen and SinkLog(loc, "other-job", DeltaTable(loc)).committed is None
