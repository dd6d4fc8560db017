"""The flights topology on a real Spark standalone cluster whose executors have nothing of ours
installed: the same tables as a local run, on both engines.

* ``connect``: a Spark Connect server whose master is the cluster (``tsb spark start --master
  spark://...`` with the examples' cluster settings), and every job a Spark Connect client of it,
  as the operator starts it (``benchmarks/flights_bench.py``'s :class:`FlightsBench`: the
  operator, its hook, :class:`ConnectClient`, the metastore catalog). No Python of ours runs on
  the executors: the client drives the barriers, the executors run the JVM plan.
* ``submit``: each job is the ``spark-submit`` that ``TsbSparkJobOperator`` builds (Airflow's
  ``SparkSubmitHook``) against ``spark://127.0.0.1:<port>`` in client deploy mode with the
  connection's ``conf`` extra (``tsb_examples.spark_conf.cluster_spark_conf``: 1-core 512 MB
  executors, the bare executor Python) and the provider shipped as ``--py-files``.

Batch: the three jobs one after the other over two days; streaming: the three jobs at once
(spark-submit: the first one), stopping after the final barrier. Both are compared, barrier by
barrier and row by row, with the same apps run on the local Spark of the tests (the session's
Connect server).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dev.spark_cluster import SparkCluster
from tsb_examples.spark_conf import cluster_spark_conf

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[3]
DAYS = 2
TIMEOUT_S = 420


def _flights_bench() -> Any:
    spec = importlib.util.spec_from_file_location("tsb_flights_bench", REPO / "benchmarks" / "flights_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fb = _flights_bench()


def days() -> list[dt.date]:
    from tsb_examples.datasets import nycflights13 as nyc

    return nyc.days(dt.date(2013, 1, 1), DAYS)


def prepared(root: Path, master: str, extra: dict[str, Any] | None = None, remote: str | None = None) -> Any:
    """A flights bench with one barrier per day and a final barrier (end of input); its jobs are
    Spark Connect clients of ``remote`` when given, else ``spark-submit`` to ``master``."""
    if remote:
        bench = fb.FlightsBench(root, engine="connect", remote=remote)
    else:
        bench = fb.FlightsBench(root, spark_master=master)
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": master,
                                                              "extra": extra or {}})
    for day in days():
        bench.ingest_day(day)
        bench.generate()
    bench.end_input()
    bench.generate(final=True)
    return bench


def rows(location: str, barrier: int) -> list[tuple]:
    """The table at ``barrier``, sorted; doubles rounded to 9 digits (sums in another order)."""
    from deltalake import DeltaTable

    from airflow_provider_tsb.delta import version_of_barrier

    version = version_of_barrier(location, barrier)
    assert version is not None, f"{location} has no commit of barrier {barrier}"
    table = DeltaTable(location, version=version).to_pyarrow_table()
    out = [tuple(round(v, 9) if isinstance(v, float) else v for v in r.values()) for r in table.to_pylist()]
    return sorted(out, key=repr)


def snapshot(bench: Any, sinks: tuple[str, ...] = fb.SINKS) -> dict[str, dict[int, list[tuple]]]:
    barriers = range(1, DAYS + 2)  # the days' barriers and the final one
    return {sink: {b: rows(bench.location(sink), b) for b in barriers} for sink in sinks}


@pytest.fixture(autouse=True, scope="module")
def env_guard() -> Iterator[None]:
    """FlightsBench sets process environment variables; put them back afterwards."""
    with pytest.MonkeyPatch.context() as mp:
        for var in ("TSB_WAREHOUSE", "AIRFLOW_CONN_SPARK_DEFAULT", "PYSPARK_PYTHON", "PATH"):
            value = os.environ.get(var)
            if value is None:
                mp.delenv(var, raising=False)
            else:
                mp.setenv(var, value)
        yield


@pytest.fixture(scope="module")
def local_tables(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> dict[str, dict[int, list[tuple]]]:
    """The reference: the same apps over the same days and barriers, batch, on the tests' local
    Spark (a plan-file catalog: no cluster, no metastore)."""
    from airflow_provider_tsb.delta.roots import mark_end_of_input
    from airflow_provider_tsb.spark import PlanFile, PlanFileCatalog, run_batch
    from airflow_provider_tsb.spark.app_run import AppRun
    from dev.dataplane import load_app_module
    from tsb_examples.datasets import nycflights13 as nyc

    root = tmp_path_factory.mktemp("local")
    tables = {name: str(root / name) for name in (nyc.FLIGHTS, nyc.WEATHER, *fb.SINKS)}
    plan = PlanFile(str(root / "plan.json"))
    plan.set_tables(tables)
    for day in days():
        nyc.ingest_day(tables[nyc.FLIGHTS], tables[nyc.WEATHER], day)
        plan.append_barrier([nyc.FLIGHTS, nyc.WEATHER])
    for table in (nyc.WEATHER, nyc.FLIGHTS):
        mark_end_of_input(tables[table])
    plan.append_barrier([nyc.FLIGHTS, nyc.WEATHER], final=True)
    catalog = PlanFileCatalog(plan.path)
    for job in fb.JOBS:
        app = load_app_module(f"flights/{job}.py").APP
        run = AppRun(spark, app, catalog, app.resolve_locations(catalog.tables()))
        assert run_batch(run) == list(range(1, DAYS + 2))
    return {sink: {b: rows(tables[sink], b) for b in range(1, DAYS + 2)} for sink in fb.SINKS}


def cluster_extra(cluster: SparkCluster, bare_python: str) -> dict[str, Any]:
    return {"deploy-mode": "client", "conf": cluster_spark_conf(bare_python)}


def completed(cluster: SparkCluster) -> dict[str, dict]:
    return {a["id"]: a for a in cluster.status()["completedapps"]}


def assert_ran_on_the_cluster(cluster: SparkCluster, before: set[str], engine: str,
                              jobs: tuple[str, ...] = fb.JOBS) -> None:
    """submit: the ``jobs`` were applications of the master with the connection's executors
    (512 MB each), with executors on both workers. connect: the Connect server is the master's one
    running application (512 MB executors on both workers), and no job was an application."""
    if engine == "connect":
        running = [a for a in cluster.status()["activeapps"] if a["name"] == "tsb-spark-connect"]
        assert len(running) == 1, cluster.status()["activeapps"]
        assert not [a for app_id, a in completed(cluster).items() if app_id not in before]
        apps = running
    else:
        apps = [a for app_id, a in completed(cluster).items() if app_id not in before]
        assert sorted(a["name"] for a in apps) == sorted(jobs)  # the app names its session after its job
    for app in apps:
        assert app["memoryperexecutor"] == 512, app
        for worker in ("worker-0", "worker-1"):
            assert (cluster.root / worker / app["id"]).is_dir(), (worker, app["id"])


@pytest.fixture(params=["connect", "submit"])
def cluster_engine(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """``(engine, remote)``: the jobs as clients of the cluster's Connect server, or spark-submit."""
    if request.param == "connect":
        return "connect", request.getfixturevalue("cluster_remote")
    return "submit", None


