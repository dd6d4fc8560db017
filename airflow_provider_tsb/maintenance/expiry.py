"""Snapshot expiry: delete the data files of old Delta versions, never those a lease or a job holds.

FLIP-276 "MetaService" keeps the snapshots in use; Apache Paimon's snapshot expiry with
consumers is the model (and its races, apache/paimon#6978 and #5819, the tests). Per table,
:func:`expire_snapshots`:

1. loads the Delta table's newest version ``latest`` (delta-rs);
2. marks in the metastore, in one transaction under the table's lock, every version below
   ``latest`` that is not kept as expired (:meth:`store.expiry.mark_expired
   <airflow_provider_tsb.metastore.expiry.ExpiryManager.mark_expired>`). Kept are the versions
   of the newest ``keep_barriers`` WRITTEN barriers, every version a live lease pins, and
   every version from the oldest one a registered reader job has still to read. From this
   commit on, leases on the expired versions are refused and resolution never answers them;
3. vacuums the table at ``latest`` keeping exactly the kept versions and everything from the
   horizon on: delta-rs lists the files (lite mode, ``keep_versions``) and they are deleted
   without a log commit (:mod:`airflow_provider_tsb.delta.vacuum`), so expiry never conflicts
   with the table's writer, however often it commits, and adds no version to its log. An
   ``OSError`` of the object store is retried with exponential backoff, at most
   ``max_retries`` times;
4. deletes the log files below the newest checkpoint at or before the oldest kept version
   (:func:`~airflow_provider_tsb.delta.log_cleanup.cleanup_metadata`, Delta protocol "Metadata
   Cleanup"), in the same retried step: every kept version stays loadable, and the log, which
   delta-rs lists at every commit, stops growing with the table's age.

A lease therefore either committed before the marks (and is kept) or is refused: no live lease
loses its files. A reader that resolved without a lease and reads after the vacuum gets
:class:`~airflow_provider_tsb.exceptions.ExpiredVersionError` from the readers, not a raw
``FileNotFoundError``. See docs/design.md "Snapshot expiry".
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_tsb.maintenance.retention import RetentionPolicy
from airflow_provider_tsb.metastore.records import ExpiryPlan

if TYPE_CHECKING:
    from airflow_provider_tsb.delta.log_cleanup import LogCleanup
    from airflow_provider_tsb.metastore.store import MetaStore

log = logging.getLogger("airflow_provider_tsb.maintenance.expiry")

#: vacuum attempts after the first one that failed with an ``OSError`` of the object store
DEFAULT_MAX_RETRIES = 8
#: first backoff, seconds (doubled per retry, with jitter, up to :data:`MAX_BACKOFF_S`)
DEFAULT_BACKOFF_S = 0.05
#: longest wait between two vacuum attempts, seconds
MAX_BACKOFF_S = 1.0


@dataclass(frozen=True)
class ExpiryResult:
    """The outcome of one table's expiry.

    Attributes:
        table: canonical table name.
        keep_barriers: the retention's ``keep_last``.
        retention: the policy, ``{"keep_last", "hourly_hours", "daily_days"}``.
        kept_versions: the Delta versions vacuum kept (every version from ``horizon`` to
            ``latest_version`` included).
        horizon: versions at or above it are not expired.
        latest_version: the version vacuum ran at (``None``: no Delta table yet, nothing done).
        newly_expired: versions this run marked expired (``dry_run``: would mark).
        expired_barriers: the WRITTEN barriers whose versions this run expired (``dry_run``:
            would expire): AS OF them is refused from now on.
        removed_files: data files deleted (``dry_run``: that would be deleted).
        removed_log_files: ``_delta_log`` files deleted by metadata cleanup (``dry_run``: that
            would be).
        log_start: the oldest version the table's log still loads after the cleanup
            (``None``: not cleaned, it still starts where it did).
        attempts: vacuum attempts (1 + retries after an object store ``OSError``).
        dry_run: nothing was marked nor deleted.
    """

    table: str
    keep_barriers: int
    retention: dict[str, int]
    kept_versions: list[int]
    horizon: int | None
    latest_version: int | None
    newly_expired: int
    expired_barriers: list[int]
    removed_files: int
    removed_log_files: int
    log_start: int | None
    attempts: int
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the operator's XCom, ``tsb expire``'s output)."""
        return dict(self.__dict__)


