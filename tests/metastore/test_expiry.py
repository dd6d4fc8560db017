"""ExpiryManager on its own core: the marks snapshot expiry writes before it vacuums, and the
lease they refuse (the same lock: docs/design.md "Snapshot expiry")."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.exceptions import ExpiredVersionError
from airflow_provider_tsb.metastore.barriers import BarrierManager
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.expiry import ExpiryManager
from airflow_provider_tsb.metastore.leases import LeaseManager
from airflow_provider_tsb.metastore.registry import RegistryManager
from airflow_provider_tsb.metastore.table_states import TableStateManager
from tests.metastore.conftest import COUNTS, TOPOLOGY, WORDS


def test_marks_keep_the_newest_barriers_and_the_leases(core: MetastoreCore, registry: RegistryManager) -> None:
    barriers, states, leases = BarrierManager(core), TableStateManager(core), LeaseManager(core)
    for barrier in range(1, 6):  # barrier b is WRITTEN in counts at Delta version b - 1
        barriers.create(TOPOLOGY, {WORDS: barrier})
        states.record_written(COUNTS, barrier, barrier - 1, "count_words")
    lease, _ = leases.create({COUNTS: 1}, 600)
    expiry = ExpiryManager(core)
    dry = expiry.mark_expired(COUNTS, 2, latest_version=4, consumers=False, dry_run=True)
    assert expiry.get(COUNTS) is None and dry.keep_versions == (1, 3, 4)
    plan = expiry.mark_expired(COUNTS, 2, latest_version=4, consumers=False)
    assert (plan.expiry.horizon, plan.keep_versions, plan.kept_barriers) == (4, (1, 3, 4), (5, 4))
    assert plan.newly_expired_barriers == (1, 3)
    assert expiry.get(COUNTS).kept == ((1, 1), (3, 3))
    assert expiry.expired_barriers(COUNTS) == [1, 3]
    with pytest.raises(ExpiredVersionError, match="barrier 3"):
        leases.create({COUNTS: 2}, 60)  # refused under the lock the marks were written under
    leases.release(lease)


def test_the_newest_barriers_keep_every_version_of_their_epochs(core: MetastoreCore, registry: RegistryManager) -> None:
    """A root table's epoch can hold commits no barrier names (an ingest's appends and its auto
    compaction, ``append_rows(compaction=...)``, which removes files an append of the same epoch
    added). A rerun of a kept barrier reads its epoch's changes, so the versions of the kept
    epochs are kept and vacuum leaves their files; older barriers' versions expire as before."""
    barriers = BarrierManager(core)
    for barrier in range(1, 6):  # barrier b at root version 3b: two commits of its epoch are no barrier's
        barriers.create(TOPOLOGY, {WORDS: 3 * barrier})
    plan = ExpiryManager(core).mark_expired(WORDS, 2, latest_version=17, consumers=False)
    assert plan.kept_barriers == (5, 4)
    assert plan.expiry.kept == ((10, 15),)  # the epochs of barriers 4 and 5: (9, 15]
    assert plan.keep_versions == (10, 11, 12, 13, 14, 15, 17)  # 16: after the newest barrier, no consumer
    assert plan.newly_expired_barriers == (1, 2, 3)
