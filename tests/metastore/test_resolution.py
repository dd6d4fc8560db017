"""ResolutionManager built with its collaborators, its named steps on a session, and bounded
staleness as a wrapper of it (issue 22 item 2; FLIP-276 "Data Consistency Type")."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.exceptions import InconsistentReadError, StaleReadError
from airflow_provider_tsb.metastore import resolution as steps
from airflow_provider_tsb.metastore.barriers import BarrierManager
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.expiry import expiries
from airflow_provider_tsb.metastore.leases import LeaseManager
from airflow_provider_tsb.metastore.registry import RegistryManager
from airflow_provider_tsb.metastore.resolution import ResolutionManager
from airflow_provider_tsb.metastore.staleness import StalenessResolver
from airflow_provider_tsb.metastore.table_states import TableStateManager
from tests.metastore.conftest import CC, COUNTS, TOPOLOGY, WORDS

STAGED = {"mode": "append", "files": ["_tsb_staging/b3-a1/part-0.parquet"]}


@pytest.fixture
def states(core: MetastoreCore, registry: RegistryManager) -> TableStateManager:
    """Barriers 1-3; counts WRITTEN at 1, 2 and PROCESSED at 3; cc WRITTEN at 1 only."""
    barriers, states = BarrierManager(core), TableStateManager(core)
    for barrier in (1, 2, 3):
        barriers.create(TOPOLOGY, {WORDS: barrier}, ts_ms=1_000 * barrier)
    states.record_written(COUNTS, 1, 0, "count_words")
    states.record_written(COUNTS, 2, 1, "count_words")
    states.record_processed(COUNTS, 3, "count_words", STAGED)
    states.record_written(CC, 1, 0, "count_counts")
    return states


@pytest.fixture
def resolver(core: MetastoreCore, registry: RegistryManager, states: TableStateManager) -> ResolutionManager:
    return ResolutionManager(core, registry, states, LeaseManager(core))


def test_levels(resolver: ResolutionManager, core: MetastoreCore) -> None:
    rr = resolver.resolve([WORDS, COUNTS], "repeatable-read")
    assert (rr.barrier, rr.versions) == (2, {WORDS: 2, COUNTS: 1})
    rc = resolver.resolve([WORDS, COUNTS], "read-committed")
    assert (rc.barrier, rc.versions, rc.tables[COUNTS].staged) == (3, {WORDS: 3, COUNTS: 1}, STAGED)
    assert resolver.resolve([COUNTS, CC]).barrier == 1  # the newest COMMIT over both
    assert resolver.resolve([WORDS, COUNTS], as_of=1).versions == {WORDS: 1, COUNTS: 0}
    with pytest.raises(InconsistentReadError, match="not COMMIT"):
        resolver.resolve([COUNTS, CC], as_of=2)
    with pytest.raises(InconsistentReadError, match="monotonic reads"):
        resolver.resolve([COUNTS, CC], min_barrier=2)
    leased = resolver.resolve([WORDS, COUNTS], lease_seconds=60)
    assert leased.lease_id is not None and LeaseManager(core).leased_versions(COUNTS) == {1}


def test_the_named_steps_on_one_session(resolver: ResolutionManager, core: MetastoreCore) -> None:
    with core.transaction() as s:
        q = steps.registered(s, steps.canonical_names([COUNTS, CC, COUNTS]))
        assert q.names == [COUNTS, CC]
        assert steps.candidate_barrier(s, q, ConsistencyLevel.REPEATABLE_READ) == 1
        assert steps.candidate_barrier(s, q, ConsistencyLevel.READ_COMMITTED) == 1
        barrier, found = steps.confirm(s, q, 1, ConsistencyLevel.REPEATABLE_READ)
        assert barrier == 1 and set(found) == set(q.ids)
        versions = steps.table_versions(s, q, barrier, found, expiries(s, q.ids))
        assert {n: tv.version for n, tv in versions.items()} == {COUNTS: 0, CC: 0}


def test_bounded_staleness_wraps_the_resolver(resolver: ResolutionManager, core: MetastoreCore) -> None:
    bounded = StalenessResolver(core, resolver, staleness_poll_s=0.01)
    assert bounded.resolver is resolver
    assert bounded.resolve([WORDS, COUNTS]).barrier == 2  # no bound: the resolver's answer
    with pytest.raises(StaleReadError, match="lagging") as err:  # barrier 2's ts is 1970
        bounded.resolve([WORDS, COUNTS], max_staleness_s=60)
    assert err.value.barrier == 2 and err.value.lagging == {COUNTS: "count_words"}
