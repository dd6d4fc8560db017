"""DelayManager and FreshnessManager, each built with the registry they read job io from."""

from __future__ import annotations

from airflow_provider_tsb.metastore.barriers import BarrierManager
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.delays import DelayManager
from airflow_provider_tsb.metastore.freshness import FreshnessManager
from airflow_provider_tsb.metastore.registry import RegistryManager
from airflow_provider_tsb.metastore.table_states import TableStateManager
from tests.metastore.conftest import CC, COUNTS, TOPOLOGY, WORDS


def _two_barriers(core: MetastoreCore) -> list[int]:
    barriers, states = BarrierManager(core), TableStateManager(core)
    made = [barriers.create_barrier(TOPOLOGY, {WORDS: v}) for v in (1, 2)]
    for b in made:
        states.record_written(COUNTS, b.barrier, b.barrier, "count_words", written_at_ms=b.created_at_ms + 100)
    states.record_written(CC, 1, 0, "count_counts", written_at_ms=made[0].created_at_ms + 250)
    return [b.created_at_ms for b in made]


def test_delays_per_table_job_and_end_to_end(core: MetastoreCore, registry: RegistryManager) -> None:
    _two_barriers(core)
    items, next_before = DelayManager(core, registry).delays(TOPOLOGY)
    newest, oldest = items
    assert next_before is None and (newest.barrier, oldest.barrier) == (2, 1)
    assert (oldest.complete, oldest.end_to_end_ms, oldest.bottleneck) == (True, 250, "count_counts")
    assert oldest.tables[COUNTS].delay_ms == 100 and oldest.jobs["count_counts"].delay_ms == 150
    assert (newest.complete, newest.tables[CC].state) == (False, "PENDING")


def test_freshness_lag_and_bottleneck(core: MetastoreCore, registry: RegistryManager) -> None:
    created = _two_barriers(core)
    report = FreshnessManager(core, registry).freshness(TOPOLOGY, now=created[1] + 5_000)
    assert report.newest_barrier == 2
    assert report.tables[COUNTS].lag_s == 0.0 and report.tables[COUNTS].committed_barrier == 2
    cc = report.tables[CC]
    assert (cc.committed_barrier, cc.bottleneck, cc.lag_s) == (1, "count_counts", 5.0)
    assert report.jobs["count_counts"].ready_barrier == 2
