"""Operators against a real metastore, real Delta tables and real spark-submit."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_tsb.assets import table_asset
from airflow_provider_tsb.exceptions import BarrierNotReadyError, RootTableError
from airflow_provider_tsb.hooks.barrier import TsbBarrierHook
from airflow_provider_tsb.operators.barrier import TsbBarrierOperator
from airflow_provider_tsb.operators.spark_job import TsbSparkJobOperator
from tests.support.orchestration import run_context, wordcount_topology
from tsb_examples.ingest import ingest_next_words
from tsb_examples.spark_conf import LOCAL_SPARK_CONF


def test_barrier_generation_is_idempotent_per_run(tsb_env) -> None:
    topo = wordcount_topology(tsb_env.warehouse)
    ingest_next_words(topo.location("raw.words"), run_key="r1", lines=20)
    op = TsbBarrierOperator(task_id="generate_barrier", topology=topo)
    first = op.execute(run_context("run-1"))
    retry = op.execute(run_context("run-1"))
    ingest_next_words(topo.location("raw.words"), run_key="r2", lines=20)
    second = op.execute(run_context("run-2"))
    assert (first, retry, second) == (1, 1, 2)
    assert [b.barrier for b in tsb_env.store.barriers.list("wordcount")] == [2, 1]
    assert tsb_env.store.barriers.get("wordcount", 1).root_versions == {"tsb.raw.words": 0}
    assert tsb_env.store.barriers.get("wordcount", 2).root_versions == {"tsb.raw.words": 1}


def test_barrier_generation_names_missing_root_table(tsb_env) -> None:
    topo = wordcount_topology(tsb_env.warehouse)
    op = TsbBarrierOperator(task_id="generate_barrier", topology=topo)
    with pytest.raises(RootTableError) as err:
        op.execute(run_context("run-1"))
    assert "'tsb.raw.words'" in str(err.value) and topo.location("raw.words") in str(err.value)
    assert tsb_env.store.barriers.latest("wordcount") is None


def test_job_refuses_input_not_written_at_barrier(tsb_env) -> None:
    topo = wordcount_topology(tsb_env.warehouse)
    ingest_next_words(topo.location("raw.words"), run_key="r1", lines=20)
    TsbBarrierOperator(task_id="b", topology=topo).execute(run_context("run-1"))
    op = TsbSparkJobOperator(task_id="wordcount_counts", topology=topo, job_id="wordcount_counts", barrier="1")
    tsb_env.store.registry.register_topology(topo)
    with pytest.raises(BarrierNotReadyError) as err:
        op.job_hook.check_inputs(tsb_env.store, 1)
    assert "job 'wordcount_counts' cannot process barrier 1" in str(err.value)
    assert "input 'tsb.wordcount.word_count' is at no barrier yet" in str(err.value)


def test_job_operator_command_line(tsb_env) -> None:
    topo = wordcount_topology(tsb_env.warehouse)
    op = TsbSparkJobOperator(task_id="wordcount_words", topology=topo, job_id="wordcount_words",
                             barrier="{{ ti.xcom_pull(task_ids='b') }}", conn_id="spark_local")
    assert "barrier" in op.template_fields
    args = op.job_hook.build_application_args(3, {"tsb.raw.words": 7})
    assert args[:6] == ["--mode", "batch", "--metastore-url", "env:TSB_METASTORE_URL", "--until-barrier", "3"]
    assert f"tsb.raw.words={topo.location('raw.words')}" in args
    assert f"tsb.wordcount.word_count={topo.location('wordcount.word_count')}" in args
    env = op.job_hook.build_env(tsb_env.url, 3, {"tsb.raw.words": 7})
    assert env["TSB_METASTORE_URL"] == tsb_env.url and env["TSB_BARRIER_INPUTS"] == '{"3": {"tsb.raw.words": 7}}'
    assert tsb_env.url not in " ".join(args)  # the URL (may hold a password) is never on the command line
    assert [a.name for a in op.outlets] == ["tsb.wordcount.word_count"]
    assert op.application.endswith("spark_apps/wordcount/wordcount_words.py")
    # what spark-submit is finally called with
    op.application_args, op.env_vars = args, env
    cmd = op._get_hook()._build_spark_submit_command(op.application)
    assert cmd[0] == "spark-submit" and "--master" in cmd and "local[2]" in cmd
    assert cmd[cmd.index(op.application) + 1 :] == args
    # the operator adds no Spark setting: the job's declared conf, updated by the operator's own
    assert op.conf == LOCAL_SPARK_CONF and "spark.sql.shuffle.partitions=4" in cmd
    mine = TsbSparkJobOperator(task_id="w", topology=topo, job_id="wordcount_words",
                               conf={"spark.driver.memory": "3g"})
    assert mine.conf == {**LOCAL_SPARK_CONF, "spark.driver.memory": "3g"}


def test_streaming_job_operator_passes_max_barriers_per_trigger_and_checks_it(tsb_env) -> None:
    from airflow_provider_tsb.spark.cli import build_arg_parser
    from dev.dataplane import load_app_module

    topo = wordcount_topology(tsb_env.warehouse)
    op = TsbSparkJobOperator(task_id="wordcount_words", topology=topo, job_id="wordcount_words", mode="streaming",
                             max_barriers_per_trigger=5)
    args = op.job_hook.build_application_args(None, None)
    assert args[args.index("--max-barriers-per-trigger") + 1] == "5"
    parser = build_arg_parser(load_app_module("wordcount/wordcount_words.py").APP)
    assert parser.parse_args(args).max_barriers_per_trigger == 5
    default = TsbSparkJobOperator(task_id="w", topology=topo, job_id="wordcount_words", mode="streaming")
    default_args = default.job_hook.build_application_args(None, None)
    assert default_args[default_args.index("--max-barriers-per-trigger") + 1] == "16"
    for bad in (0, -1, 2.5, "4", True):
        with pytest.raises(ValueError, match=f"task 'wordcount_words': max_barriers_per_trigger must be an integer "
                                             f">= 1 .*got {bad!r}"):
            TsbSparkJobOperator(task_id="wordcount_words", topology=topo, job_id="wordcount_words",
                                mode="streaming", max_barriers_per_trigger=bad)
    with pytest.raises(SystemExit):
        parser.parse_args([*args[: args.index("--max-barriers-per-trigger")], "--max-barriers-per-trigger", "0"])


@pytest.mark.spark
def test_job_operator_runs_spark_and_emits_asset_events(tsb_env) -> None:
    topo = wordcount_topology(tsb_env.warehouse)
    for run in ("run-1", "run-2"):
        ingest_next_words(topo.location("raw.words"), run_key=run, lines=30)
        TsbBarrierOperator(task_id="b", topology=topo).execute(run_context(run))
    results = {}
    for job in ("wordcount_words", "wordcount_counts"):
        op = TsbSparkJobOperator(task_id=job, topology=topo, job_id=job, barrier=None, conn_id="spark_local")
        ctx = run_context("run-2")
        results[job] = op.execute(ctx)
        for sink in topo.jobs[job].sinks:
            extra = ctx["outlet_events"][table_asset(topo, sink)].extra
            assert extra["barrier"] == 2 and extra["version"] == tsb_env.store.table_states.version_at(sink, 2)
            assert set(extra["barriers"]) == {"1", "2"}
    assert results["wordcount_words"]["barriers"] == [1, 2]
    store = tsb_env.store
    for b in (1, 2):
        res = store.resolution.resolve(["raw.words", "wordcount.word_count", "wordcount.count_of_counts"], as_of=b)
        from deltalake import DeltaTable

        words = DeltaTable(res.tables["tsb.raw.words"].location,
                           version=res.versions["tsb.raw.words"]).to_pyarrow_table()
        wc = DeltaTable(res.tables["tsb.wordcount.word_count"].location,
                        version=res.versions["tsb.wordcount.word_count"]).to_pyarrow_table()
        cc = DeltaTable(res.tables["tsb.wordcount.count_of_counts"].location,
                        version=res.versions["tsb.wordcount.count_of_counts"]).to_pyarrow_table()
        assert words.num_rows > 0
        assert sum(wc.column("cnt").to_pylist()) == words.num_rows
        assert sum(cc.column("cnt2").to_pylist()) == wc.num_rows
    assert store.registry.job("wordcount_counts").status == "succeeded"
    # a retry of a finished barrier runs nothing and reports the same versions
    again = TsbSparkJobOperator(task_id="x", topology=topo, job_id="wordcount_words", barrier="2",
                                conn_id="spark_local").execute(run_context("run-2"))
    assert again["barriers"] == [2]


def test_openlineage_facets_name_inputs_and_outputs_with_versions(tsb_env) -> None:
    """With apache-airflow-providers-openlineage installed, the job reports the Delta versions."""
    import airflow.providers.openlineage  # noqa: F401  (in the test extra: this test always runs)
    topo = wordcount_topology(tsb_env.warehouse)
    op = TsbSparkJobOperator(task_id="wordcount_words", topology=topo, job_id="wordcount_words", barrier="1")
    op._lineage = {"inputs": {"tsb.raw.words": 3}, "outputs": {"tsb.wordcount.word_count": 5}}
    lineage = op.get_openlineage_facets_on_complete(None)
    (source,) = lineage.inputs
    (sink,) = lineage.outputs
    assert (source.namespace, source.name) == ("file", topo.location("raw.words"))
    assert source.facets["version"].datasetVersion == "3"
    assert (sink.namespace, sink.name) == ("file", topo.location("wordcount.word_count"))
    assert sink.facets["version"].datasetVersion == "5"


def test_emitter_generates_a_final_barrier_at_end_of_input(tsb_env) -> None:
    from airflow_provider_tsb.delta.roots import input_ended, mark_end_of_input
    from airflow_provider_tsb.operators.barrier import TsbBarrierEmitterOperator

    topo = wordcount_topology(tsb_env.warehouse)
    words = topo.location("raw.words")
    ingest_next_words(words, run_key="r1", lines=20)
    ingest_next_words(words, run_key="r2", lines=20)
    mark_end_of_input(words)
    assert input_ended(words)
    emitter = TsbBarrierEmitterOperator(task_id="e", topology=topo, interval_s=0.1, duration_s=60)
    began = time.monotonic()
    assert emitter.execute(run_context("run-1")) == [1]  # the input had ended: one final barrier
    assert time.monotonic() - began < 30
    info = tsb_env.store.barriers.get("wordcount", 1)
    assert info.final and info.root_versions == {"tsb.raw.words": 2}
    assert tsb_env.store.barriers.latest_final("wordcount").barrier == 1
    # a retry of the same run gets its final barrier back, nothing new
    assert emitter.execute(run_context("run-1")) == [1]
    # new data reopens the input; the next stretch emits barriers and, on its duration, a final one
    ingest_next_words(words, run_key="r3", lines=20)
    assert not input_ended(words)
    short = TsbBarrierEmitterOperator(task_id="e", topology=topo, interval_s=0.1, duration_s=1.5)
    assert short.execute(run_context("run-2")) == [2, 3]
    assert [tsb_env.store.barriers.get("wordcount", b).final for b in (2, 3)] == [False, True]


def test_final_barrier_includes_an_end_marker_committed_while_the_emitter_reads(tsb_env) -> None:
    """The ingestion's end-of-input marker lands between the emitter reading the root versions
    and checking the markers (seen under the real scheduler: flights' marker right after
    weather's). The final barrier must still hold the marker's version."""
    from deltalake import DeltaTable

    from airflow_provider_tsb.delta.roots import mark_end_of_input
    from airflow_provider_tsb.operators.barrier import TsbBarrierEmitterOperator

    topo = wordcount_topology(tsb_env.warehouse)
    words = topo.location("raw.words")
    ingest_next_words(words, run_key="r1", lines=20)

    class MarkerLandsMidway(TsbBarrierHook):
        landed = False

        def input_ended(self, since_ms: int | None = None) -> bool:
            if not self.landed:  # the ingestion task commits its marker right now
                mark_end_of_input(words)
                self.landed = True
            return super().input_ended(since_ms)

    emitter = TsbBarrierEmitterOperator(task_id="e", topology=topo, interval_s=0.1, duration_s=60)
    emitter._hook = MarkerLandsMidway(topo)
    emitted = emitter.execute(run_context("run-1"))
    final = tsb_env.store.barriers.get("wordcount", emitted[-1])
    assert final.final
    assert final.root_versions == {"tsb.raw.words": DeltaTable(words).version()}, (emitted, final.root_versions)


def test_emitter_ignores_the_end_of_input_mark_an_earlier_run_left(tsb_env) -> None:
    """Issue 21 item 5: a new streaming run after an ended (or interrupted) one must not take the
    old run's end-of-input mark for its own and end at once: its new data gets barriers, and only
    a mark committed during the run ends it."""
    import datetime as dt
    from types import SimpleNamespace

    from deltalake import DeltaTable

    from airflow_provider_tsb.delta.roots import input_ended, mark_end_of_input
    from airflow_provider_tsb.operators.barrier import TsbBarrierEmitterOperator

    topo = wordcount_topology(tsb_env.warehouse)
    words = topo.location("raw.words")
    ingest_next_words(words, run_key="r1", lines=10)
    mark_end_of_input(words)  # the previous run ended here
    time.sleep(0.05)
    started = dt.datetime.now(dt.UTC)
    assert input_ended(words) and not input_ended(words, int(started.timestamp() * 1000))

    def arrive() -> None:  # this run's data, then this run's end
        time.sleep(0.3)
        ingest_next_words(words, run_key="r2", lines=10)
        time.sleep(0.3)
        mark_end_of_input(words)

    feeder = threading.Thread(target=arrive)
    feeder.start()
    context = run_context("run-2")
    context["dag_run"] = SimpleNamespace(dag_id="test_dag", run_id="run-2", start_date=started)
    emitter = TsbBarrierEmitterOperator(task_id="e", topology=topo, interval_s=0.1, duration_s=60)
    try:
        emitted = emitter.execute(context)
    finally:
        feeder.join()
    final = tsb_env.store.barriers.get("wordcount", emitted[-1])
    assert final.final and len(emitted) >= 2, emitted  # the new data's barrier, then the final one
    assert not tsb_env.store.barriers.get("wordcount", emitted[0]).final
    assert final.root_versions == {"tsb.raw.words": DeltaTable(words).version()}


def test_emitter_waits_for_root_tables_and_checks_its_interval(tsb_env) -> None:
    from airflow_provider_tsb.operators.barrier import TsbBarrierEmitterOperator

    topo = wordcount_topology(tsb_env.warehouse)
    with pytest.raises(ValueError, match="interval_s must be a positive number of seconds, got 0"):
        TsbBarrierEmitterOperator(task_id="e", topology=topo, interval_s=0)
    templated = TsbBarrierEmitterOperator(task_id="e", topology=topo, interval_s="{{ params.x }}", duration_s=1)
    templated.interval_s = "soon"  # what a bad rendered template leaves
    with pytest.raises(ValueError, match="e: interval_s must be a positive number of seconds, got 'soon'"):
        templated.execute(run_context("run-1"))
    waiting = TsbBarrierEmitterOperator(task_id="e", topology=topo, interval_s=0.1, duration_s=0.4)
    assert waiting.execute(run_context("run-1")) == []  # no root table yet: nothing to generate
    assert tsb_env.store.barriers.latest("wordcount") is None


def test_emitter_generates_once_a_missing_root_table_is_created(tsb_env) -> None:
    """A root table that does not exist when the emitter starts is waited for, and its first
    version gets a barrier as soon as ingestion creates it (its absence is not remembered)."""
    from airflow_provider_tsb.operators.barrier import TsbBarrierEmitterOperator

    topo = wordcount_topology(tsb_env.warehouse)
    words = topo.location("raw.words")
    feeder = threading.Timer(0.3, lambda: ingest_next_words(words, run_key="r1", lines=5))
    feeder.start()
    emitter = TsbBarrierEmitterOperator(task_id="e", topology=topo, interval_s=0.05, duration_s=30, count=1,
                                        final_on_stop=False)
    try:
        emitted = emitter.execute(run_context("run-1"))
    finally:
        feeder.join()
    assert emitted == [1]
    assert tsb_env.store.barriers.get("wordcount", 1).root_versions == {"tsb.raw.words": 0}


def test_emitter_stops_on_a_root_table_it_cannot_read(tsb_env) -> None:
    """A root table whose log exists but cannot be read stops the emitter with an error naming
    the table and its location (it is not taken for a table that does not exist yet)."""
    from pathlib import Path

    from airflow_provider_tsb.operators.barrier import TsbBarrierEmitterOperator

    topo = wordcount_topology(tsb_env.warehouse)
    words = topo.location("raw.words")
    ingest_next_words(words, run_key="r1", lines=5)
    first = Path(words, "_delta_log", f"{0:020d}.json")
    first.write_text(first.read_text()[:40])  # a commit cut short by a failing disk
    emitter = TsbBarrierEmitterOperator(task_id="e", topology=topo, interval_s=0.05, duration_s=5)
    with pytest.raises(RootTableError, match="root table 'tsb.raw.words' at .*cannot be read") as err:
        emitter.execute(run_context("run-1"))
    assert words in str(err.value)
    assert tsb_env.store.barriers.latest("wordcount") is None


def test_emitter_backpressure_keeps_at_most_max_in_flight_uncommitted(tsb_env) -> None:
    """A topology that does not keep up gets no new barrier while ``max_in_flight`` are not COMMIT."""
    from airflow_provider_tsb.operators.barrier import TsbBarrierEmitterOperator

    topo = wordcount_topology(tsb_env.warehouse)
    words = topo.location("raw.words")
    ingest_next_words(words, run_key="r1", lines=5)
    # 2 s: room for two barriers on a busy CI worker (one took 0.74 s there with 0.5 s given)
    emitter = TsbBarrierEmitterOperator(task_id="e", topology=topo, interval_s=0.05, duration_s=2.0,
                                        max_in_flight=2, final_on_stop=False)
    stop = threading.Event()

    def feed() -> None:  # new data all the time, no job commits anything
        i = 2
        while not stop.wait(0.02):  # leave the emitter the GIL between commits
            ingest_next_words(words, run_key=f"r{i}", lines=5)
            i += 1

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        emitted = emitter.execute(run_context("run-1"))
    finally:
        stop.set()
        feeder.join()
    assert emitted == [1, 2], emitted  # two in flight, then nothing until a COMMIT
    tsb_env.store.table_states.record_written("wordcount.word_count", 1, 0, "wordcount_words")
    tsb_env.store.table_states.record_written("wordcount.count_of_counts", 1, 0, "wordcount_counts")
    ingest_next_words(words, run_key="more", lines=5)
    again = TsbBarrierEmitterOperator(task_id="e", topology=topo, interval_s=0.05, duration_s=1.0,
                                      max_in_flight=2, final_on_stop=False)
    assert again.execute(run_context("run-2")) == [3]  # barrier 1 committed: room for one more


def test_job_without_a_barrier_that_processes_nothing_warns(tsb_env, monkeypatch, capsys) -> None:
    """``airflow tasks test <dag> <job>`` renders no barrier (no XCom from the barrier task): the
    run processes the pending barriers, here none, and says so instead of succeeding silently."""
    topo = wordcount_topology(tsb_env.warehouse)
    op = TsbSparkJobOperator(task_id="wordcount_words", topology=topo, job_id="wordcount_words", barrier="None")
    submitted = []
    monkeypatch.setattr(op, "_spark_submit", lambda context, args, env: submitted.append(args))
    assert op.execute(run_context("run-1"))["barriers"] == []
    logged = capsys.readouterr().out  # Airflow's task logger writes to stdout
    assert submitted, "the app still runs (it may find pending barriers)"
    assert (
        "job 'wordcount_words': no barrier was given (barrier='None', e.g. `airflow tasks test` without the "
        "DAG's barrier task) and none is pending (topology 'wordcount' has no barrier yet): nothing was "
        "processed. Run the DAG's barrier task first, or generate one with `tsb barrier create wordcount "
        "--dags PATH` and run it with `tsb job run wordcount_words --barrier N --dags PATH`"
    ) in logged
    ingest_next_words(topo.location("raw.words"), run_key="r1", lines=20)
    TsbBarrierOperator(task_id="b", topology=topo).execute(run_context("run-1"))
    assert "the newest barrier of topology 'wordcount' is 1, already processed or not WRITTEN in every " \
        "source of the job yet" in op.nothing_processed_message(tsb_env.store)
