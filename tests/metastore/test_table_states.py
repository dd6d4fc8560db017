"""TableStateManager on its own core: PROCESSED / WRITTEN per (table, barrier), staged directories."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.exceptions import TopologyError, UnknownBarrierError
from airflow_provider_tsb.metastore.barriers import BarrierManager
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.registry import RegistryManager
from airflow_provider_tsb.metastore.table_states import TableStateManager
from tests.metastore.conftest import COUNTS, TOPOLOGY, WORDS

STAGED = {"mode": "append", "files": ["_tsb_staging/b1-a1/part-0.parquet"]}


@pytest.fixture
def states(core: MetastoreCore, registry: RegistryManager) -> TableStateManager:
    barriers = BarrierManager(core)
    for version in (1, 2, 3):
        barriers.create(TOPOLOGY, {WORDS: version})
    return TableStateManager(core)


def test_processed_then_written(states: TableStateManager) -> None:
    states.record_processed(COUNTS, 1, "count_words", STAGED, {WORDS: 1})
    processed = states.get(COUNTS, 1)
    assert (processed.state, processed.version, processed.manifest) == ("PROCESSED", None, STAGED)
    assert states.version_at(COUNTS, 1) is None
    states.record_written(COUNTS, 1, 0, "count_words", attempt="b1-a1")
    states.record_written(COUNTS, 1, 0, "count_words")  # idempotent
    states.record_written(COUNTS, 2, 1, "count_words")
    assert states.version_at(COUNTS, 1) == 0 and states.newest_written(COUNTS).barrier == 2
    assert [s.barrier for s in states.history(COUNTS)] == [2, 1]
    assert states.written_versions([COUNTS, WORDS], [1, 2]) == {
        (COUNTS, 1): 0, (COUNTS, 2): 1, (WORDS, 1): 1, (WORDS, 2): 2,
    }
    assert states.barriers_at_versions({COUNTS: 1, WORDS: 3, "tsb.wc.cc": None}) == {
        COUNTS: 2, WORDS: 3, "tsb.wc.cc": None,
    }
    assert {s.table for s in states.states_at(TOPOLOGY, [2])} == {COUNTS, WORDS}
    assert set(states.newest_written_by_table(TOPOLOGY)) == {COUNTS, WORDS}
    with pytest.raises(TopologyError, match="WRITTEN at Delta version 1"):
        states.record_written(COUNTS, 2, 5, "count_words")
    with pytest.raises(UnknownBarrierError):
        states.record_written(COUNTS, 9, 5, "count_words")


def test_withdrawn_staging_is_held_then_due_then_forgotten(states: TableStateManager) -> None:
    states.record_processed(COUNTS, 3, "count_words", STAGED)
    assert states.held_staging(COUNTS, 3, grace_s=3600) == {"_tsb_staging/b1-a1"}
    assert states.clear_processed(COUNTS, 3) == 1 and states.get(COUNTS, 3) is None
    assert states.held_staging(COUNTS, 3, grace_s=3600) == {"_tsb_staging/b1-a1"}  # withdrawn, in its grace
    assert states.due_withdrawn_staging(COUNTS, grace_s=3600) == []
    assert states.due_withdrawn_staging(COUNTS, grace_s=0) == [("_tsb_staging/b1-a1", 3)]
    assert states.forget_withdrawn_staging(COUNTS, ["_tsb_staging/b1-a1"]) == 1
    assert states.due_withdrawn_staging(COUNTS, grace_s=0) == []


def test_written_tells_whether_withdrawn_staging_waits(states: TableStateManager) -> None:
    """The WRITTEN report says whether withdrawn directories wait, so a writer asks for the due
    ones only then: the committed attempt's directory is the table's, the other is withdrawn."""
    assert states.record_written(COUNTS, 1, 0, "count_words") is False
    two_attempts = {"mode": "append", "files": ["_tsb_staging/b2-a1/p.parquet", "_tsb_staging/b2-a2/p.parquet"]}
    states.record_processed(COUNTS, 2, "count_words", two_attempts)
    assert states.record_written(COUNTS, 2, 1, "count_words", attempt="b2-a2") is True
    assert states.due_withdrawn_staging(COUNTS, grace_s=0) == [("_tsb_staging/b2-a1", 2)]
    states.forget_withdrawn_staging(COUNTS, ["_tsb_staging/b2-a1"])
    assert states.record_written(COUNTS, 2, 1, "count_words") is False  # idempotent, nothing waits now


def test_written_tables_are_those_with_a_written_barrier(states: TableStateManager) -> None:
    """A table is listed from its first WRITTEN barrier on (a root table from the first barrier
    generated); PROCESSED alone does not count."""
    assert states.written_tables(TOPOLOGY) == {WORDS}
    states.record_processed(COUNTS, 1, "count_words", STAGED)
    assert states.written_tables(TOPOLOGY) == {WORDS}
    states.record_written(COUNTS, 1, 0, "count_words", attempt="b1-a1")
    assert states.written_tables(TOPOLOGY) == {WORDS, COUNTS} == set(states.newest_written_by_table(TOPOLOGY))
    assert states.written_tables("no_such_topology") == set()


def test_rollback_forgets_the_states_above(states: TableStateManager) -> None:
    for barrier in (1, 2, 3):
        states.record_written(COUNTS, barrier, barrier - 1, "count_words")
    assert states.rollback(COUNTS, 1) == 2
    assert [s.barrier for s in states.history(COUNTS)] == [1]
