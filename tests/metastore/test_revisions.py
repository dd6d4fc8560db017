"""RevisionManager on its own core: a rollback recorded before any table is touched."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.exceptions import RevisionPendingError
from airflow_provider_tsb.metastore.barriers import BarrierManager
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.registry import RegistryManager
from airflow_provider_tsb.metastore.revisions import PlannedTable, RevisionManager
from airflow_provider_tsb.metastore.table_states import TableStateManager
from tests.metastore.conftest import CC, COUNTS, TOPOLOGY, WORDS


def test_plan_refuse_mark_and_finish(core: MetastoreCore, registry: RegistryManager) -> None:
    barriers, states = BarrierManager(core), TableStateManager(core)
    for b in (1, 2):
        barriers.create(TOPOLOGY, {WORDS: b})
        states.record_written(COUNTS, b, b - 1, "count_words")
        states.record_written(CC, b, b - 1, "count_counts")
    revisions = RevisionManager(core)
    tables = [PlannedTable(COUNTS, 0, "count_words", None), PlannedTable(CC, 0, "count_counts", None)]
    plan = revisions.plan(TOPOLOGY, COUNTS, 1, tables)
    assert revisions.plan(TOPOLOGY, COUNTS, 1, tables).id == plan.id  # a retry finds it
    assert states.newest_written(CC).barrier == 1  # forgotten above 1 in the plan's transaction
    assert revisions.pending(TOPOLOGY, CC).id == plan.id
    with pytest.raises(RevisionPendingError, match="count_counts"):
        revisions.check_none_pending("count_counts")
    revisions.mark_table(plan.id, COUNTS, 3)
    with pytest.raises(RevisionPendingError, match="not restored yet"):
        revisions.finish(plan.id)
    revisions.fail(plan.id, "boom")
    assert revisions.get(plan.id).error == "boom"
    revisions.mark_table(plan.id, CC, 3)
    done = revisions.finish(plan.id)
    assert (done.status, [t.restored_version for t in done.tables]) == ("done", [3, 3])
    assert revisions.pending(TOPOLOGY) is None
    assert [r.id for r in revisions.list(TOPOLOGY)] == [plan.id]
    revisions.check_none_pending("count_counts")
