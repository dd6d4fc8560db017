"""BarrierManager on its own core (FLIP-276 "Timestamp Barrier"; FLIP-147 final barriers)."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.exceptions import TopologyError, UnknownBarrierError, UnknownTableError
from airflow_provider_tsb.metastore.barriers import BarrierManager
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.registry import RegistryManager
from tests.metastore.conftest import TOPOLOGY, WORDS


def test_ids_increase_record_root_versions_and_are_idempotent_per_run_key(
    core: MetastoreCore, registry: RegistryManager
) -> None:
    barriers = BarrierManager(core)
    first = barriers.create(TOPOLOGY, {WORDS: 3}, ts_ms=1_000, run_key="run-1")
    again = barriers.create(TOPOLOGY, {WORDS: 9}, run_key="run-1")
    second = barriers.create(TOPOLOGY, {WORDS: 5}, ts_ms=2_000, final=True)
    assert (first.barrier, first.root_versions, first.ts_ms, first.created) == (1, {WORDS: 3}, 1_000, True)
    assert (again.barrier, again.root_versions, again.created) == (1, {WORDS: 3}, False)
    assert (second.barrier, second.final) == (2, True)
    assert barriers.get(TOPOLOGY, 1).root_versions == {WORDS: 3}
    assert barriers.latest(TOPOLOGY).barrier == 2
    assert barriers.latest_final(TOPOLOGY).barrier == 2
    assert barriers.latest_final(TOPOLOGY, since_ms=second.created_at_ms + 60_000) is None
    assert [b.barrier for b in barriers.list(TOPOLOGY)] == [2, 1]
    assert [b.barrier for b in barriers.list(TOPOLOGY, after=1, ascending=True)] == [2]


def test_generation_refuses_what_would_break_the_epochs(core: MetastoreCore, registry: RegistryManager) -> None:
    barriers = BarrierManager(core)
    barriers.create(TOPOLOGY, {WORDS: 4})
    with pytest.raises(TopologyError, match="below version 4"):
        barriers.create(TOPOLOGY, {WORDS: 2})
    with pytest.raises(UnknownTableError, match="lacks the Delta version"):
        barriers.create(TOPOLOGY, {})
    with pytest.raises(TopologyError, match="not registered"):
        barriers.create("nobody", {WORDS: 4})
    with pytest.raises(UnknownBarrierError, match="newest barrier: 1"):
        barriers.get(TOPOLOGY, 7)
    assert barriers.latest("nobody") is None


def test_a_topology_has_one_barrier_time_kind(core: MetastoreCore, registry: RegistryManager) -> None:
    """Issue 23 item 2: barrier 1 by system time, then an event-time barrier (a watermark of 2005
    after a wall clock of 2026) is refused naming both kinds; the run key's retry still answers."""
    barriers = BarrierManager(core)
    first = barriers.create(TOPOLOGY, {WORDS: 1}, run_key="by-hand")
    with pytest.raises(TopologyError, match="has system-time barriers \\(barrier 1 is system-time\\): "
                       "an event-time barrier is refused.*ts_kind='system'"):
        barriers.create(TOPOLOGY, {WORDS: 2}, ts_ms=1_117_584_000_000, ts_kind="event")
    assert barriers.latest(TOPOLOGY).barrier == 1  # nothing generated
    again = barriers.create(TOPOLOGY, {WORDS: 1}, run_key="by-hand", ts_kind="event")
    assert (again.barrier, again.ts_kind, again.created) == (first.barrier, "system", False)
    assert barriers.create(TOPOLOGY, {WORDS: 2}).barrier == 2


def test_a_late_event_time_watermark_is_refused_or_raised_to_the_last(
    core: MetastoreCore, registry: RegistryManager
) -> None:
    """An event-time barrier never goes back in time: a watermark below the previous barrier's is
    refused, or raised to it with ``raise_late_watermark`` (the emitter's empty final epoch); the
    root figures go on the WRITTEN row with the version."""
    barriers = BarrierManager(core)
    barriers.create(TOPOLOGY, {WORDS: 1}, ts_ms=5_000, ts_kind="event")
    with pytest.raises(TopologyError, match="would go backwards: watermark 4000 < 5000 of barrier 1"):
        barriers.create(TOPOLOGY, {WORDS: 2}, ts_ms=4_000, ts_kind="event")
    late = barriers.create(TOPOLOGY, {WORDS: 2}, ts_ms=4_000, ts_kind="event", raise_late_watermark=True,
                                   root_figures={WORDS: (3, 4_096)})
    assert (late.barrier, late.ts_ms) == (2, 5_000)
    on_time = barriers.create(TOPOLOGY, {WORDS: 3}, ts_ms=6_000, ts_kind="event", raise_late_watermark=True)
    assert (on_time.barrier, on_time.ts_ms) == (3, 6_000)
    from airflow_provider_tsb.metastore.table_states import TableStateManager

    states = TableStateManager(core)
    assert (states.get(WORDS, 2).file_count, states.get(WORDS, 2).size_bytes) == (3, 4_096)
    assert states.get(WORDS, 3).file_count is None


def test_barrier_timestamps_span_the_signed_64_bit_range(core: MetastoreCore, registry: RegistryManager) -> None:
    """Event time before 1970 is a normal historical replay: a negative watermark is a barrier
    timestamp like any other (both ends of BIGINT included); only values beyond it are refused,
    naming the field, before anything is written. The sharing protocol's timestamps map to it."""
    from airflow_provider_tsb.api.sharing.model import parse_timestamp
    from airflow_provider_tsb.exceptions import OutOfRangeError

    barriers = BarrierManager(core)
    with pytest.raises(OutOfRangeError, match=r"ts_ms \(the barrier timestamp, epoch ms\) must be an integer "
                       r"from -9223372036854775808 to 9223372036854775807"):
        barriers.create(TOPOLOGY, {WORDS: 1}, ts_ms=-(2**63) - 1, ts_kind="event")
    assert barriers.latest(TOPOLOGY) is None
    moon = parse_timestamp("1969-07-20T20:17:40.0005Z")  # floored to its millisecond, not toward 0
    assert moon == -14182940000
    first = barriers.create(TOPOLOGY, {WORDS: 1}, ts_ms=-(2**63), ts_kind="event")
    second = barriers.create(TOPOLOGY, {WORDS: 2}, ts_ms=moon, ts_kind="event")
    assert [(b.barrier, b.ts_ms) for b in (first, second)] == [(1, -(2**63)), (2, moon)]
    assert barriers.get(TOPOLOGY, 2).ts_ms == moon
    with pytest.raises(TopologyError, match=f"would go backwards: watermark {moon - 1} < {moon} of barrier 2"):
        barriers.create(TOPOLOGY, {WORDS: 3}, ts_ms=moon - 1, ts_kind="event")
