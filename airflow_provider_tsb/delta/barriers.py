"""Barrier look-ups on Delta tables: which version holds which barrier, what is committed.

The *current lineage* of a table is the chain of versions whose data the latest version
descends from: walking back from the latest version, a ``RESTORE`` commit to version ``t``
jumps to ``t`` (the versions between ``t`` and the restore were undone), and a truncation
(``tsb.truncate``, a reprocess from barrier 1) is where it begins. Barrier ids grow
along a lineage, so walks stop as soon as they pass the barrier asked for.

Costs are given per function; "walk" means one small log-file read per commit visited
(see :mod:`airflow_provider_tsb.delta.log`), newest first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_tsb.delta.conventions import (
    EPOCH_BASE_PROPERTY,
    EPOCH_PROPERTY,
    RESTORE_BARRIER_KEY,
    RESTORE_NEXT_EPOCH_KEY,
    TRUNCATE_KEY,
    BarrierTag,
    app_id,
    parse_tag,
)
from airflow_provider_tsb.delta.log import commit_info, normalize_location, transaction_version
from airflow_provider_tsb.delta.log_cleanup import log_start
from airflow_provider_tsb.delta.snapshots import latest_table, latest_table_or_none, latest_version, newest_version
from airflow_provider_tsb.exceptions import DeltaLogError, TableNotFoundError


@dataclass(frozen=True)
class TableEpoch:
    """Restore epoch of a table.

    Attributes:
        epoch: 0 for a never-restored table, bumped by each restore.
        base_barrier: the barrier the table was restored to (barriers <= it are WRITTEN in the
            restored state), or ``None``.
        pending: True when the restore commit exists but its epoch bump commit does not yet
            (a restore interrupted between its two commits); writers finish it first.
    """

    epoch: int
    base_barrier: int | None
    pending: bool = False


def iter_lineage(
    location: str, start: int | None = None, *, read: Callable[[int], dict[str, Any] | None] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(version, commitInfo)`` of the current lineage, newest first.

    Args:
        location: table location.
        start: version to start from (default: latest, from the per-process snapshot cache of
            :mod:`airflow_provider_tsb.delta.snapshots`, advanced to the newest commit).
        read: ``version -> commitInfo`` (``None`` when absent) to read commits with (default:
            :func:`~airflow_provider_tsb.delta.log.commit_info`; a
            :class:`~airflow_provider_tsb.delta.sink_log.SinkLog` passes its memo).

    Stops silently at version 0, or where the log starts after metadata cleanup
    (:func:`~airflow_provider_tsb.delta.log_cleanup.log_start`: the commits below the oldest
    checkpoint a kept version needs are gone, and so are those versions' data files), and raises
    when a commit file is missing above that.

    Raises:
        TableNotFoundError: no table at ``location``.
        DeltaLogError: a commit of the lineage is missing from the log above where it starts.
    """
    version = latest_version(location) if start is None else start
    while version >= 0:
        info = read(version) if read is not None else commit_info(location, version)
        if info is None:
            start = log_start(location)
            if start is not None and version < start:
                return  # metadata cleanup deleted the log below its oldest loadable version
            raise DeltaLogError(
                f"Delta log of {normalize_location(location)!r} has no commit {version} "
                "(cleaned up?): cannot walk the lineage further back"
            )
        yield version, info
        if info.get(TRUNCATE_KEY):
            return
        if info.get("operation") == "RESTORE":
            params = info.get("operationParameters") or {}
            target = params.get("version")
            if target is not None and int(target) < version:
                version = int(target)
                continue
        version -= 1


def tagged_lineage(
    location: str, start: int | None = None, *, read: Callable[[int], dict[str, Any] | None] | None = None,
) -> Iterator[tuple[int, BarrierTag]]:
    """Yield ``(version, tag)`` of the barrier commits of the current lineage, newest first
    (:func:`iter_lineage`'s walk; commits without a ``tsb`` tag are passed over).

    Raises:
        as :func:`iter_lineage`.
    """
    for version, info in iter_lineage(location, start, read=read):
        tag = parse_tag(info)
        if tag is not None:
            yield version, tag


def version_in_lineage(tagged: Iterable[tuple[int, BarrierTag]], barrier: int) -> int | None:
    """The newest version tagged with ``barrier`` among ``tagged`` (newest first, as
    :func:`tagged_lineage` yields them), or ``None``; stops at the first older barrier (barrier
    ids grow along a lineage)."""
    for version, tag in tagged:
        if tag.barrier == barrier:
            return version
        if tag.barrier < barrier:
            return None
    return None


def barrier_of_version(location: str, version: int) -> int | None:
    """Return the barrier tagged on commit ``version``, or ``None`` if it is not a tsb commit.

    Cost: O(1), one log-file read.

    Raises:
        DeltaLogError: ``version`` does not exist in the log.
    """
    info = commit_info(location, version)
    if info is None:
        raise DeltaLogError(f"Delta table {normalize_location(location)!r} has no version {version}")
    tag = parse_tag(info)
    return tag.barrier if tag else None


def version_of_barrier(location: str, barrier: int) -> int | None:
    """Return the newest version tagged with ``barrier`` in the current lineage, or ``None``.

    ``None`` also when the table does not exist. Cost: a walk over the commits newer than the
    barrier (O(1) for the latest barrier), plus finding the latest version (an incremental
    update of the cached snapshot, see :func:`~airflow_provider_tsb.delta.snapshots.latest_table`).
    """
    table = latest_table_or_none(location)
    if table is None:
        return None
    return version_in_lineage(tagged_lineage(location, table.version()), barrier)


