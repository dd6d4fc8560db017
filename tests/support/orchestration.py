"""Helpers of the operator tests (``tests/operators``, ``tests/triggers``): the example topology and a task context."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace

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
