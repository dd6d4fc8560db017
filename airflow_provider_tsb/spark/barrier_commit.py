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

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession

from airflow_provider_tsb.delta.commit import CommitOutcome, RemovedFile, StagedFile, commit_barrier_files
from airflow_provider_tsb.delta.sink_log import SinkLog
from airflow_provider_tsb.exceptions import FencedError
from airflow_provider_tsb.spark.killpoints import crash_point
from airflow_provider_tsb.spark.outputs import Staged, stage_output
from airflow_provider_tsb.spark.outputs_staging import (
    StagingCatalog,
    collect_withdrawn,
    drop_unserved_attempt,
    remove_orphan_attempts,
    staging_dir,
    staging_grace_s,
)
from airflow_provider_tsb.spark.report_queue import ReportQueue
from airflow_provider_tsb.spark.timing import phase
from airflow_provider_tsb.spark.write_options import WriteOptions, WriteTarget

if TYPE_CHECKING:
    from airflow_provider_tsb.spark.catalog import BarrierCatalog

__all__ = ["Reports", "StagedAttempt", "WriteResult", "write_barrier"]


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


class Reports:
    """What the commit protocol tells the barrier catalog, and asks it (fencing, held staging).

    Args:
        catalog: the job's catalog (``None``: nothing is reported, nothing fenced).
        target: the write.
        grace_s: the staging grace period, seconds.
        queue: the job's queue of reports still running behind it (the previous barrier's): every
            report here waits for it first, and :meth:`finish` joins it (``None``: all synchronous).
    """

    def __init__(self, catalog: BarrierCatalog | None, target: WriteTarget, grace_s: float,
                 queue: ReportQueue | None = None) -> None:
        self.catalog = catalog
        self.staging = catalog if isinstance(catalog, StagingCatalog) else None
        self.target = target
        self.grace_s = grace_s
        self.queue = queue

    def _in_order(self) -> None:
        """Wait for the reports queued before this write (the previous barrier's WRITTEN)."""
        if self.queue is not None:
            self.queue.wait()

    def fence(self) -> None:
        """Raise :class:`FencedError` when a newer attempt of the job started."""
        if self.staging is not None:
            self.staging.check_fencing_token(self.target.job_id, self.target.barrier)

    def fenced_now(self) -> FencedError | None:
        """The :class:`FencedError` of a failure caused by a newer attempt (e.g. it deleted our
        in-progress files), or ``None`` when this attempt is still the newest."""
        try:
            self.fence()
        except FencedError as exc:
            return exc
        except Exception:  # the metastore is down: the original error is the one to show
            return None
        return None

    def held(self) -> set[str]:
        """Attempt directories of the barrier a READ_COMMITTED reader may hold."""
        if self.staging is None:
            return set()
        return self.staging.held_staging(self.target.table, self.target.barrier, self.grace_s)

    def before_commit(self, options: WriteOptions, files: Sequence[StagedFile], removes: Sequence[RemovedFile]
                      ) -> Callable[[], None]:
        """Steps e and f's check, as the commit's ``before_commit``: the first call reports
        PROCESSED (:meth:`processed`), whose metastore transaction checks the fencing token (a
        :class:`StagingCatalog` does), later calls (a schema change commits before the barrier's
        commit) check the fencing token only.

        Raises (when called):
            FencedError: a newer attempt of the job started.
        """
        reported = False

        def before() -> None:
            nonlocal reported
            if reported:
                self.fence()
                return
            self.processed(options, files, removes)
            reported = True
            crash_point("after_files", self.target.job_id, self.target.barrier)
        return before

    def processed(self, options: WriteOptions, files: Sequence[StagedFile], removes: Sequence[RemovedFile]) -> None:
        """PROCESSED with the manifest: ``append`` (staged files added to the previous version,
        minus ``removes``) or ``overwrite`` (staged files replace it)."""
        if self.catalog is None:
            return
        self._in_order()
        t, mode = self.target, options.commit_mode
        entries = [{**f.to_json(), "sink_mode": mode} for f in files]
        if removes and self.staging is not None:
            for entry in entries:
                entry.pop("sink_mode")
            manifest = {"mode": mode, "files": entries, "removes": [r.path for r in removes]}
            self.catalog.record_processed(t.table, t.barrier, t.job_id, manifest)  # type: ignore[arg-type]
        else:
            self.catalog.record_processed(t.table, t.barrier, t.job_id, entries)

    def written(self, version: int, attempt: str | None) -> None:
        """WRITTEN at Delta ``version``, naming the committed attempt."""
        self._in_order()
        self._written(version, attempt)

    def finish(self, version: int, attempt: str | None, location: str) -> int:
        """Step g: WRITTEN at ``version``, then the deletion of the withdrawn attempt directories
        that are due; queued behind the job's next barrier when there is a queue. Returns how many
        directories were deleted (0 when queued: the deletion has not run yet)."""
        if self.queue is None:
            self._written(version, attempt)
            return self.collect(location)
        self.queue.submit(self.target.barrier, f"WRITTEN of {self.target.table} at version {version}",
                          lambda: (self._written(version, attempt), self.collect(location)))
        return 0

    def _written(self, version: int, attempt: str | None) -> None:
        t = self.target
        if self.staging is not None:
            self.staging.record_written(t.table, t.barrier, version, t.job_id, attempt=attempt)
        elif self.catalog is not None:
            self.catalog.record_written(t.table, t.barrier, version, t.job_id)

    def collect(self, location: str) -> int:
        """Delete the withdrawn attempt directories that are due; how many."""
        if self.staging is None:
            return 0
        with phase("delta_log"):
            return collect_withdrawn(location, self.target.table, self.staging, self.grace_s)


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
    reports = Reports(catalog, target, staging_grace_s(), queue)
    if log is None:
        with phase("delta_log"):
            log = SinkLog.read(target.location, target.job_id)
    if log.is_committed(target.barrier):  # (a) exactly-once on replay
        return _replayed(target, log, reports)
    with phase("delta_log"):  # (b) orphans of failed attempts (nothing of this barrier committed)
        removed = _remove_orphans(target, log, reports, keep=staged.attempt if staged is not None else None)
    attempt, rel_dir = _attempt(target, log, staged)
    files, outcome = _stage_and_commit(spark, df, target, options, log, reports, rel_dir, attempt, staged)
    crash_point("after_commit", target.job_id, target.barrier)
    winner = attempt if outcome.committed else SinkLog.read(log.location, target.job_id).attempt_of(target.barrier)
    if not outcome.committed:  # another attempt won the race: ours are orphans
        _remove_orphans(target, log, reports, keep=winner)
    removed += reports.finish(outcome.version, winner, log.location)  # (g) WRITTEN, then what no reader holds
    rows = sum(f.num_records for f in files.files if f.data_change)
    return WriteResult(target.table, target.barrier, outcome.version, skipped=not outcome.committed,
                       files=len(files.files) if outcome.committed else 0, rows=rows if outcome.committed else 0,
                       orphans_removed=removed)


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
        with phase("commit"):  # (e) PROCESSED and (f) one atomic commit, by the job's newest attempt only
            outcome = commit_barrier_files(
                log.location, staged.files, tag=target.tag(attempt), mode=options.commit_mode,
                schema=staged.delta_schema, partition_by=options.partition_by, removes=staged.removed,
                before_commit=reports.before_commit(options, staged.files, staged.removed), log=log,
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
    with phase("delta_log"):
        winner = log.attempt_of(target.barrier)
        removed = _remove_orphans(target, log, reports, keep=winner)
        version = log.version_of(target.barrier)
        if version is None:  # committed, then superseded or restored-to (the restore base)
            version = int(log.version or 0)
    reports.written(version, winner)
    return WriteResult(target.table, target.barrier, version, skipped=True, orphans_removed=removed)


def _remove_orphans(target: WriteTarget, log: SinkLog, reports: Reports, keep: str | None) -> int:
    before_delete: Callable[[], None] = reports.fence
    return remove_orphan_attempts(log.location, target.job_id, log.epoch.epoch, target.barrier, keep,
                                  held=reports.held, before_delete=before_delete)
