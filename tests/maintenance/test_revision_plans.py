"""Revision plans on SQLite and PostgreSQL (issue 12 item 7), over real Delta tables (delta-rs).

The plan is recorded, and the states above the barrier forgotten, in one transaction before any
table is touched; a crash right after it (the plan made, no table restored) is finished by
``resume_revision``; jobs of the plan's tables are refused while it is pending; bad requests are
refused before anything is recorded.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_tsb.delta.barriers import latest_written_barrier, table_epoch
from airflow_provider_tsb.delta.conventions import BarrierTag, barrier_commit_properties
from airflow_provider_tsb.delta.roots import append_words
from airflow_provider_tsb.exceptions import BarrierNotInTableError, RevisionPendingError
from airflow_provider_tsb.maintenance.revision import (
    checkpoint_location,
    plan_revision,
    resume_revision,
    revise,
    revision_tables,
)
from tests.support.orchestration import wordcount_topology

WORDS, WC, CC = "tsb.raw.words", "tsb.wordcount.word_count", "tsb.wordcount.count_of_counts"
JOBS = {WC: "wordcount_words", CC: "wordcount_counts"}


def three_barriers(store, tmp_path: Path):
    """The wordcount topology with barriers 1..3 WRITTEN in both sinks (one row per barrier)."""
    topo = wordcount_topology(str(tmp_path / "warehouse"))
    store.registry.register_topology(topo)
    for b in (1, 2, 3):
        store.barriers.create("wordcount", {WORDS: append_words(topo.location("raw.words"), [f"w{b}"])})
        for table, job in JOBS.items():
            location = topo.location(table)
            write_deltalake(location, pa.table({"b": [b]}), mode="append",
                            commit_properties=barrier_commit_properties(BarrierTag(b, job), epoch=0))
            store.table_states.record_written(table, b, DeltaTable(location).version(), job)
    for job in JOBS.values():
        Path(checkpoint_location(topo, job), "offsets").mkdir(parents=True)
    return topo


def test_plan_first_then_resume_after_a_crash(store, tmp_path: Path) -> None:
    topo = three_barriers(store, tmp_path)
    assert revision_tables(topo, "wordcount.word_count") == [WC, CC]
    assert store.resolution.resolve([WC, CC]).barrier == 3

    plan = plan_revision(store, topo, "wordcount.word_count", 1)  # and the process dies here
    assert plan.pending and [(t.table, t.status, t.job_id) for t in plan.tables] == [
        (WC, "pending", "wordcount_words"), (CC, "pending", "wordcount_counts")]
    assert [t.target_version for t in plan.tables] == [store.table_states.version_at(WC, 1),
                                                       store.table_states.version_at(CC, 1)]
    # one transaction: every table of the plan already answers barrier 1, no table was touched yet
    assert store.resolution.resolve([WC, CC]).barrier == 1 and store.resolution.resolve([CC]).barrier == 1
    assert [latest_written_barrier(topo.location(t))[0] for t in (WC, CC)] == [3, 3]
    for job in JOBS.values():
        with pytest.raises(RevisionPendingError, match=f"job '{job}' cannot run: revision {plan.id} "):
            store.revisions.check_none_pending(job)
    store.revisions.check_none_pending("some_other_job")
    # a retry of the same revision gets the same plan; another revision over these tables is refused
    assert plan_revision(store, topo, "wordcount.word_count", 1).id == plan.id
    with pytest.raises(RevisionPendingError, match="is pending over some of the same tables"):
        plan_revision(store, topo, "wordcount.count_of_counts", 2)

    result = resume_revision(store, topo)
    assert result.revision == plan.id and result.resumed is False and result.barrier == 1
    assert result.tables == {WC: plan.tables[0].target_version, CC: plan.tables[1].target_version}
    assert sorted(result.checkpoints) == sorted(checkpoint_location(topo, j) for j in JOBS.values())
    assert not any(Path(c).exists() for c in result.checkpoints)
    done = store.revisions.get(plan.id)
    assert done.status == "done" and done.finished_at_ms and {t.status for t in done.tables} == {"done"}
    for table in (WC, CC):
        location = topo.location(table)
        assert latest_written_barrier(location)[0] == 1
        assert DeltaTable(location).to_pyarrow_table().column("b").to_pylist() == [1]
        assert table_epoch(location).epoch == 1
    store.revisions.check_none_pending("wordcount_words")
    with pytest.raises(RevisionPendingError, match="no pending revision of topology 'wordcount'"):
        resume_revision(store, topo)
    # running it again is harmless: nothing above barrier 1 to forget, the tables already hold it
    again = revise(store, topo, "wordcount.word_count", 1)
    assert again.revision != plan.id and again.tables == result.tables


def test_reprocess_and_refusals(store, tmp_path: Path) -> None:
    topo = three_barriers(store, tmp_path)
    with pytest.raises(ValueError, match="'tsb.raw.words' is not an intermediate table of topology 'wordcount'"):
        revise(store, topo, "raw.words", 1)
    with pytest.raises(BarrierNotInTableError, match="table tsb.wordcount.word_count .* holds no version of it"):
        revise(store, topo, "wordcount.word_count", 7)
    assert store.revisions.pending("wordcount") is None and store.resolution.resolve([WC, CC]).barrier == 3

    result = revise(store, topo, "wordcount.count_of_counts", 0, reprocess=True)
    assert list(result.tables) == [CC] and result.barrier == 0
    assert store.table_states.newest_written(CC) is None and store.table_states.newest_written(WC).barrier == 3
    assert DeltaTable(topo.location(CC)).to_pyarrow_table().num_rows == 0
    assert latest_written_barrier(topo.location(CC)) is None
    assert latest_written_barrier(topo.location(WC))[0] == 3
    assert store.revisions.list("wordcount")[0].reprocess is True


def test_error_at_a_downstream_table_is_recorded_and_the_retry_finishes(store, tmp_path: Path) -> None:
    """The downstream table's storage is gone when its step runs (moved away after the plan was
    checked): the upstream table is restored, the plan stays pending with the error, and the
    retry of the same revision (what Airflow's retry of the operator does) finishes it."""
    topo = three_barriers(store, tmp_path)
    location = Path(topo.location(CC))
    plan = plan_revision(store, topo, "wordcount.word_count", 2)
    location.rename(location.with_name("moved"))
    with pytest.raises(Exception, match="count_of_counts"):
        revise(store, topo, "wordcount.word_count", 2)
    pending = store.revisions.pending("wordcount")
    assert pending is not None and pending.id == plan.id
    assert [t.status for t in pending.tables] == ["done", "pending"]
    assert pending.error and "count_of_counts" in pending.error
    assert latest_written_barrier(topo.location(WC))[0] == 2
    assert store.resolution.resolve([WC, CC]).barrier == 2  # consistent while pending
    location.with_name("moved").rename(location)
    result = revise(store, topo, "wordcount.word_count", 2)
    assert result.revision == plan.id and result.resumed is True
    done = store.revisions.get(plan.id)
    assert done.status == "done" and done.error is None
    assert [latest_written_barrier(topo.location(t))[0] for t in (WC, CC)] == [2, 2]


def test_truncation_interrupted_between_its_commits(tmp_path: Path) -> None:
    """A reprocess's truncation killed before its epoch bump: the table already holds no barrier
    (the truncation ends the lineage) and no undone txn counts; truncating again finishes it."""
    from deltalake import CommitProperties

    from airflow_provider_tsb.delta.barriers import committed_barrier, version_of_barrier
    from airflow_provider_tsb.delta.conventions import RESTORE_NEXT_EPOCH_KEY, TRUNCATE_KEY
    from airflow_provider_tsb.delta.restore import truncate_table

    location = str(tmp_path / "t")
    for b in (1, 2):
        write_deltalake(location, pa.table({"b": [b]}), mode="append",
                        commit_properties=barrier_commit_properties(BarrierTag(b, "j"), epoch=0))
    dt = DeltaTable(location)
    dt.create_write_transaction([], "overwrite", dt.schema(), commit_properties=CommitProperties(
        custom_metadata={TRUNCATE_KEY: "true", RESTORE_NEXT_EPOCH_KEY: "1"}))  # ... and the process dies
    assert table_epoch(location).pending and table_epoch(location).base_barrier is None
    assert latest_written_barrier(location) is None and version_of_barrier(location, 1) is None
    assert committed_barrier(location, "j") is None
    result = truncate_table(location)
    assert result.changed is False and result.epoch == 1
    state = table_epoch(location)
    assert (state.epoch, state.base_barrier, state.pending) == (1, None, False)
    assert DeltaTable(location).to_pyarrow_table().num_rows == 0 and committed_barrier(location, "j") is None


def test_the_job_operator_refuses_before_spark_submit(store, tmp_path: Path, monkeypatch) -> None:
    """TsbSparkJobHook.run (the operator's and ``tsb job run``'s path) names the pending revision
    before it starts spark-submit."""
    from airflow_provider_tsb.hooks.spark_job import TsbSparkJobHook

    topo = three_barriers(store, tmp_path)
    monkeypatch.setenv("TSB_METASTORE_URL", store.url)
    plan = plan_revision(store, topo, "wordcount.word_count", 1)
    submitted: list[list[str]] = []
    with pytest.raises(RevisionPendingError, match=f"job 'wordcount_counts' cannot run: revision {plan.id} "):
        TsbSparkJobHook(topo, "wordcount_counts").run(2, lambda args, env: submitted.append(args))
    assert submitted == []
