"""DelayManager built with the registry it reads job io from (the delay view)."""

from __future__ import annotations

from airflow_provider_tsb.metastore.barriers import BarrierManager
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.delays import DelayManager
from airflow_provider_tsb.metastore.registry import RegistryManager
from airflow_provider_tsb.metastore.table_states import TableStateManager
from tests.metastore.conftest import CC, COUNTS, TOPOLOGY, WORDS


def two_barriers(core: MetastoreCore) -> list[int]:
    """Barriers 1 and 2 WRITTEN in counts 100 ms after generation; cc WRITTEN at 1 after 250 ms;
    returns the generation times (epoch ms)."""
    barriers, states = BarrierManager(core), TableStateManager(core)
    made = [barriers.create(TOPOLOGY, {WORDS: v}) for v in (1, 2)]
    for b in made:
        states.record_written(COUNTS, b.barrier, b.barrier, "count_words", written_at_ms=b.created_at_ms + 100)
    states.record_written(CC, 1, 0, "count_counts", written_at_ms=made[0].created_at_ms + 250)
    return [b.created_at_ms for b in made]


def test_delays_per_table_job_and_end_to_end(core: MetastoreCore, registry: RegistryManager) -> None:
    two_barriers(core)
    items, next_before = DelayManager(core).list(TOPOLOGY)
    newest, oldest = items
    assert next_before is None and (newest.barrier, oldest.barrier) == (2, 1)
    assert (oldest.complete, oldest.end_to_end_ms, oldest.bottleneck) == (True, 250, "count_counts")
    assert oldest.tables[COUNTS].delay_ms == 100 and oldest.jobs["count_counts"].delay_ms == 150
    assert (newest.complete, newest.tables[CC].state) == (False, "PENDING")
