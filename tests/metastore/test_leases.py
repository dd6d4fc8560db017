"""LeaseManager on its own core: Delta versions pinned for readers and running jobs."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.exceptions import UnknownTableError
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.leases import LeaseManager, lease_versions
from airflow_provider_tsb.metastore.records import now_ms
from airflow_provider_tsb.metastore.registry import RegistryManager
from tests.metastore.conftest import COUNTS, WORDS


def test_create_renew_release_and_expire(core: MetastoreCore, registry: RegistryManager) -> None:
    leases = LeaseManager(core)
    one, expires = leases.create({WORDS: 3, COUNTS: (1, 2)}, 60, holder="reader")
    assert expires > now_ms()
    other, _ = leases.create({WORDS: (5, 6)}, 60)
    assert leases.leased_ranges(WORDS) == [(3, 3), (5, 6)]
    assert leases.leased_versions(COUNTS) == {1, 2}
    assert leases.renew(one, 120) is not None
    assert leases.release(one) is True and leases.release(one) is False
    assert leases.renew(one, 120) is None  # gone: never revived
    assert leases.leased_versions(WORDS) == {5, 6}
    assert leases.expire(now=now_ms() + 3_600_000) == 1
    assert leases.leased_versions(WORDS) == set() and leases.renew(other, 60) is None


def test_invalid_leases_are_refused(core: MetastoreCore, registry: RegistryManager) -> None:
    leases = LeaseManager(core)
    with pytest.raises(ValueError):
        leases.create({WORDS: (4, 2)}, 60)
    with pytest.raises(ValueError):
        leases.create({WORDS: 1}, 0)
    with pytest.raises(UnknownTableError):
        leases.create({"tsb.wc.nothing": 1}, 60)


def test_a_lease_narrows_but_never_widens(core: MetastoreCore, registry: RegistryManager) -> None:
    """A batch run's input lease is narrowed as its barriers are done: a range inside the one
    pinned is taken, a table left out is no longer pinned, a wider range or a table the lease
    does not pin is refused and changes nothing (widening would skip the expiry check)."""
    leases = LeaseManager(core)
    run, _ = leases.create({WORDS: (0, 9), COUNTS: (2, 5)}, 60, holder="job j barriers 1..10")
    assert leases.narrow(run, {WORDS: (4, 9), COUNTS: 5}) is True
    assert leases.leased_ranges(WORDS) == [(4, 9)] and leases.leased_ranges(COUNTS) == [(5, 5)]
    for wider in ({WORDS: (3, 9)}, {WORDS: (4, 10)}, {WORDS: (5, 9), COUNTS: (4, 5)}):
        with pytest.raises(ValueError, match=f"lease {run}: cannot narrow .* a lease never widens"):
            leases.narrow(run, wider)
    assert leases.leased_ranges(WORDS) == [(4, 9)] and leases.leased_ranges(COUNTS) == [(5, 5)]
    assert leases.narrow(run, {WORDS: (9, 9)}) is True  # COUNTS is no longer read
    assert leases.leased_ranges(WORDS) == [(9, 9)] and leases.leased_ranges(COUNTS) == []
    with pytest.raises(ValueError, match="pins nothing of it"):
        leases.narrow(run, {WORDS: 9, COUNTS: 5})
    assert leases.release(run) is True
    assert leases.narrow(run, {WORDS: 9}) is False  # gone


def test_a_lease_under_the_callers_locks_pins_locked_tables_only(
    core: MetastoreCore, registry: RegistryManager) -> None:
    """Resolution locks Q's rows and reads their marks in its first query, then leases under
    that lock (``locked``); a table it did not lock is refused, never leased without the lock."""
    words, counts = registry.table(WORDS).id, registry.table(COUNTS).id
    with core.transaction(write=True) as s:
        lease_id, _ = lease_versions(s, {words: 2, counts: (0, 1)}, 60, "reader", locked={words: None, counts: None})
    assert LeaseManager(core).leased_ranges(WORDS) == [(2, 2)]
    assert LeaseManager(core).leased_ranges(COUNTS) == [(0, 1)]
    with core.transaction(write=True) as s, pytest.raises(ValueError, match=rf"table ids \[{counts}\] are not among"):
        lease_versions(s, {words: 2, counts: 1}, 60, None, locked={words: None})
    assert LeaseManager(core).leased_ranges(COUNTS) == [(0, 1)], lease_id
