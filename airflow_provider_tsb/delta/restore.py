"""Restore a table to a barrier and bump its epoch (restore-safe app ids)."""

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
)
from airflow_provider_tsb.delta.errors import BarrierNotInTableError
from airflow_provider_tsb.delta.log import commit_info, normalize_location, open_table

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
    dt.alter.set_table_properties(
        {EPOCH_PROPERTY: str(state.epoch), EPOCH_BASE_PROPERTY: str(state.base_barrier)},
        raise_if_not_exists=False,
        commit_properties=CommitProperties(
            custom_metadata={
                EPOCH_PROPERTY: str(state.epoch),
                EPOCH_REASON_KEY: f"restore to barrier {state.base_barrier}",
            }
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
