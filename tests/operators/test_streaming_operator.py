"""Streaming mode the way production runs it: each job is the operator's own process with
``--metastore-url`` (the production catalog) on both engines: a Spark Connect client of the test
session's server (client-driven micro-batches), and ``spark-submit`` (a Structured Streaming
query; the catalog reopened in Spark's Python worker); on SQLite and on PostgreSQL, with barriers
from the emitter and a final barrier at end of input.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from types import SimpleNamespace

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta.barriers import barrier_of_version
from airflow_provider_tsb.delta.roots import input_ended
from airflow_provider_tsb.operators.barrier import TsbBarrierEmitterOperator
from airflow_provider_tsb.operators.spark_job import TsbSparkJobOperator
from tests.support.orchestration import wordcount_topology
from tsb_examples.ingest import ingest_next_words

pytestmark = pytest.mark.spark

WORDS, COUNTS, CC = "tsb.raw.words", "tsb.wordcount.word_count", "tsb.wordcount.count_of_counts"
APPENDS = 4


def _context(run_id: str, start: dt.datetime) -> dict:
    from airflow.sdk.execution_time.context import OutletEventAccessors

    run = SimpleNamespace(dag_id="wordcount_streaming", run_id=run_id, start_date=start)
    return {"dag_run": run, "outlet_events": OutletEventAccessors()}


def spark_connection(engine: object) -> str:
    """The ``spark_local`` connection (JSON) of an engine fixture: Spark Connect or spark-submit."""
    remote = getattr(engine, "remote", None)
    if remote:
        host, port = remote[len("sc://"):].rstrip("/").rsplit(":", 1)
        return f'{{"conn_type": "spark_connect", "host": "sc://{host}", "port": {int(port)}}}'
    return '{"conn_type": "spark", "host": "local[2]"}'


@pytest.fixture
def streaming_store(metastore_url, tmp_path, monkeypatch) -> SimpleNamespace:
    """A migrated metastore and a warehouse, in the environment the operators read."""
    monkeypatch.setenv("TSB_METASTORE_URL", metastore_url)
    monkeypatch.setenv("TSB_WAREHOUSE", str(tmp_path / "warehouse"))
    from airflow_provider_tsb.metastore.store import MetaStore

    store = MetaStore(metastore_url)
    store.migrate()
    yield SimpleNamespace(url=metastore_url, store=store, warehouse=str(tmp_path / "warehouse"))
    store.dispose()


@pytest.fixture
def streaming_env(streaming_store, engine, monkeypatch) -> SimpleNamespace:
    """:func:`streaming_store` with the ``spark_local`` connection of each engine in turn."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", spark_connection(engine))
    return streaming_store


def _ingest(topo, stop_after: int) -> None:
    """Append words every second, then mark the end of input (FLIP-147)."""
    from airflow_provider_tsb.delta.roots import mark_end_of_input

    for i in range(stop_after):
        ingest_next_words(topo.location("raw.words"), run_key=f"w{i}", lines=15)
        time.sleep(1.0)
    mark_end_of_input(topo.location("raw.words"))


