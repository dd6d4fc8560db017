"""Restore a table to a barrier, or empty it for a reprocess, and bump its epoch (restore-safe
app ids): the Delta side of a revision (:mod:`airflow_provider_tsb.maintenance.revision`)."""

from __future__ import annotations

from dataclasses import dataclass

from deltalake import CommitProperties

from airflow_provider_tsb.delta.barriers import latest_written_barrier, table_epoch, version_of_barrier
from airflow_provider_tsb.delta.conventions import (
    EPOCH_BASE_PROPERTY,
    EPOCH_PROPERTY,
    EPOCH_REASON_KEY,
    RESTORE_BARRIER_KEY,
    RESTORE_NEXT_EPOCH_KEY,
    RESTORE_VERSION_KEY,
    TRUNCATE_KEY,
)
from airflow_provider_tsb.delta.log import commit_info, normalize_location, open_table
from airflow_provider_tsb.delta.snapshots import latest_table
from airflow_provider_tsb.exceptions import BarrierNotInTableError

_METADATA_ONLY_OPERATIONS = frozenset({"RESTORE", "SET TBLPROPERTIES"})


@dataclass(frozen=True)
class RestoreResult:
    """Outcome of :func:`restore_to_barrier`.

    Attributes:
        barrier: the barrier restored to.
        target_version: the version tagged with it, whose data the table now holds.
        latest_version: the table's latest version after the restore (the epoch commit).
        epoch: the table's epoch after the restore.
        changed: False when the table already was at that barrier (nothing committed).
    """

    barrier: int
    target_version: int
    latest_version: int
    epoch: int
    changed: bool


def finish_pending_restore(location: str) -> bool:
    """Commit the epoch bump of a restore interrupted between its two commits.

    Returns True if a commit was made. Cost: one snapshot load and one log-file read.
    """
    dt = open_table(location)
    state = table_epoch(location, table=dt)
    if not state.pending:
        return False
    base = "" if state.base_barrier is None else str(state.base_barrier)
    reason = "truncate (reprocess from barrier 1)" if state.base_barrier is None else (
        f"restore to barrier {state.base_barrier}")
    dt.alter.set_table_properties(
        {EPOCH_PROPERTY: str(state.epoch), EPOCH_BASE_PROPERTY: base},
        raise_if_not_exists=False,
        commit_properties=CommitProperties(
            custom_metadata={EPOCH_PROPERTY: str(state.epoch), EPOCH_REASON_KEY: reason}
        ),
    )
    return True


def restore_to_barrier(location: str, barrier: int) -> RestoreResult:
    """Restore the table to the version tagged with ``barrier`` and bump ``tsb.epoch``.

    Two commits: a delta-rs ``RESTORE`` to the barrier's version (commit metadata
    ``tsb.restore.barrier``, ``tsb.restore.version``, ``tsb.restore.next_epoch``), then a
    ``SET TBLPROPERTIES`` of ``tsb.epoch`` = old + 1 and ``tsb.epoch.base_barrier`` = barrier
    (commit metadata ``tsb.epoch``, ``tsb.epoch.reason``). Readers treat a restore commit
    without its epoch commit as already in the new epoch, and rerunning this function (or any
    tsb write) finishes it, so a crash between the two commits is safe. Idempotent.

    Data files of the undone versions are kept (time travel, vacuum removes them later).

    Raises:
        TableNotFoundError: no table at ``location``.
        BarrierNotInTableError: ``barrier`` has no version in the current lineage.
    """
    loc = normalize_location(location)
    dt = open_table(loc)
    latest = dt.version()
    head = commit_info(loc, latest) or {}
    if head.get("operation") == "RESTORE" and head.get(RESTORE_BARRIER_KEY) == str(barrier):
        finish_pending_restore(loc)
        dt = open_table(loc)
        target = int(head.get(RESTORE_VERSION_KEY) or head["operationParameters"]["version"])
        return RestoreResult(barrier, target, dt.version(), table_epoch(loc, table=dt).epoch, True)
    target = version_of_barrier(loc, barrier)
    if target is None:
        raise BarrierNotInTableError(
            f"cannot restore {loc!r} to barrier {barrier}: no version of the current lineage is "
            "tagged with it (never WRITTEN, already undone, or its log was cleaned up)"
        )
    state = table_epoch(loc, table=dt)
    at_head = target == latest or (
        latest_written_barrier(loc) == (barrier, target) and head.get("operation") in _METADATA_ONLY_OPERATIONS
    )
    if at_head:
        finish_pending_restore(loc)
        return RestoreResult(barrier, target, open_table(loc).version(), state.epoch, False)
    next_epoch = state.epoch + 1
    dt.restore(
        target,
        commit_properties=CommitProperties(
            custom_metadata={
                RESTORE_BARRIER_KEY: str(barrier),
                RESTORE_VERSION_KEY: str(target),
                RESTORE_NEXT_EPOCH_KEY: str(next_epoch),
            }
        ),
    )
    finish_pending_restore(loc)
    dt = open_table(loc)
    return RestoreResult(barrier, target, dt.version(), next_epoch, True)


def truncate_table(location: str) -> RestoreResult:
    """Empty the table for a reprocess from barrier 1, and bump ``tsb.epoch``.

    Two commits, like :func:`restore_to_barrier`: an ``overwrite`` that removes every file
    (commit metadata ``tsb.truncate``, ``tsb.restore.next_epoch``; the schema and partitioning
    stay), then the epoch bump with no base barrier. The truncation starts a new lineage
    (:func:`~airflow_provider_tsb.delta.barriers.iter_lineage` stops at it), so the table holds no
    barrier and the job processes every barrier again, from barrier 1, under a fresh txn app id.
    Idempotent: a table with no barrier in its lineage is only finished (a crash between the two
    commits), not truncated again. Data files stay for time travel until vacuum.

    Returns:
        :class:`RestoreResult` with ``barrier`` 0 and ``target_version`` the truncation commit.

    Raises:
        TableNotFoundError: no table at ``location``.
    """
    loc = normalize_location(location)
    dt = open_table(loc)
    if latest_written_barrier(loc) is None:
        finish_pending_restore(loc)
        dt = open_table(loc)
        return RestoreResult(0, dt.version(), dt.version(), table_epoch(loc, table=dt).epoch, False)
    next_epoch = table_epoch(loc, table=dt).epoch + 1
    dt.create_write_transaction(
        [],
        "overwrite",
        dt.schema(),
        partition_by=list(dt.metadata().partition_columns) or None,
        commit_properties=CommitProperties(
            custom_metadata={TRUNCATE_KEY: "true", RESTORE_NEXT_EPOCH_KEY: str(next_epoch)}
        ),
    )
    truncated = latest_table(loc).version()
    finish_pending_restore(loc)
    dt = open_table(loc)
    return RestoreResult(0, truncated, dt.version(), next_epoch, True)
