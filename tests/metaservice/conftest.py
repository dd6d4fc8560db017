"""Fixtures of the MetaService tests: an SQLite-only store for Spark tests (Spark: tests/conftest.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from airflow_provider_tsb.metastore.store import MetaStore  # noqa: E402


@pytest.fixture
def sqlite_store(tmp_path) -> Iterator[MetaStore]:
    """A migrated SQLite metastore (for tests whose subject is not the database)."""
    ms = MetaStore(f"sqlite:///{tmp_path / 'tsb.db'}")
    ms.migrate()
    yield ms
    ms.dispose()
