"""``TsbTopologyTaskGroup`` rendered inside ``with DAG(...)``, without a scheduler."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.operators.barrier import TsbBarrierEmitterOperator, TsbBarrierOperator
from airflow_provider_tsb.operators.spark_job import TsbSparkJobOperator
from airflow_provider_tsb.task_group import TsbTopologyTaskGroup
from tests.support.orchestration import wordcount_topology


def _dag(**group_kwargs):
    import pendulum
    from airflow.sdk import DAG

    with DAG("render", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")) as dag:
        group = TsbTopologyTaskGroup(wordcount_topology("/tmp/wh"), **group_kwargs)
    return dag, group


def test_batch_mode_renders_barrier_then_jobs_in_order() -> None:
    dag, group = _dag()
    barrier = dag.get_task("wordcount.generate_barrier")
    words, counts = dag.get_task("wordcount.wordcount_words"), dag.get_task("wordcount.wordcount_counts")
    assert isinstance(barrier, TsbBarrierOperator) and not isinstance(barrier, TsbBarrierEmitterOperator)
    assert words.upstream_task_ids == {"wordcount.generate_barrier"}
    assert counts.upstream_task_ids == {"wordcount.generate_barrier", "wordcount.wordcount_words"}
    assert words.mode == "batch" and "ti.xcom_pull(task_ids='wordcount.generate_barrier')" in words.barrier


def test_streaming_mode_renders_emitter_and_parallel_streaming_jobs() -> None:
    dag, group = _dag(mode="streaming", emitter_kwargs={"interval_s": "{{ params.interval_s }}", "duration_s": 60},
                      default_job_kwargs={"retries": 3})
    emitter = dag.get_task("wordcount.generate_barriers")
    assert isinstance(emitter, TsbBarrierEmitterOperator)
    assert emitter.interval_s == "{{ params.interval_s }}" and "interval_s" in emitter.template_fields
    jobs = [dag.get_task(f"wordcount.{j}") for j in ("wordcount_words", "wordcount_counts")]
    for job in jobs:
        assert isinstance(job, TsbSparkJobOperator) and job.mode == "streaming" and job.barrier is None
        assert job.retries == 3 and job.trigger_rule == "always"  # all run at once
    # the graph shows the lineage; the edges do not gate (trigger rule "always")
    assert jobs[0].upstream_task_ids == {"wordcount.generate_barriers"}
    assert jobs[1].upstream_task_ids == {"wordcount.wordcount_words"}
    assert emitter.trigger_rule == "always" and emitter.upstream_task_ids == set()
    done = dag.get_task("wordcount.stretch_done")
    assert group.end_task is done and done.trigger_rule == "all_success"
    assert done.upstream_task_ids == {"wordcount.generate_barriers", "wordcount.wordcount_words",
                                      "wordcount.wordcount_counts"}
    assert [t.task_id for t in group.get_leaves()] == ["wordcount.stretch_done"]
    assert group.job_tasks["wordcount_counts"] is jobs[1]
    assert jobs[0].job_hook.build_application_args(None, None, 1_700_000_000_000)[:4] == [
        "--mode", "streaming", "--metastore-url", "env:TSB_METASTORE_URL"
    ]
    assert "--final-since" in jobs[0].job_hook.build_application_args(None, None, 1_700_000_000_000)


def test_bad_mode_is_a_dag_import_error_naming_the_topology() -> None:
    with pytest.raises(ValueError, match="TsbTopologyTaskGroup\\('wordcount'\\): mode must be 'batch' or 'streaming'"):
        _dag(mode="continuous")


def test_streaming_group_after_an_ingest_task_starts_with_it_and_fails_the_run_with_it() -> None:
    import pendulum
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG("ingest_then_stream", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")) as dag:
        ingest = EmptyOperator(task_id="ingest")
        group = TsbTopologyTaskGroup(wordcount_topology("/tmp/wh"), mode="streaming")
        ingest >> group
    # the edge ingest -> emitter is drawn; the emitter does not wait for it ("always")
    assert dag.get_task("wordcount.generate_barriers").upstream_task_ids == {"ingest"}
    # the ingest task stays upstream of the only leaf, so its failure fails the DAG run
    assert "ingest" in dag.get_task("wordcount.stretch_done").upstream_task_ids
    assert [t.task_id for t in dag.leaves] == ["wordcount.stretch_done"]


def test_streaming_job_with_a_gating_trigger_rule_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="streaming job 'wordcount_counts' must keep trigger_rule 'always'"):
        _dag(mode="streaming", job_kwargs={"wordcount_counts": {"trigger_rule": "all_success"}})


@pytest.mark.parametrize("mode", ["batch", "streaming"])
def test_one_storage_connection_reaches_the_barrier_task_and_every_job(mode: str, monkeypatch) -> None:
    """``storage_conn_id`` of the group opens the tables for every task that reads or writes them:
    the barrier task (root versions, the barrier log) as well as the jobs; a job's own
    ``job_kwargs`` still win."""
    import json

    from airflow_provider_tsb.delta import storage
    from airflow_provider_tsb.operators.maintenance import TsbRollbackOperator, TsbSnapshotExpiryOperator

    dag, group = _dag(mode=mode, storage_conn_id="bucket", job_kwargs={"wordcount_counts": {"storage_conn_id": "b2"}})
    expiry = TsbSnapshotExpiryOperator(task_id="x", topology=group.topology, storage_conn_id="bucket")
    rollback = TsbRollbackOperator(task_id="r", topology=group.topology, table="t", storage_conn_id="bucket")
    assert expiry.storage_conn_id == rollback.storage_conn_id == "bucket"
    assert group.barrier_task.storage_conn_id == "bucket"
    assert group.job_tasks["wordcount_words"].storage_conn_id == "bucket"
    assert group.job_tasks["wordcount_counts"].storage_conn_id == "b2"
    # the barrier task's hook sets that connection's options in its process before it reads a table
    monkeypatch.setenv("AIRFLOW_CONN_BUCKET", json.dumps({
        "conn_type": "aws", "login": "key", "password": "secret", "extra": {"endpoint_url": "http://127.0.0.1:9"}}))
    monkeypatch.setenv("TSB_METASTORE_URL", "sqlite://")
    try:
        group.barrier_task.hook.get_conn()
        options = storage.configured_options()
        assert options["AWS_ACCESS_KEY_ID"] == "key" and options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"
    finally:
        storage.configure(None)


def test_a_root_on_object_storage_without_storage_options_names_the_connection_to_give() -> None:
    """Barrier generation on an ``s3://`` root with no storage options in the process: the error
    names the table and says to give the task ``storage_conn_id`` (found by running the flights
    topology on S3 under the scheduler)."""
    from airflow_provider_tsb.hooks.barrier import RootTableError, read_root_versions
    from airflow_provider_tsb.topology import Topology

    topology = Topology("t")
    topology.root_table("raw.a", location="s3://no-such-bucket/raw/a")
    with pytest.raises(RootTableError, match=r"root table 'tsb\.raw\.a' at 's3://no-such-bucket/raw/a'.*storage_conn_id"):
        read_root_versions(topology)
