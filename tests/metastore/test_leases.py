"""LeaseManager on its own core: Delta versions pinned for readers and running jobs."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.exceptions import UnknownTableError
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.leases import LeaseManager
from airflow_provider_tsb.metastore.records import now_ms
from airflow_provider_tsb.metastore.registry import RegistryManager
from tests.metastore.conftest import COUNTS, WORDS


def test_create_renew_release_and_expire(core: MetastoreCore, registry: RegistryManager) -> None:
    leases = LeaseManager(core)
    one, expires = leases.create_lease({WORDS: 3, COUNTS: (1, 2)}, 60, holder="reader")
    assert expires > now_ms()
    other, _ = leases.create_lease({WORDS: (5, 6)}, 60)
    assert leases.leased_ranges(WORDS) == [(3, 3), (5, 6)]
    assert leases.leased_versions(COUNTS) == {1, 2}
    assert leases.renew_lease(one, 120) is not None
    assert leases.release_lease(one) is True and leases.release_lease(one) is False
    assert leases.renew_lease(one, 120) is None  # gone: never revived
    assert leases.leased_versions(WORDS) == {5, 6}
    assert leases.expire_leases(now=now_ms() + 3_600_000) == 1
    assert leases.leased_versions(WORDS) == set() and leases.renew_lease(other, 60) is None


def test_invalid_leases_are_refused(core: MetastoreCore, registry: RegistryManager) -> None:
    leases = LeaseManager(core)
    with pytest.raises(ValueError):
        leases.create_lease({WORDS: (4, 2)}, 60)
    with pytest.raises(ValueError):
        leases.create_lease({WORDS: 1}, 0)
    with pytest.raises(UnknownTableError):
        leases.create_lease({"tsb.wc.nothing": 1}, 60)