def versions_of_barriers(location: str, after: int | None) -> dict[int, int]:
    """Return ``{barrier: version}`` for every barrier > ``after`` in the current lineage.

    One walk for many barriers (use it instead of repeated :func:`version_of_barrier`).
    ``{}`` when the table does not exist. Cost: a walk back to the first barrier <= ``after``
    (the whole lineage when ``after`` is ``None``).
    """
    found: dict[int, int] = {}
    table = latest_table_or_none(location)
    if table is None:
        return found
    for version, tag in tagged_lineage(location, table.version()):
        if after is not None and tag.barrier <= after:
            break
        found.setdefault(tag.barrier, version)
    return found


def latest_written_barrier(location: str) -> tuple[int, int] | None:
    """Return ``(barrier, version)`` of the newest barrier WRITTEN in the table, or ``None``.

    ``None`` when the table does not exist or has no tsb commit. After a restore to barrier k
    this is ``(k, version of k)``. Cost: the newest version found by ``stat`` without loading
    the new commits (:func:`~airflow_provider_tsb.delta.snapshots.newest_version`: beside jobs
    that commit every barrier, advancing the cached snapshot instead would read every new commit
    at each generation), then a walk over the untagged commits at the head (usually O(1)).
    """
    try:
        version = newest_version(location)
    except TableNotFoundError:
        return None
    newest = next(tagged_lineage(location, version), None)
    return (newest[1].barrier, newest[0]) if newest is not None else None


def table_epoch(location: str, *, table: Any = None) -> TableEpoch:
    """Return the restore epoch of the table (see :class:`TableEpoch`).

    Args:
        location: table location (must exist).
        table: an already loaded ``DeltaTable`` of the latest version, to save a load.

    Cost: one incremental update of the cached latest snapshot (unless ``table`` is given) and
    one log-file read.
    """
    dt = table if table is not None else latest_table(location)
    return epoch_of(dt.metadata().configuration or {}, commit_info(location, dt.version()) or {})


def epoch_of(config: Mapping[str, str], latest: Mapping[str, Any]) -> TableEpoch:
    """The :class:`TableEpoch` of a table whose configuration is ``config`` and whose newest
    commit's ``commitInfo`` is ``latest`` (no I/O)."""
    epoch = int(config.get(EPOCH_PROPERTY) or 0)
    base_raw = config.get(EPOCH_BASE_PROPERTY)
    base = int(base_raw) if base_raw not in (None, "") else None
    if (latest.get("operation") == "RESTORE" or latest.get(TRUNCATE_KEY)) and RESTORE_NEXT_EPOCH_KEY in latest:
        next_epoch = int(latest[RESTORE_NEXT_EPOCH_KEY])
        if next_epoch > epoch:
            restored_to = latest.get(RESTORE_BARRIER_KEY)
            return TableEpoch(next_epoch, int(restored_to) if restored_to else None, pending=True)
    return TableEpoch(epoch, base)


def committed_barrier(
    location: str, job_id: str, *, table: Any = None, epoch: TableEpoch | None = None
) -> int | None:
    """Return the highest barrier of ``job_id`` committed in the table's current epoch.

    Reads the epoch-scoped txn (``transaction_version``, Delta protocol "Transaction
    Identifiers") of the latest snapshot; after a restore to barrier k with no commit since,
    returns k. ``None`` if nothing is committed or the table does not exist.

    Args:
        table: the latest ``DeltaTable`` if the caller has it (default: the cached one,
            advanced to the newest commit).
        epoch: ``table_epoch(location, table=table)`` if the caller has it (saves a log read).

    Cost: one incremental update of the cached latest snapshot (unless ``table`` is given) and
    one log-file read (unless ``epoch`` is given).
    """
    if table is None:
        table = latest_table_or_none(location)
        if table is None:
            return None
    if epoch is None:
        epoch = table_epoch(location, table=table)
    txn = transaction_version(table, location, app_id(job_id, epoch.epoch))
    candidates = [b for b in (txn, epoch.base_barrier) if b is not None]
    return max(candidates) if candidates else None


def is_barrier_committed(location: str, job_id: str, barrier: int) -> bool:
    """Whether ``barrier`` of ``job_id`` is committed (WRITTEN) in the table's current lineage.

    True iff the epoch-scoped txn version of the job is >= ``barrier`` (barriers are committed
    in order), or ``barrier`` <= the barrier the table was restored to. Txn versions of commits
    undone by a restore are ignored because they belong to the previous epoch's app id.
    False when the table does not exist. Cost: see :func:`committed_barrier`.
    """
    done = committed_barrier(location, job_id)
    return done is not None and barrier <= done


def root_version(location: str) -> int:
    """Return the latest Delta version of a root table.

    Cost: one ``stat`` per commit since the last call, flat in the log's length
    (:func:`~airflow_provider_tsb.delta.snapshots.newest_version`; a full load the first time).

    Raises:
        TableNotFoundError: no Delta table at ``location`` (the message names the location).
    """
    try:
        return newest_version(location)
    except TableNotFoundError:
        raise TableNotFoundError(
            f"root table at {normalize_location(location)!r} does not exist: ingest into it before generating barriers"
        ) from None
