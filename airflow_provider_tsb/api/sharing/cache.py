"""What a Delta Sharing request looks up before it reads, kept per api-server process.

A query of one table at one barrier (``POST .../query`` with ``version``) first finds its share
and the share's tables, then resolves the table AS OF the barrier and leases the version for as
long as the file URLs live. Both answers change rarely and are most of a query's CPU
(docs/benchmarks.md "Delta Sharing"), so :class:`SharingCache` keeps them:

* **shares**: the list of shares, and a share with its registered tables, are kept while the registry's version
  (:func:`~airflow_provider_tsb.metastore.registry_reads.registry_version`, bumped by every
  registration) is unchanged: one primary-key read instead of the registry's rows.
  Tables are shared from their first WRITTEN barrier on (:func:`.sharing_model.tables_in`): a
  table seen WRITTEN stays shared, the others are probed again. Both checks run at most once per
  ``check_seconds`` (``[tsb] sharing_check_seconds``, default :data:`DEFAULT_CHECK_SECONDS` in
  the api-server; ``0`` checks at every request): a registration, or a table's first WRITTEN
  barrier, reaches the listings within that time. A query of a barrier still reads that
  barrier's versions exactly (below), whatever the listing.
* **leased versions**: a REPEATABLE_READ resolution AS OF barrier ``N`` never changes while a
  lease holds the version (snapshot expiry keeps a leased version). A query reuses the lease an
  earlier query of the same table and barrier took while that lease still has at least
  ``seconds - reuse`` to live (``reuse`` = :data:`REUSE_FRACTION` of ``seconds``): its URLs
  then expire with that lease, between ``seconds - reuse`` and ``seconds`` from now, so a file
  is served only while a lease keeps it. One lease write per table, barrier and process every
  ``reuse`` seconds, instead of one per query.

Not kept: READ_COMMITTED answers (a PROCESSED barrier's staged files can be replaced), the
share's newest version, authorization (:mod:`.access`, which has its own cache), and the
Delta log's files and verification (:mod:`.files`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import LRUCache

from airflow_provider_tsb.api.sharing import model as sm
from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.metastore.records import Resolution, now_ms
from airflow_provider_tsb.metastore.registry_reads import registry_version
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.metastore.table_states import written_tables

#: share of a query lease's lifetime during which later queries reuse it (see module doc)
REUSE_FRACTION = 0.1
#: shares and leased versions kept per process
CACHE_SIZE = 1024
#: seconds a listing is used before the registry is checked again, in the api-server (see module doc)
DEFAULT_CHECK_SECONDS = 1.0


@dataclass
class _ShareEntry:
    registry_version: int
    share: sm.Share
    registered: list[sm.SharedTable]
    written: set[str]
    checked: float  # monotonic seconds of the last check against the metastore


@dataclass(frozen=True)
class _LeaseEntry:
    resolution: Resolution
    expires_ms: int


class SharingCache:
    """Shares and leased table versions of one metastore, kept per process (see module doc).

    Args:
        store: the metastore the answers come from.
        check_seconds: how long a listing is used before the metastore is checked again
            (seconds, ``>= 0``; ``0``: at every call).
        clock: epoch milliseconds (tests pass their own).
        monotonic: seconds for ``check_seconds`` (tests pass their own).

    Thread-safe: the api-server answers sharing requests from a thread pool.
    """

    def __init__(self, store: MetaStore, *, check_seconds: float = 0.0, clock: Callable[[], int] = now_ms,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.check_seconds = check_seconds
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._shares: LRUCache[str, _ShareEntry] = LRUCache(CACHE_SIZE)
        self._leases: LRUCache[tuple[str, str, int], _LeaseEntry] = LRUCache(CACHE_SIZE)
        self._all: tuple[int, list[sm.Share], float] | None = None

    def _fresh(self, checked: float) -> bool:
        return self.check_seconds > 0 and self._monotonic() - checked < self.check_seconds

    def shares(self) -> list[sm.Share]:
        """Every share (:func:`.sharing_model.share_names_in`), sorted by name: one read of the
        registry's version per ``check_seconds``, the registry's rows only when it changed."""
        with self._lock:
            kept = self._all
        if kept is not None and self._fresh(kept[2]):
            return list(kept[1])
        with self.store.core.transaction() as s:
            version = registry_version(s)
            if kept is None or kept[0] != version:
                kept = (version, [sm.share_in(s, name) for name in sm.share_names_in(s)], 0.0)
        kept = (kept[0], kept[1], self._monotonic())
        with self._lock:
            self._all = kept
        return list(kept[1])

    def share_and_tables(self, name: str) -> tuple[sm.Share, list[sm.SharedTable]]:
        """The share called ``name`` (:func:`.sharing_model.share_in`) and its tables that have a
        WRITTEN barrier (:func:`.sharing_model.tables_in`). Once per ``check_seconds``, in one
        read transaction: the registry's version and, for tables not yet seen WRITTEN, one probe
        per topology; the registry's rows only when the registry changed. In between: no read.

        Raises:
            UnknownShareError: no topology or barrier domain has this name (checked against the
                metastore: an unknown name is never kept).
        """
        with self._lock:
            entry = self._shares.get(name)
        if entry is None or not self._fresh(entry.checked):
            entry = self._check(name, entry)
        return entry.share, [t for t in entry.registered if t.full_name in entry.written]

    def _check(self, name: str, entry: _ShareEntry | None) -> _ShareEntry:
        with self.store.core.transaction() as s:
            version = registry_version(s)
            if entry is None or entry.registry_version != version:
                share = sm.share_in(s, name)
                entry = _ShareEntry(version, share, sm.registered_tables(s, share), set(), 0.0)
            pending = {t.info.topology for t in entry.registered if t.full_name not in entry.written}
            written = set(entry.written)
            for topology in sorted(pending):
                written |= written_tables(s, topology)
        entry = _ShareEntry(entry.registry_version, entry.share, entry.registered, written, self._monotonic())
        with self._lock:
            self._shares[name] = entry
        return entry

    def leased(self, share: sm.Share, table: sm.SharedTable, barrier: int, seconds: float, *,
               lease: bool = True, holder: str | None = None) -> Resolution:
        """``table`` resolved at share version ``barrier`` with its version leased, as
        :func:`.sharing_model.resolve_table` with ``lease_seconds=seconds``; on the
        REPEATABLE_READ share a lease taken by an earlier query is reused while it has at least
        ``seconds * (1 - REUSE_FRACTION)`` and at most ``seconds`` to live (the answer's
        ``lease_expires_at_ms`` is that lease's end, epoch ms). Without ``lease`` (a reader who
        may not lease) it is resolved and nothing is pinned. ``holder``: the lease's holder (a
        principal's, :func:`~airflow_provider_tsb.api.lease_budget.lease_holder`: a lease is reused
        for its own holder only, and a new one is taken within the principal's budget).

        Raises:
            UnknownBarrierError, InconsistentReadError, ExpiredVersionError: as
                :func:`.sharing_model.resolve_table` (never kept).
        """
        if not lease:  # a reader without the lease right: resolved, nothing pinned
            return sm.resolve_table(self.store, share, table, barrier, lease_seconds=None)
        key = (share.name, table.full_name, barrier, holder)
        if share.level is ConsistencyLevel.REPEATABLE_READ:
            with self._lock:
                entry = self._leases.get(key)
            left = (entry.expires_ms - self._clock()) if entry is not None else -1
            if entry is not None and seconds * (1 - REUSE_FRACTION) * 1000 <= left <= seconds * 1000:
                return entry.resolution
        if holder is not None:
            from airflow_provider_tsb.api.lease_budget import check_lease_budget

            check_lease_budget(self.store, holder, 1)
        res = sm.resolve_table(self.store, share, table, barrier, lease_seconds=seconds, holder=holder)
        if share.level is ConsistencyLevel.REPEATABLE_READ and res.lease_expires_at_ms is not None:
            with self._lock:
                self._leases[key] = _LeaseEntry(res, res.lease_expires_at_ms)
        return res

    def clear(self) -> None:
        """Forget every kept answer (as a new api-server process would start)."""
        with self._lock:
            self._shares.clear()
            self._leases.clear()
            self._all = None


__all__ = ["CACHE_SIZE", "DEFAULT_CHECK_SECONDS", "REUSE_FRACTION", "SharingCache"]
