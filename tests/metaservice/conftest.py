"""Fixtures of the MetaService tests: a local SparkSession and an SQLite-only store for Spark tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from airflow_provider_tsb.metastore.store import MetaStore  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local Spark session (2 cores, no UI, 2 shuffle partitions)."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tsb-metaservice-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def sqlite_store(tmp_path) -> Iterator[MetaStore]:
    """A migrated SQLite metastore (for tests whose subject is not the database)."""
    ms = MetaStore(f"sqlite:///{tmp_path / 'tsb.db'}")
    ms.migrate()
    yield ms
    ms.dispose()
