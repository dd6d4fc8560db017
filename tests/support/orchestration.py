"""Helpers of the operator tests (``tests/operators``, ``tests/triggers``): the example topology and a task context."""

from __future__ import annotations

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
