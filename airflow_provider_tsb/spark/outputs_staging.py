"""Staging directories of barrier attempts: where executors write, and when they are deleted.

Executors write a barrier's files into ``<table>/tsb_staging/<job>/<epoch>/<barrier>/<attempt>/``
(partitioned sinks: Hive-style ``<column>=<value>/`` directories below it). This module lists
those files (footers only, on the driver), and deletes the attempt directories no reader can
hold: orphans of failed attempts at once, withdrawn ones after :func:`staging_grace_s` (see
:mod:`airflow_provider_tsb.spark.outputs` for the protocol and docs/design.md "Staged files:
withdrawal before deletion").
"""

from __future__ import annotations

import logging
import os
import posixpath
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import pyarrow.fs as pafs

from airflow_provider_tsb.delta.barriers import version_of_barrier
from airflow_provider_tsb.delta.conventions import parse_tag, staging_dir
from airflow_provider_tsb.delta.log import commit_info, filesystem

#: seconds a withdrawn attempt directory is kept for READ_COMMITTED readers that resolved it
DEFAULT_STAGING_GRACE_S = 600.0
STAGING_GRACE_ENV = "TSB_STAGING_GRACE_SECONDS"

log = logging.getLogger("airflow_provider_tsb.spark")


def staging_grace_s() -> float:
    """The staging grace period, seconds: ``$TSB_STAGING_GRACE_SECONDS`` or 600.

    Raises:
        ValueError: the variable is not a finite number >= 0 (names the variable).
    """
    raw = os.environ.get(STAGING_GRACE_ENV, "").strip()
    if not raw:
        return DEFAULT_STAGING_GRACE_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 <= value < float("inf")):
        raise ValueError(f"{STAGING_GRACE_ENV}={raw!r}: the staging grace period is a number of seconds >= 0")
    return value


@runtime_checkable
class StagingCatalog(Protocol):
    """A catalog that serves PROCESSED manifests to readers and fences zombies (the metastore's).

    Its ``record_processed`` checks the reporting attempt's fencing token in the transaction
    that records PROCESSED (the commit protocol's step e is also step f's fencing check).

    See :class:`~airflow_provider_tsb.spark.metastore_catalog.MetastoreCatalog`.
    """

    def check_fencing_token(self, job_id: str, barrier: int | None = None) -> None:
        """Raise :class:`FencedError` if a newer attempt of the job started."""
        ...

    def held_staging(self, table: str, barrier: int, grace_s: float) -> set[str]:
        """Attempt directories of (table, barrier) a reader may hold."""
        ...

    def due_withdrawn_staging(self, table: str, grace_s: float) -> list[tuple[str, int]]:
        """Withdrawn attempt directories of the table no reader can hold any more."""
        ...

    def forget_withdrawn_staging(self, table: str, paths: Sequence[str]) -> None:
        """Drop the records of deleted withdrawn directories."""
        ...

    def record_written(
        self, table: str, barrier: int, version: int, job_id: str, attempt: str | None = None
    ) -> None:
        """WRITTEN, naming the committed attempt."""
        ...



def _committed_attempt(location: str, barrier: int) -> str | None:
    version = version_of_barrier(location, barrier)
    if version is None:
        return None
    tag = parse_tag(commit_info(location, version))
    return tag.attempt if tag else None


def remove_orphan_attempts(
    location: str,
    job_id: str,
    epoch: int,
    barrier: int,
    keep: str | None,
    *,
    held: Callable[[], set[str]] | None = None,
    before_delete: Callable[[], None] | None = None,
) -> int:
    """Delete every attempt directory of (job, epoch, barrier) except ``keep`` and the held ones.

    Only the current epoch's directory is touched: files of an earlier epoch may still be
    referenced by undone versions and are left to ``vacuum``. The directories are listed
    first, then ``held()`` (paths relative to the table root that readers may hold) is asked,
    then ``before_delete()`` runs (the fencing check: it raises to delete nothing). Returns the
    number deleted.
    """
    fs, root = filesystem(location)
    rel_base = staging_dir(job_id, epoch, barrier)
    base = f"{root}/{rel_base}"
    info = fs.get_file_info(base)
    if info.type != pafs.FileType.Directory:
        return 0
    listed = [
        entry for entry in fs.get_file_info(pafs.FileSelector(base, recursive=False))
        if entry.type == pafs.FileType.Directory and entry.base_name != keep
    ]
    if not listed:
        return 0
    kept = held() if held is not None else set()
    doomed = [e for e in listed if f"{rel_base}/{e.base_name}" not in kept]
    if doomed and before_delete is not None:
        before_delete()
    removed = 0
    for entry in doomed:
        try:
            fs.delete_dir(entry.path)
            removed += 1
        except FileNotFoundError:  # the fenced attempt dropped its own directory meanwhile
            pass
    return removed


def collect_withdrawn(location: str, table: str, catalog: StagingCatalog, grace_s: float) -> int:
    """Delete the withdrawn attempt directories of ``table`` that are due (grace over, no lease).

    A directory whose attempt the Delta log holds as the barrier's commit (a zombie's commit
    that won the txn) is kept. Returns the number deleted.
    """
    due = catalog.due_withdrawn_staging(table, grace_s)
    if not due:
        return 0
    fs, root = filesystem(location)
    removed = 0
    for path, barrier in due:
        if posixpath.basename(path) != _committed_attempt(location, barrier):
            if fs.get_file_info(f"{root}/{path}").type == pafs.FileType.Directory:
                fs.delete_dir(f"{root}/{path}")
                removed += 1
    catalog.forget_withdrawn_staging(table, [p for p, _ in due])
    return removed



def has_any_file(fs: pafs.FileSystem, directory: str) -> bool:
    entries = fs.get_file_info(pafs.FileSelector(directory, recursive=True, allow_not_found=True))
    return any(e.type == pafs.FileType.File and "part-" in e.base_name for e in entries)



def drop_unserved_attempt(location: str, rel_dir: str, held: Callable[[], set[str]]) -> None:
    """A fenced attempt deletes its own directory unless a reader may hold it (then it is
    withdrawn by the newer attempt's PROCESSED or WRITTEN and deleted after the grace period)."""
    try:
        if rel_dir in held():
            return
        fs, root = filesystem(location)
        if fs.get_file_info(f"{root}/{rel_dir}").type == pafs.FileType.Directory:
            fs.delete_dir(f"{root}/{rel_dir}")
    except Exception as exc:  # best effort: the newest attempt's cleanup removes it anyway
        log.warning("could not remove the fenced attempt directory %s: %s", rel_dir, exc)
