"""Managers built directly on a :class:`MetastoreCore`, each with only its collaborators (no
``MetaStore``): the proof that they are standalone (issue 22 item 1). SQLite in ``tmp_path``.

The topology every test starts from (FLIP-276's example): root table ``tsb.raw.words``; job
``count_words`` writes ``tsb.wc.counts``; job ``count_counts`` reads it and writes ``tsb.wc.cc``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_tsb.lineage import Job, Table
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.engine import create_metastore_engine
from airflow_provider_tsb.metastore.migrate import upgrade
from airflow_provider_tsb.metastore.registry import RegistryManager

TOPOLOGY = "wc"
WORDS, COUNTS, CC = "tsb.raw.words", "tsb.wc.counts", "tsb.wc.cc"
COUNT_WORDS = Job("count_words", "apps/count_words.py", (WORDS,), (COUNTS,))
COUNT_COUNTS = Job("count_counts", "apps/count_counts.py", (COUNTS,), (CC,))


@pytest.fixture
def core(tmp_path: Path) -> Iterator[MetastoreCore]:
    """A migrated, empty SQLite metastore's core."""
    engine = create_metastore_engine(f"sqlite:///{tmp_path / 'tsb.db'}")
    upgrade(engine)
    yield MetastoreCore(engine)
    engine.dispose()


@pytest.fixture
def registry(core: MetastoreCore, tmp_path: Path) -> RegistryManager:
    """The registry of ``core``, with the word-count topology registered (module docstring)."""
    manager = RegistryManager(core)
    warehouse = str(tmp_path / "warehouse")
    manager.create_topology(TOPOLOGY)
    manager.register_table(TOPOLOGY, Table(WORDS, "root"), warehouse)
    manager.register_job(TOPOLOGY, COUNT_WORDS, warehouse=warehouse)
    manager.register_job(TOPOLOGY, COUNT_COUNTS, warehouse=warehouse)
    return manager
