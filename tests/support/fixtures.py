"""Fixtures shared across the test folders (loaded by ``tests/conftest.py``'s ``pytest_plugins``).

* ``sqlite_store``: a migrated SQLite metastore, for tests whose subject is not the database
  (both backends: ``store`` in ``tests/conftest.py``);
* ``tsb_env``: a metastore and a warehouse as an operator sees them (through the environment);
* ``wordcount_apps`` and ``clean_wordcount``: the FLIP-276 word count's apps and a clean
  reference run of 4 barriers (helpers: :mod:`dev.dataplane`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from airflow_provider_tsb.metastore.store import MetaStore
from dev.dataplane import (
    COUNT_OF_COUNTS,
    WORD_COUNT,
    load_app_module,
    make_wordcount_plan,
    rows_at_barrier,
    run_wordcount_batch,
)


@pytest.fixture
def sqlite_store(tmp_path) -> Iterator[MetaStore]:
    """A migrated SQLite metastore (for tests whose subject is not the database)."""
    ms = MetaStore(f"sqlite:///{tmp_path / 'tsb.db'}")
    ms.migrate()
    yield ms
    ms.dispose()


@pytest.fixture
def tsb_env(tmp_path, monkeypatch) -> SimpleNamespace:
    """A fresh SQLite metastore (through TSB_METASTORE_URL) and warehouse, as an operator sees them."""
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    monkeypatch.setenv("TSB_METASTORE_URL", url)
    monkeypatch.setenv("TSB_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", '{"conn_type": "spark", "host": "local[2]"}')
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    store = MetaStore(url)
    store.migrate()
    return SimpleNamespace(url=url, store=store, warehouse=str(tmp_path / "warehouse"), tmp=tmp_path)


@pytest.fixture(scope="session")
def wordcount_apps() -> tuple[object, object]:
    words = load_app_module("wordcount/wordcount_words.py").APP
    counts = load_app_module("wordcount/wordcount_counts.py").APP
    return words, counts


@pytest.fixture(scope="session")
def clean_wordcount(
    spark: object, wordcount_apps: tuple[object, object], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[int, list[tuple]]]:
    """Reference run: 4 barriers in batch mode; ``{table: {barrier: rows}}``."""
    root = tmp_path_factory.mktemp("clean_wordcount")
    plan, tables = make_wordcount_plan(root, 4)
    run_wordcount_batch(spark, wordcount_apps, plan)
    return {
        name: {b: rows_at_barrier(spark, tables[name], b) for b in range(1, 5)}
        for name in (WORD_COUNT, COUNT_OF_COUNTS)
    }
