"""One atomic, exactly-once Delta commit of one barrier's files for one table (delta-rs only).

The files were written by someone else (Spark executors) under the table root; this module
only builds the ``add`` actions and commits them with the barrier tag and the epoch-scoped
txn (see :mod:`airflow_provider_tsb.delta.conventions`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from deltalake import CommitProperties, DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from airflow_provider_tsb.delta.barriers import version_of_barrier
from airflow_provider_tsb.delta.conventions import (
    JOB_KEY,
    SCHEMA_BARRIER_KEY,
    BarrierTag,
    barrier_commit_properties,
    parse_tag,
)
from airflow_provider_tsb.delta.integrity import figures_after, figures_metadata, recorded_figures
from airflow_provider_tsb.delta.log import commit_exists, commit_info, normalize_location
from airflow_provider_tsb.delta.restore import finish_pending_restore
from airflow_provider_tsb.delta.sink_log import SinkLog
from airflow_provider_tsb.delta.snapshots import latest_table, latest_table_or_none
from airflow_provider_tsb.delta.storage import storage_options

WriteMode = Literal["append", "overwrite"]


@dataclass(frozen=True)
class StagedFile:
    """A data file already written under the table root, ready to be added.

    Attributes:
        path: path relative to the table root (``/``-separated, not URL-encoded).
        size: bytes.
        modification_time: epoch milliseconds.
        num_records: rows in the file.
        stats: Delta stats JSON (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``).
        partition_values: partition column -> value as string (``{}`` if unpartitioned).
        data_change: ``False`` for a file that only rearranges rows already in the table (a
            compaction's output; Delta protocol "Add File and Remove File": change readers skip it).
    """

    path: str
    size: int
    modification_time: int
    num_records: int
    stats: str
    partition_values: Mapping[str, str | None] = field(default_factory=dict)
    data_change: bool = True

    def to_add_action(self) -> AddAction:
        """Return the delta-rs ``AddAction`` (``dataChange`` from :attr:`data_change`)."""
        return AddAction(
            self.path, self.size, dict(self.partition_values), self.modification_time, self.data_change, self.stats
        )

    def to_json(self) -> dict[str, object]:
        """Manifest entry (JSON-safe dict) reported with PROCESSED (``data_change`` only when false)."""
        entry: dict[str, object] = {
            "path": self.path,
            "size": self.size,
            "modification_time": self.modification_time,
            "num_records": self.num_records,
            "stats": self.stats,
            "partition_values": dict(self.partition_values),
        }
        if not self.data_change:
            entry["data_change"] = False
        return entry


@dataclass(frozen=True)
class RemovedFile:
    """An active file of the table that a barrier's commit removes (a merge's rewritten file).

    Attributes:
        path: path relative to the table root, as in the file's ``add`` action.
        size: bytes.
        partition_values: partition column -> value as string (``{}`` if unpartitioned).
        data_change: ``False`` when the file's rows stay in the table (a compaction).
    """

    path: str
    size: int
    partition_values: Mapping[str, str | None] = field(default_factory=dict)
    data_change: bool = True

    def to_remove_action(self, deletion_ms: int) -> RemoveAction:
        """Return the delta-rs ``RemoveAction`` (the file stays on storage for time travel until
        ``vacuum``)."""
        return RemoveAction(self.path, self.data_change, deletion_ms, self.size, dict(self.partition_values))


@dataclass(frozen=True)
class CommitOutcome:
    """Result of :func:`commit_barrier_files`.

    Attributes:
        version: the Delta version that holds the barrier (new or pre-existing).
        committed: False when the barrier was already committed (replay discarded).
        created: True when this commit created the table.
    """

    version: int
    committed: bool
    created: bool = False


def _existing_version(log: SinkLog, barrier: int) -> CommitOutcome:
    version = log.barrier_version if log.barrier == barrier else log.version_of(barrier)
    if version is None:
        # committed, then superseded or restored-to (restore base): report the head.
        version = int(log.version or 0)
    return CommitOutcome(version, committed=False)


def _current_log(location: str, job_id: str, log: SinkLog | None) -> SinkLog:
    """``log`` while the table has no commit after its version (one ``stat`` of the next commit
    file, :func:`~airflow_provider_tsb.delta.log.commit_exists`), else the log read again; a
    restore interrupted between its two commits is finished first."""
    if log is None or log.table is None or log.version is None or commit_exists(location, log.version + 1):
        log = SinkLog.read(location, job_id)
    if log.epoch.pending:
        finish_pending_restore(location)
        log = SinkLog.read(location, job_id)
    return log


def _holds(log: SinkLog, barrier: int) -> bool:
    """Whether ``barrier`` is committed in ``log`` (its answer when the log was read for it)."""
    return log.holds_barrier if log.barrier == barrier else log.is_committed(barrier)


def commit_barrier_files(
    location: str,
    files: Sequence[StagedFile],
    *,
    tag: BarrierTag,
    mode: WriteMode,
    schema: DeltaSchema,
    partition_by: Sequence[str] = (),
    removes: Sequence[RemovedFile] = (),
    before_commit: Callable[[], None] | None = None,
    log: SinkLog | None = None,
) -> CommitOutcome:
    """Commit ``files`` as barrier ``tag.barrier`` of ``tag.job_id``: exactly once.

    * Table missing: create it with these files in one commit (version 0) carrying the txn;
      if another attempt created it first, fall through to the checks below.
    * Barrier already committed in the current epoch (txn check): commit nothing, return the
      existing version (replay of a committed barrier is discarded).
    * Otherwise one ``create_write_transaction`` (``append`` adds the files and removes
      ``removes``, ``overwrite`` removes every current file and adds these), with an empty
      ``files`` list still making a commit so the barrier is WRITTEN. ``schema`` is the table's
      schema after the commit: ``overwrite`` writes a ``metaData`` action when it differs;
      ``append`` keeps the table's (delta-rs 1.6 ignores it; see :func:`evolve_table_schema`).
    * ``partition_by``: the partition columns of a table this commit creates (files carry their
      ``partition_values``); an existing table keeps its own.

    * ``before_commit`` (the fencing check of the writer's attempt) runs right before the
      commit is attempted and may raise to commit nothing.
    * A concurrent commit of the same barrier (another attempt of the job, whose txn
      conflicts with ours) makes this one discarded as a replay, not an error.

    Args:
        log: the table's log as the caller read it for this barrier
            (:class:`~airflow_provider_tsb.delta.sink_log.SinkLog`): its epoch and txn version
            are used as long as the table has no newer commit (default: read here).

    Cost: two ``stat`` calls when ``log`` is current (else a log read: the cached latest
    snapshot advanced and one log-file read), the commit, and one log-file read to find the
    new version.

    Raises:
        deltalake.exceptions.CommitFailedError: a concurrent writer conflicted (retry the
            barrier; the txn check then discards it if the other writer committed it).
    """
    loc = normalize_location(location)
    if removes and mode != "append":
        raise ValueError(f"commit of barrier {tag.barrier} to {loc!r}: removes need mode 'append', got {mode!r}")
    adds = [f.to_add_action() for f in files]
    if (log is None or log.table is None) and latest_table_or_none(loc) is None:
        if removes:
            raise ValueError(f"commit of barrier {tag.barrier}: no table at {loc!r} to remove {len(removes)} file(s)")
        created = figures_metadata(figures_after(None, [(f.path, f.size) for f in files], [], overwrite=True))
        if _create_table(loc, adds, tag, schema, partition_by, before_commit, created):
            return CommitOutcome(0, committed=True, created=True)
    log = _current_log(loc, tag.job_id, log)
    if _holds(log, tag.barrier):
        return _existing_version(log, tag.barrier)
    actions = [*adds, *(r.to_remove_action(int(time.time() * 1000)) for r in removes)]
    sizes = ([(f.path, f.size) for f in files], [(r.path, r.size) for r in removes])
    return _write_transaction(log, actions, tag, mode, schema, before_commit, sizes)


def _write_transaction(
    log: SinkLog, actions: list[AddAction | RemoveAction], tag: BarrierTag, mode: WriteMode, schema: DeltaSchema,
    before_commit: Callable[[], None] | None, sizes: tuple[list[tuple[str, int]], list[tuple[str, int]]],
) -> CommitOutcome:
    """The barrier's commit on the table of ``log`` (its txn not yet committed there), recording
    the version's live-file figures (``sizes``: the added and removed files' paths and bytes); a lost
    race against another attempt of the barrier is discarded as a replay."""
    loc, dt = log.location, log.table
    assert dt is not None  # the table exists
    if mode == "append":
        dt = evolve_table_schema(loc, dt, schema, tag, before_commit)
    read_version = dt.version()
    # the base's figures as its own commit recorded them (O(1)), else counted from its files: a
    # count would take a tampered base's extra files as truth and hide them from the readers
    base = recorded_figures(log.newest_info if read_version == log.version else log.commit_info(read_version)) or dt
    figures = figures_metadata(figures_after(base, sizes[0], sizes[1], overwrite=mode == "overwrite"))
    if before_commit is not None:
        before_commit()
    try:
        dt.create_write_transaction(
            actions, mode, schema, partition_by=list(dt.metadata().partition_columns) or None,
            commit_properties=barrier_commit_properties(tag, epoch=log.epoch.epoch, figures=figures),
        )
    except CommitFailedError:
        # lost a race: discarded as a replay if the other commit holds this barrier
        again = SinkLog.read(loc, tag.job_id)
        if again.is_committed(tag.barrier):
            return _existing_version(again, tag.barrier)
        raise
    version = _own_commit_version(loc, read_version, tag)
    if version is None:  # pragma: no cover - the commit above must be visible
        raise RuntimeError(f"barrier {tag.barrier} committed to {loc!r} but not found in its log")
    return CommitOutcome(version, committed=True)


def _create_table(
    loc: str, adds: list[AddAction], tag: BarrierTag, schema: DeltaSchema, partition_by: Sequence[str],
    before_commit: Callable[[], None] | None, figures: dict[str, str],
) -> bool:
    """Create the table with the barrier's files in one commit; ``False`` when another attempt
    created it first (the caller then takes the existing table's path)."""
    if before_commit is not None:
        before_commit()
    try:
        create_table_with_add_actions(
            loc, schema, adds, mode="error", partition_by=list(partition_by) or None,
            storage_options=storage_options(loc),
            commit_properties=barrier_commit_properties(tag, epoch=0, figures=figures),
        )
    except DeltaError as exc:
        if "already exists" not in str(exc):
            raise
        return False
    return True


def evolve_table_schema(
    location: str, table: DeltaTable, schema: DeltaSchema, tag: BarrierTag, before_commit: Callable[[], None] | None,
) -> DeltaTable:
    """Add the columns of ``schema`` the table lacks (nullable), in a commit of their own; return
    the table at its newest version.

    delta-rs 1.6.6 writes a ``metaData`` action only for ``overwrite`` writes
    (``create_write_transaction`` keeps the table's schema on ``append``, and refuses
    ``RemoveAction`` with ``overwrite``), so an ``append`` or ``merge`` barrier that adds a column
    commits the schema right before its data: ``alter.add_columns`` with commit metadata
    ``tsb.schema.barrier`` and no barrier tag or txn. The barrier's version is the data commit;
    older barriers' versions keep the old schema. A crash between the two commits leaves the
    new column with no data yet: the rerun finds it there and commits the data only.
    """
    have = {f.name for f in table.schema().fields}
    new = [f for f in schema.fields if f.name not in have]
    if not new:
        return table
    if before_commit is not None:
        before_commit()
    meta = {SCHEMA_BARRIER_KEY: str(tag.barrier), JOB_KEY: tag.job_id}
    try:
        table.alter.add_columns(new, commit_properties=CommitProperties(custom_metadata=meta))
    except DeltaError:
        latest = latest_table(location)
        if {f.name for f in new} - {f.name for f in latest.schema().fields}:
            raise
        return latest  # another attempt added them first
    return latest_table(location)


def _own_commit_version(location: str, read_version: int, tag: BarrierTag) -> int | None:
    """The version of the commit just made with ``tag`` on a snapshot at ``read_version``.

    delta-rs does not advance the ``DeltaTable`` it commits through, and the commit lands at
    ``read_version + 1`` unless concurrent commits came first (then later). The commits after
    ``read_version`` are read forward until the one carrying this job, barrier and attempt:
    usually one log-file read. Falls back to the lineage walk of :func:`version_of_barrier`.
    """
    version = read_version + 1
    while (info := commit_info(location, version)) is not None:
        found = parse_tag(info)
        if found is not None and (found.job_id, found.barrier, found.attempt) == (tag.job_id, tag.barrier, tag.attempt):
            return version
        version += 1
    return version_of_barrier(location, tag.barrier)
