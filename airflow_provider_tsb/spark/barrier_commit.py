"""The commit protocol, in one place: one barrier's output into one sink, exactly once.

:func:`write_barrier` (one sink, one barrier), with the sink's log read once when the barrier
started (:class:`~airflow_provider_tsb.delta.sink_log.SinkLog`, passed in) and the catalog's
reports and fencing behind one :class:`Reports` object:

a. barrier already committed (the epoch-scoped txn, Delta protocol "Transaction Identifiers")
   -> remove orphan attempts, re-report WRITTEN, return the existing version (replay discarded);
b. remove orphan staging directories of earlier failed attempts of this (job, barrier) that
   no reader can hold;
c. executors write Parquet files into ``<table>/tsb_staging/<job>/<epoch>/<barrier>/<attempt>/``
   (a non-hidden directory, so that ``vacuum`` can expire the files once they are removed
   from the table; the Delta ``add`` paths are relative to the table root);
d. the driver reads only the footers of those files (size, row count, stats);
   (c and d: :func:`~airflow_provider_tsb.spark.outputs.stage_output`)
e. PROCESSED is reported with the staged-file manifest (replacing, i.e. withdrawing, the
   manifest of a dead attempt) -- FLIP-276 "Timestamp Barrier": the barrier is PROCESSED in
   the table -- right before the commit, in the metastore transaction that checks the fencing
   token (:meth:`Reports.before_commit`: one round trip for steps e and f's check);
f. the fencing token is checked, then one delta-rs commit with the txn and the barrier tag
   (:func:`~airflow_provider_tsb.delta.commit.commit_barrier_files`);
g. WRITTEN is reported with the new version; withdrawn attempt directories past the staging
   grace period are deleted. In a batch run both go behind the job's next barrier, which waits
   for them before its own step e (:mod:`~airflow_provider_tsb.spark.report_queue`).

A sink with ``WriteOptions(writer="delta")`` replaces steps b-f with one idempotent write of
Delta's own Spark connector (:mod:`~airflow_provider_tsb.spark.delta_writer`: the fencing check,
then ``txnAppId`` / ``txnVersion`` and the tag in ``userMetadata``); steps a and g are the same.

Staged files are deleted only when no READ_COMMITTED reader can hold them (docs/design.md
"Staged files: withdrawal before deletion"): an attempt directory whose manifest was served is
first *withdrawn* in the metastore (steps e and g) and deleted by a later write of the job once
:func:`~airflow_provider_tsb.spark.outputs_staging.staging_grace_s` seconds have passed and no
lease taken before the withdrawal pins the table; directories never served (a crash while
writing, a fenced attempt) go at once. Deletion lists the directories, then checks the fencing
token, then deletes: a directory created by a newer attempt after the check is never in the
list, so a zombie cannot delete a live attempt's files. With a plan-file catalog (nothing is
served) orphans are deleted at once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession

from airflow_provider_tsb.delta.commit import CommitOutcome, commit_barrier_files
from airflow_provider_tsb.delta.conventions import staging_dir
from airflow_provider_tsb.delta.sink_log import SinkLog
from airflow_provider_tsb.exceptions import FencedError
from airflow_provider_tsb.spark.barrier_reports import Reports
from airflow_provider_tsb.spark.delta_writer import write_with_delta
from airflow_provider_tsb.spark.killpoints import crash_point
from airflow_provider_tsb.spark.outputs import Staged, stage_output
from airflow_provider_tsb.spark.outputs_staging import drop_unserved_attempt, remove_orphan_attempts
from airflow_provider_tsb.spark.report_queue import ReportQueue
from airflow_provider_tsb.spark.timing import phase
from airflow_provider_tsb.spark.write_options import WriteOptions, WriteTarget

if TYPE_CHECKING:
    from airflow_provider_tsb.spark.catalog import BarrierCatalog

__all__ = ["Reports", "StagedAttempt", "WriteResult", "write_barrier"]

logger = logging.getLogger("airflow_provider_tsb.spark")


@dataclass(frozen=True)
class StagedAttempt:
    """An attempt whose files are already staged (steps c and d done), e.g. by a write shared
    by several barriers (:func:`~airflow_provider_tsb.spark.outputs.stage_outputs`).

    Attributes:
        attempt: the attempt id.
        rel_dir: its attempt directory, relative to the table root.
        staged: its files and the table's schema after the barrier.
    """

    attempt: str
    rel_dir: str
    staged: Staged


@dataclass(frozen=True)
class WriteResult:
    """Outcome of :func:`write_barrier`.

    Attributes:
        table: sink table name.
        barrier: barrier id.
        version: Delta version holding the barrier.
        skipped: True when the barrier was already committed (nothing written).
        files: data files committed (0 when skipped).
        rows: rows in those files.
        orphans_removed: staging directories of failed attempts deleted.
    """

    table: str
    barrier: int
    version: int
    skipped: bool
    files: int = 0
    rows: int = 0
    orphans_removed: int = 0


def write_barrier(
    spark: SparkSession,
    df: DataFrame | None,
    target: WriteTarget,
    options: WriteOptions | None = None,
    *,
    catalog: BarrierCatalog | None = None,
    log: SinkLog | None = None,
    queue: ReportQueue | None = None,
    staged: StagedAttempt | None = None,
) -> WriteResult:
    """Commit ``df`` as barrier ``target.barrier`` of ``target.job_id`` into the sink, exactly once.

    See the module docstring for the protocol. Creating the table (first barrier, schema from
    ``df``) is exactly-once-safe too. A barrier with no rows still makes an (empty) commit.

    Args:
        df: the barrier's output (for ``merge``: the upserted rows only); ``None`` with ``staged``.
        options: how to write (default: ``WriteOptions()``, an append).
        catalog: receives PROCESSED and WRITTEN reports and fences zombies (may be ``None``).
        log: the sink's log read when the barrier started (default: read now).
        queue: the job's :class:`~airflow_provider_tsb.spark.report_queue.ReportQueue`: step g
            runs behind the job's next barrier, and ``orphans_removed`` does not count its
            deletions (default: step g runs before this returns).
        staged: this attempt's files, already staged (``df`` is then not written); a replay
            deletes them with the other orphans.

    Raises:
        ValueError: ``$TSB_STAGING_GRACE_SECONDS`` is not a number of seconds >= 0, or a
            ``delete_when`` Spark cannot resolve.
        SchemaChangeError: ``df`` drops a column of the table, changes a type, adds a
            ``NOT NULL`` column, or ``partition_by`` differs from the table's (nothing written).
        DuplicateKeyError: a ``merge`` output has several rows for one key (nothing committed).
        FencedError: a newer attempt of the job started (this one is a zombie): nothing of this
            attempt is committed or reported, and its unserved files are deleted.
        deltalake.exceptions.CommitFailedError: a concurrent writer conflicted (not another
            attempt of this barrier: that commit is taken as a replay).
    """
    options = options or WriteOptions()
    reports = Reports(catalog, target, queue)
    if log is None or log.barrier != target.barrier:
        with phase("delta_log"):
            log = SinkLog.read(target.location, target.job_id, barrier=target.barrier,
                               snapshot=options.mode == "merge" or options.compaction is not None)
    if log.holds_barrier:  # (a) exactly-once on replay
        return _replayed(target, log, reports)
    if options.writer == "delta":
        return _write_with_delta(spark, df, target, options, log, reports)
    attempt, rel_dir = _attempt(target, log, staged)
    files, outcome = _stage_and_commit(spark, df, target, options, log, reports, rel_dir, attempt, staged)
    crash_point("after_commit", target.job_id, target.barrier)
    winner = attempt if outcome.committed else _winner(target)
    collected = reports.finish(outcome.version, winner, log.location)  # (g) WRITTEN, then what no reader holds
    # (b) the directories of this barrier's earlier failed attempts, now that one attempt holds it
    removed = _remove_orphans(target, log, reports, keep=winner) + collected
    rows = sum(f.num_records for f in files.files if f.data_change)
    return WriteResult(target.table, target.barrier, outcome.version, skipped=not outcome.committed,
                       files=len(files.files) if outcome.committed else 0, rows=rows if outcome.committed else 0,
                       orphans_removed=removed)


def _write_with_delta(
    spark: SparkSession, df: DataFrame | None, target: WriteTarget, options: WriteOptions, log: SinkLog,
    reports: Reports,
) -> WriteResult:
    """Steps c-g with Delta's own writer (:mod:`~airflow_provider_tsb.spark.delta_writer`): the
    fencing check, one idempotent Delta write, WRITTEN. Nothing is staged, so no orphan exists."""
    if df is None:
        raise ValueError(f"table {target.table}, barrier {target.barrier}: the delta writer needs the output df")
    attempt = uuid.uuid4().hex
    try:
        commit = write_with_delta(spark, df, target, options, log, attempt, reports.fence)
    except FencedError:
        raise
    except Exception as exc:
        fenced = reports.fenced_now()
        if fenced is None:
            raise
        raise fenced from exc
    crash_point("after_commit", target.job_id, target.barrier)
    reports.finish(commit.version, commit.attempt, log.location)
    return WriteResult(target.table, target.barrier, commit.version, skipped=not commit.committed)


def _winner(target: WriteTarget) -> str | None:
    """The attempt whose commit holds the barrier (another attempt's, which won the race)."""
    return SinkLog.read(target.location, target.job_id, barrier=target.barrier).barrier_attempt


def _attempt(target: WriteTarget, log: SinkLog, staged: StagedAttempt | None) -> tuple[str, str]:
    """The attempt id and its directory (relative to the table root): ``staged``'s, else new ones."""
    if staged is not None:
        return staged.attempt, staged.rel_dir
    attempt = uuid.uuid4().hex
    return attempt, f"{staging_dir(target.job_id, log.epoch.epoch, target.barrier)}/{attempt}"


def _stage_and_commit(
    spark: SparkSession, df: DataFrame | None, target: WriteTarget, options: WriteOptions, log: SinkLog,
    reports: Reports, rel_dir: str, attempt: str, prestaged: StagedAttempt | None,
) -> tuple[Staged, CommitOutcome]:
    """Steps c-f (c and d done when ``prestaged``); a fenced attempt deletes the files no reader
    holds and raises ``FencedError``."""
    try:
        if prestaged is not None:
            staged = prestaged.staged
        elif df is not None:
            staged = stage_output(spark, df, target, options, log, rel_dir)
        else:
            raise ValueError(f"table {target.table}, barrier {target.barrier}: write_barrier needs df or staged")
        tag, mode = target.tag(attempt), options.commit_mode
        with phase("commit"):  # (e) PROCESSED and (f) one atomic commit, by the job's newest attempt only
            outcome = commit_barrier_files(
                log.location, staged.files, tag=tag, mode=mode, schema=staged.delta_schema,
                partition_by=options.partition_by, removes=staged.removed,
                before_commit=reports.before_commit(mode, staged.files, staged.removed), log=log,
            )
        if not outcome.committed:  # another attempt committed the barrier first: ours was never served
            drop_unserved_attempt(log.location, rel_dir, reports.held)  # (a zombie cannot delete it later)
    except FencedError:
        drop_unserved_attempt(log.location, rel_dir, reports.held)
        raise
    except Exception as exc:
        fenced = reports.fenced_now()
        if fenced is None:
            raise
        drop_unserved_attempt(log.location, rel_dir, reports.held)
        raise fenced from exc
    return staged, outcome


def _replayed(target: WriteTarget, log: SinkLog, reports: Reports) -> WriteResult:
    """Step a: the barrier is committed; report it WRITTEN again and clear what is left over."""
    version = log.barrier_version
    if version is None:  # committed, then superseded or restored-to (the restore base)
        version = int(log.version or 0)
    reports.written(version, log.barrier_attempt)
    with phase("delta_log"):
        removed = _remove_orphans(target, log, reports, keep=log.barrier_attempt)
    return WriteResult(target.table, target.barrier, version, skipped=True, orphans_removed=removed)


def _remove_orphans(target: WriteTarget, log: SinkLog, reports: Reports, keep: str | None) -> int:
    """The attempt directories of the barrier but ``keep`` that no reader holds; a newer attempt
    of the job (this one is fenced) leaves them to that attempt: 0."""
    before_delete: Callable[[], None] = reports.fence
    try:
        return remove_orphan_attempts(log.location, target.job_id, log.epoch.epoch, target.barrier, keep,
                                      held=reports.held, before_delete=before_delete)
    except FencedError as exc:
        log_fenced(target, exc)
        return 0


def log_fenced(target: WriteTarget, exc: FencedError) -> None:
    """Say why an attempt left its barrier's orphan directories."""
    logger.warning("job %s: barrier %s of %s: the orphan attempt directories are left to the newer attempt (%s)",
                target.job_id, target.barrier, target.table, exc)