def expire_snapshots(
    store: MetaStore, table: str, keep_barriers: int | RetentionPolicy, *, dry_run: bool = False,
    consumers: bool = True, cleanup_metadata: bool = True, max_retries: int = DEFAULT_MAX_RETRIES,
    backoff_s: float = DEFAULT_BACKOFF_S, before_vacuum: Callable[[ExpiryPlan], None] | None = None,
) -> dict[str, Any]:
    """Expire ``table``'s old versions: mark them in the metastore, then vacuum (module doc).

    Args:
        store: the metastore.
        table: table name (``catalog.database.table``).
        keep_barriers: newest WRITTEN barriers kept readable (>= 1), or a
            :class:`~airflow_provider_tsb.maintenance.retention.RetentionPolicy` (hourly and daily tiers too);
            AS OF works on every kept barrier.
        dry_run: compute what would go (files listed by vacuum's dry run); mark nothing.
        consumers: keep what registered reader jobs of the table have still to read
            (Paimon's consumers); ``False`` expires it too (those jobs then fail on it).
        cleanup_metadata: also delete the log files no kept version needs (step 4); a table
            with ``delta.enableExpiredLogCleanup=false`` keeps them either way.
        max_retries: vacuum retries after an ``OSError`` of the object store (>= 0).
        backoff_s: first wait before a retry, seconds; doubled each time (at most
            :data:`MAX_BACKOFF_S`), with jitter.
        before_vacuum: called with the :class:`ExpiryPlan` after the marks are committed and
            before vacuum deletes anything (logging; the tests use it to force an order).

    Returns:
        :meth:`ExpiryResult.to_dict`: ``{"table", "keep_barriers", "retention", "kept_versions",
        "horizon", "latest_version", "newly_expired", "expired_barriers", "removed_files",
        "removed_log_files", "log_start", "attempts", "dry_run"}``.

    Raises:
        ValueError: ``keep_barriers`` < 1 or ``max_retries`` < 0.
        UnknownTableError: the table is not registered.
        OSError: the object store still failed after ``max_retries`` retries (the marks
            stay: the next expiry deletes the files and the log files).
    """
    from airflow_provider_tsb.delta.log import normalize_location, table_exists

    policy = _checked_policy(keep_barriers, max_retries)
    if not dry_run:
        store.leases.expire()
    info = store.registry.table(table)
    location = normalize_location(info.location)
    if not table_exists(location):
        return ExpiryResult(info.name, policy.keep_last, policy.to_dict(), [], None, None, 0, [], 0, 0, None, 0,
                            dry_run).to_dict()
    from deltalake import DeltaTable

    from airflow_provider_tsb.delta.storage import storage_options

    dt = DeltaTable(location, storage_options=storage_options(location))
    latest = dt.version()
    plan = store.expiry.mark_expired(info.name, policy, latest, consumers=consumers, dry_run=dry_run)
    if before_vacuum is not None:
        before_vacuum(plan)
    removed, log, attempts, kept = _vacuum(dt, plan, dry_run=dry_run, cleanup=cleanup_metadata,
                                           max_retries=max_retries, backoff_s=backoff_s)
    return ExpiryResult(
        info.name, policy.keep_last, policy.to_dict(), kept, plan.expiry.horizon, latest, plan.newly_expired,
        list(plan.newly_expired_barriers), len(removed), len(log.deleted), log.checkpoint, attempts, dry_run,
    ).to_dict()


def _checked_policy(keep_barriers: int | RetentionPolicy, max_retries: int) -> RetentionPolicy:
    """The retention policy of ``keep_barriers``; ValueError if it keeps no barrier or ``max_retries`` < 0."""
    if not isinstance(keep_barriers, RetentionPolicy) and keep_barriers < 1:
        raise ValueError(f"keep_barriers must be at least 1, got {keep_barriers}")
    policy = RetentionPolicy.of(keep_barriers)
    if max_retries < 0:
        raise ValueError(f"max_retries must be >= 0, got {max_retries}")
    return policy


def _vacuum(
    dt: Any, plan: ExpiryPlan, *, dry_run: bool, cleanup: bool, max_retries: int, backoff_s: float
) -> tuple[list[str], LogCleanup, int, list[int]]:
    """Delete the files no kept version needs (:func:`~airflow_provider_tsb.delta.vacuum.vacuum_files`:
    no log commit, so no race with the table's writer), then (``cleanup``) the log files below the
    oldest kept version's checkpoint; retry an ``OSError`` of the object store with backoff.
    Returns (files removed, the log cleanup, attempts, versions kept)."""
    from airflow_provider_tsb.delta.log import normalize_location
    from airflow_provider_tsb.delta.log_cleanup import LogCleanup, cleanup_metadata
    from airflow_provider_tsb.delta.vacuum import vacuum_files

    head = dt.version()
    versions = sorted(v for v in set(plan.keep_versions) | set(range(plan.latest_version, head + 1)) if v <= head)
    attempt = 0
    while True:
        attempt += 1
        try:
            location = normalize_location(plan.location)
            result = vacuum_files(dt, location, versions, dry_run=dry_run)
            log = (cleanup_metadata(location, versions[0], configuration=dt.metadata().configuration, dry_run=dry_run)
                   if cleanup and versions else LogCleanup(None, ()))
            return list(result.deleted), log, attempt, versions
        except OSError as exc:
            if attempt > max_retries:
                raise
            wait = min(backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S) * (0.5 + random.random())
            log.warning("%s: vacuum failed (%s); retry %d of %d in %.2f s", plan.expiry.table, exc,
                        attempt, max_retries, wait)
            time.sleep(wait)
