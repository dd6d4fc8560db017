"""FreshnessManager built with the registry it reads job io from (Snowflake ``TARGET_LAG``)."""

from __future__ import annotations

from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.freshness import FreshnessManager
from airflow_provider_tsb.metastore.registry import RegistryManager
from tests.metastore.conftest import CC, COUNTS, TOPOLOGY
from tests.metastore.test_delays import two_barriers


def test_freshness_lag_and_bottleneck(core: MetastoreCore, registry: RegistryManager) -> None:
    created = two_barriers(core)
    report = FreshnessManager(core, registry).report(TOPOLOGY, now=created[1] + 5_000)
    assert report.newest_barrier == 2
    assert report.tables[COUNTS].lag_s == 0.0 and report.tables[COUNTS].committed_barrier == 2
    cc = report.tables[CC]
    assert (cc.committed_barrier, cc.bottleneck, cc.lag_s) == (1, "count_counts", 5.0)
    assert report.jobs["count_counts"].ready_barrier == 2
