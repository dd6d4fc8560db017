"""Fixtures for operator tests: a metastore and a warehouse (helpers: ``tests.support.orchestration``)."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest


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


os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
