"""A barrier generation's reads stay look-ups as the metastore's history grows (PostgreSQL's own
plans, ``EXPLAIN ANALYZE``, on a metastore filled as ``dev/generation_plans.py`` fills it)."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.metastore.engine import create_metastore_engine
from airflow_provider_tsb.metastore.migrate import upgrade
from dev.generation_plans import fill, rows_touched
from tests.conftest import _pg_database

pytestmark = pytest.mark.postgres

TOPOLOGIES, TABLES, WRITTEN = 20, 300, 100  # 15 tables a topology, every third a root: 5 roots each


@pytest.fixture(scope="module")
def history(postgres) -> object:
    """A metastore of 20 topologies, 20,000 barriers and 30,000 WRITTEN rows (100 per table)."""
    engine = create_metastore_engine(_pg_database(postgres))
    upgrade(engine)
    fill(engine, topologies=TOPOLOGIES, barriers=20_000, tables=TABLES, written=WRITTEN)
    yield engine
    engine.dispose()


def test_the_previous_barriers_root_versions_are_read_by_primary_key(history) -> None:
    """The domain's tables and each root's version at the previous barrier: one row of
    ``tsb_table_barrier`` per root. The outer join of ``ee17683`` read all of it (30,000 rows here;
    9.8 ms at 1,000 tables x 200 WRITTEN rows each)."""
    from airflow_provider_tsb.metastore.barriers import _DOMAIN_TABLES

    touched = rows_touched(history, _DOMAIN_TABLES, {"topologies": ["t7"], "last": WRITTEN * 3 // 4})
    roots = TABLES // TOPOLOGIES // 3
    assert touched.get("tsb_table_barrier") == roots, touched


def test_the_run_key_and_the_previous_barrier_are_index_look_ups(history) -> None:
    """The newest barrier of the domain and the run key's: 2 rows of 20,000 barriers (1,000 of t7)."""
    from airflow_provider_tsb.metastore.barriers import _RUN_AND_LAST

    touched = rows_touched(history, _RUN_AND_LAST, {"topologies": ["t7"], "topology": "t7", "run_key": "run6"})
    assert touched["tsb_barrier"] <= 3, touched  # the max by a backward index scan, then both rows
