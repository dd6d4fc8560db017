"""Vacuum without log commits: delete the data files no kept version references.

Delta ``VACUUM`` (Delta protocol, "Data Files": a file removed from the table may be deleted
once no version a reader can still ask for references it) is two things in delta-rs: computing
the files to delete, and two audit commits to the log (``VACUUM START`` and ``VACUUM END``,
commit info only, a Databricks convention the protocol does not require). Those commits race
with the table's writer: delta-rs's conflict checker fails them with ``CommitFailedError`` ("a
concurrent transaction deleted data this operation read") whenever a job committed a
``remove`` meanwhile, so a table committing every second fails most vacuums, and every
successful vacuum adds two versions to the log it is trying to keep small.

:func:`vacuum_files` keeps the first part and drops the second: delta-rs's own dry run lists
the files (lite mode: files of ``remove`` actions no version in ``keep_versions`` and none at
or after the snapshot's version references; files never committed, such as a job's staged
attempt, are not candidates), and the table's own object store (delta-rs's
``DeltaStorageHandler``, with the location's storage options) deletes them. Nothing is
committed, so nothing can conflict; the metastore's expiry marks are the audit trail. A
writer's commit after the snapshot adds and removes files of its own, never one of these (a
Delta commit only re-adds a removed path through ``RESTORE``, and a revision restores only
kept versions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler
from pyarrow.fs import FileType

from airflow_provider_tsb.delta.storage import storage_options


@dataclass(frozen=True)
class VacuumResult:
    """What :func:`vacuum_files` did.

    Attributes:
        candidates: files the dry run named (paths relative to the table root); files deleted
            by an earlier vacuum stay candidates until their ``remove`` tombstone expires.
        deleted: the candidates that existed and were deleted (``dry_run``: would be).
    """

    candidates: tuple[str, ...]
    deleted: tuple[str, ...]


def vacuum_files(table: DeltaTable, location: str, keep_versions: Sequence[int], *,
                 dry_run: bool = False) -> VacuumResult:
    """Delete the data files of ``table``'s snapshot that no version in ``keep_versions`` needs.

    Args:
        table: the table at the snapshot to vacuum (its version and every later one are kept).
        location: the table's normalized location (for its storage options).
        keep_versions: Delta versions whose files stay (each <= the snapshot's version).
        dry_run: list only.

    Returns:
        A :class:`VacuumResult`.

    Raises:
        OSError: the object store refused a listing or a deletion (the files not yet deleted
            stay candidates for the next vacuum).
    """
    candidates = tuple(table.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False,
                                    keep_versions=sorted(keep_versions)))
    if not candidates:
        return VacuumResult((), ())
    store = DeltaStorageHandler(location, storage_options(location))
    present = tuple(info.path for info in store.get_file_info(list(candidates)) if info.type != FileType.NotFound)
    if not dry_run:
        for path in present:
            try:
                store.delete_file(path)
            except FileNotFoundError:
                continue  # another expiry deleted it meanwhile
    return VacuumResult(candidates, present)