def _run_all(topo, store, context: dict) -> tuple[dict[str, dict], list[int]]:
    """Emitter, ingestion and both streaming job operators at once; returns (XComs, emitted)."""
    jobs = {
        job_id: TsbSparkJobOperator(task_id=job_id, topology=topo, job_id=job_id, mode="streaming",
                                    conn_id="spark_local", trigger_interval_s=0.3)
        for job_id in ("wordcount_words", "wordcount_counts")
    }
    results: dict[str, dict] = {}
    errors: list[BaseException] = []

    def run(job_id: str) -> None:
        try:
            results[job_id] = jobs[job_id].execute(context)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    emitter = TsbBarrierEmitterOperator(task_id="generate_barriers", topology=topo, interval_s=0.7, duration_s=600)
    store.registry.register_topology(topo)
    threads = [threading.Thread(target=run, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    feeder = threading.Thread(target=_ingest, args=(topo, APPENDS))
    feeder.start()
    emitted = emitter.execute(context)
    feeder.join()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads), "a streaming job did not stop after the final barrier"
    return results, emitted


def test_streaming_jobs_through_the_operator_on_the_metastore_catalog(streaming_env, engine) -> None:
    if engine.kind == "submit" and not streaming_env.url.startswith("sqlite"):
        pytest.skip("spark-submit runs on SQLite; the metastore backends are compared on the connect engine")
    topo = wordcount_topology(streaming_env.warehouse)
    store = streaming_env.store
    start = dt.datetime.now(dt.UTC)
    results, emitted = _run_all(topo, store, _context("run-1", start))

    # the emitter generated barriers while data arrived, the last one final (end of input)
    barriers = store.barriers.list("wordcount", limit=1000, ascending=True)
    assert [b.barrier for b in barriers] == emitted and len(emitted) >= 2
    assert barriers[-1].final and not any(b.final for b in barriers[:-1])
    assert input_ended(topo.location("raw.words"))
    assert barriers[-1].root_versions[WORDS] == DeltaTable(topo.location("raw.words")).version()
    # both jobs stopped on their own after committing the final barrier, every barrier in order
    for job_id in ("wordcount_words", "wordcount_counts"):
        assert results[job_id]["barriers"] == emitted, (job_id, results[job_id])
        timings = store.job_runs.job_barrier_statuses(job_id, emitted)
        assert timings == {b: "succeeded" for b in emitted}
    # each barrier's input lease was ended with the report of its end, in the job's own process
    # (none is left to lapse)
    for table in (WORDS, COUNTS):
        assert store.leases.leased_ranges(table) == [], table

    # barrier by barrier, each sink version is tagged with its barrier and the FLIP-276 invariants hold
    for info in barriers:
        b = info.barrier
        res = store.resolution.resolve([WORDS, COUNTS, CC], as_of=b)
        for table in (COUNTS, CC):
            assert barrier_of_version(res.tables[table].location, res.tables[table].version) == b
        read = {t: DeltaTable(tv.location, version=tv.version).to_pyarrow_table() for t, tv in res.tables.items()}
        assert read[WORDS].num_rows == DeltaTable(topo.location("raw.words"), version=info.root_versions[WORDS]
                                                  ).to_pyarrow_table().num_rows
        assert pc.sum(read[COUNTS].column("cnt")).as_py() == read[WORDS].num_rows, b
        assert pc.sum(read[CC].column("cnt2")).as_py() == read[COUNTS].num_rows, b
    assert store.resolution.resolve([WORDS, COUNTS, CC]).barrier == emitted[-1]


def test_retried_streaming_job_after_end_of_input_ends_at_once(streaming_env, engine) -> None:
    """An Airflow retry of a job that already committed the run's final barrier exits without waiting."""
    if not streaming_env.url.startswith("sqlite"):
        pytest.skip("the retry path does not depend on the database")
    if engine.kind == "submit":
        pytest.skip("the early return (run_streaming) comes before the engines part ways")
    topo = wordcount_topology(streaming_env.warehouse)
    start = dt.datetime.now(dt.UTC)
    context = _context("run-1", start)
    _, emitted = _run_all(topo, streaming_env.store, context)
    retry = TsbSparkJobOperator(task_id="wordcount_words", topology=topo, job_id="wordcount_words",
                                mode="streaming", conn_id="spark_local")
    began = time.monotonic()
    out = retry.execute(context)
    assert out["barriers"] == [] and time.monotonic() - began < 120
    assert streaming_env.store.table_states.newest_written(COUNTS).barrier == emitted[-1]


def test_source_long_poll_picks_up_a_barrier_generated_while_it_waits(streaming_store) -> None:
    """The ``tsb`` source's offset request waits (``wait_s``) and returns a barrier that became
    ready during the wait, read through the production (metastore) catalog; idle, it answers
    "no new barrier" only after ``wait_s``."""
    import json

    from airflow_provider_tsb.hooks.barrier import read_root_versions
    from airflow_provider_tsb.spark.streaming import TsbStreamReader

    topo = wordcount_topology(streaming_store.warehouse)
    store = streaming_store.store
    store.registry.register_topology(topo)
    job = topo.jobs["wordcount_words"]
    store.registry.register_job(topo.name, job, {n: topo.tables[n] for n in (*job.sources, *job.sinks)})
    ingest_next_words(topo.location("raw.words"), run_key="w0", lines=5)
    first = store.barriers.create(topo.name, read_root_versions(topo)).barrier
    reader = TsbStreamReader({
        "catalog": json.dumps({"kind": "metastore", "url": streaming_store.url, "report": ""}),
        "job_id": "wordcount_words",
        "sources": json.dumps({WORDS: topo.location("raw.words")}),
        "start_after": "-1", "wait_s": "20", "poll_s": "0.05",
    })
    assert reader.latestOffset({"barrier": -1}) == {"barrier": first}

    def generate_later() -> None:
        time.sleep(1.0)
        ingest_next_words(topo.location("raw.words"), run_key="w1", lines=5)
        store.barriers.create(topo.name, read_root_versions(topo))

    later = threading.Thread(target=generate_later)
    began = time.monotonic()
    later.start()
    offset = reader.latestOffset({"barrier": first})
    waited = time.monotonic() - began
    later.join()
    # without the long poll the answer would be the unchanged offset: barrier 2 did not exist yet
    assert offset == {"barrier": first + 1}, offset
    assert 1.0 <= waited < 20, waited
    partitions = reader.partitions({"barrier": first}, offset)
    assert [json.loads(j)["barrier"] for p in partitions for j in p.plan_jsons] == [first + 1]

    idle = TsbStreamReader({
        "catalog": json.dumps({"kind": "metastore", "url": streaming_store.url, "report": ""}),
        "job_id": "wordcount_words",
        "sources": json.dumps({WORDS: topo.location("raw.words")}),
        "start_after": str(first + 1), "wait_s": "0.6", "poll_s": "0.05",
    })
    began = time.monotonic()
    assert idle.latestOffset({"barrier": first + 1}) == {"barrier": first + 1}
    assert time.monotonic() - began >= 0.5
