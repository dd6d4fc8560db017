"""Fencing tokens and withdrawn staged attempts in the metastore, on SQLite and PostgreSQL
(issue 12 items 3 and 5; the real-process races are in tests/spark/test_fencing.py).
"""

from __future__ import annotations

import pytest

from airflow_provider_tsb.exceptions import FencedError, UnknownJobError
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology

WORDS, WC = "tsb.raw.words", "tsb.mart.word_count"
JOB = "count_words"


def _setup(store: MetaStore, tmp_path) -> None:  # noqa: ANN001
    topo = Topology("wordcount", warehouse=str(tmp_path / "wh"))
    topo.root_table(WORDS)
    topo.job(JOB, "a.py", sources=[WORDS], sinks=[WC])
    store.registry.register_topology(topo)


def _manifest(attempt: str) -> dict:
    return {"mode": "append", "files": [{"path": f"tsb_staging/{JOB}/0/1/{attempt}/part-0.parquet", "size": 1}]}


def test_a_newer_attempt_fences_the_older_one(store: MetaStore, tmp_path) -> None:
    _setup(store, tmp_path)
    zombie = store.job_runs.begin_attempt(JOB)
    retry = store.job_runs.begin_attempt(JOB)
    assert retry == zombie + 1 == store.job_runs.fencing_token(JOB)
    with pytest.raises(FencedError) as caught:
        store.table_states.record_processed(WC, 1, JOB, _manifest("z"), fencing_token=zombie)
    text = str(caught.value)
    assert f"job '{JOB}', barrier 1" in text and f"fencing token {zombie}" in text
    assert f"attempt {retry} of the job started after it" in text and "PROCESSED" in text
    assert (caught.value.job_id, caught.value.barrier, caught.value.winner) == (JOB, 1, retry)
    assert store.table_states.get(WC, 1) is None  # nothing of the zombie is served
    with pytest.raises(FencedError, match="may not commit"):
        store.job_runs.check_fencing_token(JOB, zombie, 1)
    with pytest.raises(FencedError, match="WRITTEN"):
        store.table_states.record_written(WC, 1, 0, JOB, fencing_token=zombie)
    store.job_runs.check_fencing_token(JOB, retry, 1)
    store.table_states.record_processed(WC, 1, JOB, _manifest("r"), fencing_token=retry)
    assert store.table_states.get(WC, 1).manifest == _manifest("r")
    with pytest.raises(UnknownJobError):
        store.job_runs.begin_attempt("no_such_job")


def test_a_replaced_manifest_is_withdrawn_and_kept_for_the_grace_period(store: MetaStore, tmp_path) -> None:
    _setup(store, tmp_path)
    store.barriers.create("wordcount", {WORDS: 0})
    dead, new = f"tsb_staging/{JOB}/0/1/dead", f"tsb_staging/{JOB}/0/1/new"
    store.table_states.record_processed(WC, 1, JOB, _manifest("dead"))
    assert store.table_states.held_staging(WC, 1, grace_s=600) == {dead}
    lease, _ = store.leases.create({WC: 0}, 60)  # a reader's lease, taken before the withdrawal
    store.table_states.record_processed(WC, 1, JOB, _manifest("new"))  # the rerun's PROCESSED withdraws the dead one
    assert store.table_states.held_staging(WC, 1, grace_s=600) == {dead, new}
    assert store.table_states.due_withdrawn_staging(WC, grace_s=600) == []
    # the lease keeps it past the grace period
    assert store.table_states.due_withdrawn_staging(WC, grace_s=0) == []
    assert store.table_states.held_staging(WC, 1, grace_s=0) == {dead, new}
    store.leases.release(lease)
    assert store.table_states.due_withdrawn_staging(WC, grace_s=0) == [(dead, 1)]
    store.table_states.record_written(WC, 1, 0, JOB, attempt="new")  # WRITTEN: the committed attempt is not withdrawn
    assert store.table_states.due_withdrawn_staging(WC, grace_s=0) == [(dead, 1)]
    assert store.table_states.held_staging(WC, 1, grace_s=600) == {dead}
    assert store.table_states.forget_withdrawn_staging(WC, [dead]) == 1
    assert store.table_states.held_staging(WC, 1, grace_s=0) == set()
