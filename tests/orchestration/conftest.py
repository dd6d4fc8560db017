"""Fixtures for operator tests: a metastore, a warehouse and the example topologies."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tsb_env(tmp_path, monkeypatch) -> SimpleNamespace:
    """A fresh SQLite metastore (through TSB_METASTORE_URL) and warehouse, as an operator sees them."""
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    monkeypatch.setenv("TSB_METASTORE_URL", url)
    monkeypatch.setenv("TSB_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", '{"conn_type": "spark", "host": "local[2]"}')
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    from airflow_provider_tsb.metastore.store import MetaStore

    store = MetaStore(url)
    store.migrate()
    return SimpleNamespace(url=url, store=store, warehouse=str(tmp_path / "warehouse"), tmp=tmp_path)


def wordcount_topology(warehouse: str):
    from airflow_provider_tsb.topology import Topology

    apps = REPO / "spark_apps" / "wordcount"
    topo = Topology("wordcount", warehouse=warehouse)
    topo.root_table("raw.words")
    topo.job("wordcount_words", str(apps / "wordcount_words.py"), sources=["raw.words"],
             sinks=["wordcount.word_count"])
    topo.job("wordcount_counts", str(apps / "wordcount_counts.py"), sources=["wordcount.word_count"],
             sinks=["wordcount.count_of_counts"])
    return topo


def run_context(run_id: str, dag_id: str = "test_dag") -> dict:
    """The parts of an Airflow task context the tsb operators read, with real Airflow objects."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    return {"dag_run": SimpleNamespace(dag_id=dag_id, run_id=run_id), "outlet_events": OutletEventAccessors()}


os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