def test_batch_on_the_cluster_matches_local(spark_cluster: SparkCluster, bare_python: str, local_tables,
                                            cluster_engine, tmp_path) -> None:
    engine, remote = cluster_engine
    bench = prepared(tmp_path / "batch", spark_cluster.master_url, cluster_extra(spark_cluster, bare_python), remote)
    argv, env = bench.command(fb.JOBS[0], "batch")
    if engine == "submit":
        assert argv[argv.index("--master") + 1] == spark_cluster.master_url and "--py-files" in argv
        # the same spark-submit runs the streaming test on the cluster (its source's read() on the
        # executors, from the --py-files zip): the batch catch-up adds no path of its own (78 s)
        pytest.skip("spark-submit on the cluster: test_streaming_on_the_cluster_matches_local[submit]")
    assert argv[0] == sys.executable and env["SPARK_REMOTE"].rstrip("/") == remote
    before = set(completed(spark_cluster))
    started = time.monotonic()
    for job in fb.JOBS:
        bench.launch(job, "batch", bench.root / "logs").wait(TIMEOUT_S)
    print(f"batch on the cluster ({engine}): {time.monotonic() - started:.1f} s")
    assert snapshot(bench) == local_tables
    assert all(fb.check_invariants(bench, DAYS + 1).values())
    assert_ran_on_the_cluster(spark_cluster, before, engine)


def test_streaming_on_the_cluster_matches_local(spark_cluster: SparkCluster, bare_python: str, local_tables,
                                                cluster_engine, tmp_path) -> None:
    """submit: the streaming source's ``read()`` runs on the executors: it imports the provider
    from the ``--py-files`` zip in the bare Python (before the zip, it failed there: ``No module
    named 'airflow_provider_tsb'``). That is the first job's (it reads the root tables); the
    three drivers at once with two executors each were 9 JVMs on 2 cores (145 s), and what the
    downstream jobs add (one job's sink as another's source, the invariants across tables) is
    the connect run's. connect: the three jobs at once; the clients drive the micro-batches and
    nothing of ours runs on the executors."""
    engine, remote = cluster_engine
    bench = prepared(tmp_path / "streaming", spark_cluster.master_url, cluster_extra(spark_cluster, bare_python),
                     remote)
    before = set(completed(spark_cluster))
    since = int(time.time() * 1000) - 3600_000  # the final barrier was generated before the jobs start
    started = time.monotonic()
    jobs = fb.JOBS if engine == "connect" else fb.JOBS[:1]
    procs = [bench.launch(job, "streaming", bench.root / "logs", final_since_ms=since) for job in jobs]
    try:
        for proc in procs:
            proc.wait(TIMEOUT_S)
    finally:
        for proc in procs:
            if proc.process.poll() is None:
                proc.process.kill()
    print(f"streaming on the cluster ({engine}, {len(jobs)} jobs): {time.monotonic() - started:.1f} s")
    sinks = tuple(fb.SINKS[fb.JOBS.index(job)] for job in jobs)
    assert snapshot(bench, sinks) == {sink: local_tables[sink] for sink in sinks}
    if engine == "connect":
        assert all(fb.check_invariants(bench, DAYS + 1).values())
    assert_ran_on_the_cluster(spark_cluster, before, engine, jobs)
