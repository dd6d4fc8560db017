"""Helpers of the operator tests (``tests/operators``, ``tests/triggers``): the example topology and a task context."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def wordcount_topology(warehouse: str):
    """The wordcount topology of ``spark_apps/wordcount`` with its tables under ``warehouse``; its
    jobs declare the examples' small-machine Spark settings, as ``dags/wordcount_topology.py`` does."""
    from airflow_provider_tsb.topology import Topology
    from tsb_examples.spark_conf import LOCAL_SPARK_CONF

    apps = REPO / "spark_apps" / "wordcount"
    topo = Topology("wordcount", warehouse=warehouse)
    topo.root_table("raw.words")
    topo.job("wordcount_words", str(apps / "wordcount_words.py"), sources=["raw.words"],
             sinks=["wordcount.word_count"], conf=LOCAL_SPARK_CONF)
    topo.job("wordcount_counts", str(apps / "wordcount_counts.py"), sources=["wordcount.word_count"],
             sinks=["wordcount.count_of_counts"], conf=LOCAL_SPARK_CONF)
    return topo


def run_context(run_id: str, dag_id: str = "test_dag") -> dict:
    """The parts of an Airflow task context the tsb operators read, with real Airflow objects."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    return {"dag_run": SimpleNamespace(dag_id=dag_id, run_id=run_id), "outlet_events": OutletEventAccessors()}


def flights_deployment(url: str, warehouse: Path, *, windows: bool = False,
                       applications: Mapping[str, str] | None = None) -> SimpleNamespace:
    """The flights topology of ``dags/common/flights.py`` (``windows``: with the event-time window
    job) under ``warehouse``, registered in a migrated metastore at ``url``: ``store``,
    ``topology``, ``flights`` and ``weather`` (the root tables' locations) and ``hook`` (the
    emitter's event-time barrier hook). ``applications``: ``{job id: app path}`` replacing the
    jobs' declared applications before registration."""
    import dataclasses
    import importlib.util

    from airflow_provider_tsb.hooks.barrier import TsbBarrierHook
    from airflow_provider_tsb.metastore.store import MetaStore

    spec = importlib.util.spec_from_file_location("tsb_test_common_flights", REPO / "dags" / "common" / "flights.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    topology = module.flights_topology(windows=windows, warehouse=str(warehouse))
    for job_id, application in (applications or {}).items():
        topology.jobs[job_id] = dataclasses.replace(topology.jobs[job_id], application=application)
    store = MetaStore(url)
    store.migrate()
    store.registry.register_topology(topology)
    return SimpleNamespace(store=store, topology=topology, flights=topology.location("raw.flights"),
                           weather=topology.location("raw.weather"), hook=TsbBarrierHook(topology, ts_kind="event"))


def connect_connection(remote: str) -> str:
    """An Airflow ``spark_connect`` connection (JSON, for ``AIRFLOW_CONN_*``) to the Spark Connect
    server at ``remote`` (``sc://host:port``)."""
    host, port = remote[len("sc://"):].rstrip("/").rsplit(":", 1)
    return f'{{"conn_type": "spark_connect", "host": "sc://{host}", "port": {int(port)}}}'


#: the ``spark_local`` connection of the ``submit`` engine (JSON, for ``AIRFLOW_CONN_*``)
SUBMIT_CONNECTION = '{"conn_type": "spark", "host": "local[2]"}'


def flights_engines(monkeypatch: Any, metastore_url: str, spark_remote: str, engine: str = "connect") -> None:
    """The environment the flights job operators read: ``spark_local`` on ``engine`` (``connect``:
    the Spark Connect server at ``spark_remote``; ``submit``: ``spark-submit`` on ``local[2]``),
    ``spark_connect`` on that server, and the metastore URL."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", connect_connection(spark_remote) if engine == "connect"
                       else SUBMIT_CONNECTION)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT", connect_connection(spark_remote))
    monkeypatch.setenv("TSB_METASTORE_URL", metastore_url)


def flights_with_app(monkeypatch: Any, tmp_path: Path, metastore_url: str, spark_remote: str, engine: str,
                     job_id: str, source: str) -> SimpleNamespace:
    """The flights deployment (:func:`flights_deployment` under ``tmp_path/warehouse``) with
    ``job_id`` running the app ``source`` (written to ``tmp_path/<job_id>_app.py``), on
    ``engine`` (:func:`flights_engines`)."""
    flights_engines(monkeypatch, metastore_url, spark_remote, engine)
    app = tmp_path / f"{job_id}_app.py"
    app.write_text(source)
    return flights_deployment(metastore_url, tmp_path / "warehouse", applications={job_id: str(app)})


def flights_context(run_id: str) -> dict:
    """The task context of a ``flights_streaming`` DAG run ``run_id`` started now (what the
    flights job operators read)."""
    import datetime as dt

    from airflow.sdk.execution_time.context import OutletEventAccessors

    run = SimpleNamespace(dag_id="flights_streaming", run_id=run_id, start_date=dt.datetime.now(dt.UTC))
    return {"dag_run": run, "outlet_events": OutletEventAccessors()}


def flights_barrier(dep: SimpleNamespace, day: Any, *, final: bool = False, compaction: Any = None) -> int:
    """Ingest the nycflights13 ``day`` into the root tables of ``dep`` (:func:`flights_deployment`;
    ``compaction``: the roots' auto compaction) and generate its event-time barrier, the last one
    (end of input) when ``final``; its id."""
    from airflow_provider_tsb.delta.roots import mark_end_of_input
    from airflow_provider_tsb.hooks.barrier import read_root_versions
    from airflow_provider_tsb.metastore.records import TsKind
    from tsb_examples.datasets import nycflights13 as nyc

    nyc.ingest_day(dep.flights, dep.weather, day, compaction=compaction)
    if final:
        mark_end_of_input(dep.flights)
        mark_end_of_input(dep.weather)
    versions = read_root_versions(dep.topology)
    return dep.store.barriers.create(dep.topology.name, versions, ts_ms=dep.hook.watermark(versions),
                                             ts_kind=TsKind.EVENT, final=final).barrier


def flights_job(dep: SimpleNamespace, job_id: str, mode: str, conn_id: str = "spark_local", **kwargs: Any) -> Any:
    """The :class:`~airflow_provider_tsb.operators.spark_job.TsbSparkJobOperator` of ``job_id`` of
    ``dep`` (:func:`flights_deployment`) in ``mode`` on ``conn_id``, polling every 0.3 s."""
    from airflow_provider_tsb.operators.spark_job import TsbSparkJobOperator

    return TsbSparkJobOperator(task_id=job_id, topology=dep.topology, job_id=job_id, mode=mode, conn_id=conn_id,
                               trigger_interval_s=0.3, **kwargs)


def flights_backlog(dep: SimpleNamespace, context: dict, days: list[Any], compaction: Any = None) -> None:
    """A barrier per day of ``days`` (:func:`flights_barrier`, the last one final), with
    ``enrich_flights`` run in batch on ``spark_connect`` for barrier 1, so that its sink exists
    before a streaming job takes the other barriers (a group's shared write needs the table)."""
    for n, day in enumerate(days, start=1):
        assert flights_barrier(dep, day, final=n == len(days), compaction=compaction) == n
        if n == 1:
            assert flights_job(dep, "enrich_flights", "batch", "spark_connect", barrier=1).execute(context)[
                "barriers"] == [1]
