"""Commit one barrier's output DataFrame to one sink table, exactly once.

Protocol of :func:`write_barrier` (one sink, one barrier):

a. barrier already committed (epoch-scoped txn) -> remove orphan attempts, re-report
   WRITTEN, return the existing version (replay discarded);
b. remove orphan staging directories of earlier failed attempts of this (job, barrier) that
   no reader can hold (see below);
c. executors write Parquet files into ``<table>/tsb_staging/<job>/<epoch>/<barrier>/<attempt>/``
   (a non-hidden directory, so that ``vacuum`` can expire the files once they are removed
   from the table; the Delta ``add`` paths are relative to the table root);
d. the driver reads only the footers of those files (size, row count, stats);
e. PROCESSED is reported with the staged-file manifest (replacing, i.e. withdrawing, the
   manifest of a dead attempt);
f. the fencing token is checked, then one delta-rs commit with the txn and the barrier metadata;
g. WRITTEN is reported with the new version; withdrawn attempt directories past the staging
   grace period are deleted.

Staged files are deleted only when no READ_COMMITTED reader can hold them (docs/design.md
"Staged files: withdrawal before deletion"). With a catalog that serves manifests to readers
(the metastore, :class:`StagingCatalog`), an attempt directory whose manifest was served is
first *withdrawn* in the metastore (steps e and g) and deleted by a later write of the job once
:func:`staging_grace_s` seconds have passed and no lease taken before the withdrawal pins the
table; directories never served (a crash while writing, a fenced attempt) go at once. Deletion
lists the directories, then checks the fencing token, then deletes: a directory created by a
newer attempt after the check is never in the list, so a zombie cannot delete a live attempt's
files. With a plan-file catalog (nothing is served) orphans are deleted at once.

Modes: ``append`` adds the rows; ``overwrite`` replaces the table; ``merge`` upserts and
deletes by key columns, rewriting only the files that hold an affected key (their ``remove``
actions and the new files' ``add`` actions in the barrier's commit; see
:mod:`airflow_provider_tsb.spark.outputs_merge`). Partitioned sinks (``partition_by``) are
written as Hive-style ``col=value/`` directories under the attempt directory and committed with
their partition values. A barrier's output may add nullable columns (schema evolution,
:mod:`airflow_provider_tsb.spark.outputs_schema`). The ``crash_point`` calls are a test
facility, inert unless ``TSB_KILL_AT`` is set (:mod:`airflow_provider_tsb.spark.killpoints`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from pyspark.storagelevel import StorageLevel

from airflow_provider_tsb.delta.barriers import committed_barrier, table_epoch, version_of_barrier
from airflow_provider_tsb.delta.commit import RemovedFile, StagedFile, commit_barrier_files
from airflow_provider_tsb.delta.conventions import BarrierTag
from airflow_provider_tsb.delta.log import filesystem, normalize_location
from airflow_provider_tsb.delta.snapshots import latest_table_or_none, snapshot_at
from airflow_provider_tsb.exceptions import FencedError
from airflow_provider_tsb.spark.inputs import spark_schema
from airflow_provider_tsb.spark.killpoints import crash_point, crash_point_during
from airflow_provider_tsb.spark.outputs_compaction import (
    Compaction,
    compacted_rows,
    plan_compaction,
    rearranged,
)
from airflow_provider_tsb.spark.outputs_merge import (
    DELETE_FLAG,
    DuplicateKeyError,
    check_unique_keys,
    merge_rows,
    plan_merge,
    split_deletes,
)
from airflow_provider_tsb.spark.outputs_schema import (
    SchemaChangeError,
    _align_to_table,
    _nullable,
    check_partition_columns,
    evolve_schema,
)
from airflow_provider_tsb.spark.outputs_staging import (
    STAGING_DIR,
    StagingCatalog,
    _committed_attempt,
    _drop_unserved_attempt,
    _has_any_file,
    _staged_files,
    collect_withdrawn,
    remove_orphan_attempts,
    staging_dir,
    staging_grace_s,
)
from airflow_provider_tsb.spark.timing import phase

if TYPE_CHECKING:
    from airflow_provider_tsb.spark.catalog import BarrierCatalog

SinkMode = Literal["append", "overwrite", "merge"]

__all__ = [
    "STAGING_DIR", "DuplicateKeyError", "SchemaChangeError", "SinkMode", "StagingCatalog", "WriteResult",
    "collect_withdrawn", "merge_rows", "remove_orphan_attempts", "staging_dir", "staging_grace_s", "write_barrier",
]

log = logging.getLogger("airflow_provider_tsb.spark")


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
    df: DataFrame,
    *,
    table: str,
    location: str,
    job_id: str,
    barrier: int,
    mode: SinkMode,
    inputs: Mapping[str, int],
    ts_ms: int | None = None,
    keys: Sequence[str] = (),
    max_files: int | None = None,
    catalog: BarrierCatalog | None = None,
    partition_by: Sequence[str] = (),
    delete_when: str | None = None,
    declared_schema: str | None = None,
    compaction: Compaction | None = None,
) -> WriteResult:
    """Commit ``df`` as barrier ``barrier`` of ``job_id`` into the sink ``table`` at ``location``.

    See the module docstring for the protocol. Creating the table (first barrier, schema from
    ``df``) is exactly-once-safe too. A barrier with no rows still makes an (empty) commit.

    Args:
        spark: the session.
        df: the barrier's output (for ``merge``: the upserted rows only).
        table: sink table name (used in reports).
        location: sink table location.
        job_id: writer job id.
        barrier: barrier id; barriers must be written in increasing order.
        mode: ``append`` | ``overwrite`` | ``merge``.
        inputs: ``{input table: Delta version read}``, recorded in ``tsb.inputs``.
        ts_ms: barrier timestamp, epoch ms (``tsb.ts``).
        keys: key columns (``merge`` only).
        max_files: coalesce the output to at most this many files.
        catalog: receives PROCESSED and WRITTEN reports (may be ``None``).
        partition_by: partition columns (fixed when the table is created).
        delete_when: ``merge`` only: SQL condition on the output's rows that deletes their key.
        declared_schema: the sink's declared Spark DDL (``Sink.schema``), for ``NOT NULL`` of
            new columns.
        compaction: rewrite the table's small files in the same commit (``append`` and
            ``merge``; :mod:`airflow_provider_tsb.spark.outputs_compaction`); ``None``: never.

    Raises:
        ValueError: bad mode/keys, or ``$TSB_STAGING_GRACE_SECONDS`` is not a number of
            seconds >= 0.
        SchemaChangeError: ``df`` drops a column of the table, changes a type, adds a
            ``NOT NULL`` column, or ``partition_by`` differs from the table's (nothing written).
        DuplicateKeyError: a ``merge`` output has several rows for one key (nothing written;
            names the keys).
        FencedError: a newer attempt of the job started (this one is a zombie): nothing of this
            attempt is committed or reported, and its unserved files are deleted.
        deltalake.exceptions.CommitFailedError: a concurrent writer conflicted (not another
            attempt of this barrier: that commit is taken as a replay).
    """
    if mode not in ("append", "overwrite", "merge"):
        raise ValueError(f"unknown sink mode {mode!r} for {table}: use append, overwrite or merge")
    loc = normalize_location(location)
    staging = catalog if isinstance(catalog, StagingCatalog) else None
    grace = staging_grace_s()

    def fence() -> None:
        if staging is not None:
            staging.check_fencing_token(job_id, barrier)

    def held() -> set[str]:
        return staging.held_staging(table, barrier, grace) if staging is not None else set()

    def report_written(version: int, attempt: str | None) -> None:
        if staging is not None:
            staging.record_written(table, barrier, version, job_id, attempt=attempt)
        elif catalog is not None:
            catalog.record_written(table, barrier, version, job_id)

    with phase("delta_log"):
        dt = latest_table_or_none(loc)  # cached, advanced to the newest commit on disk
        state = table_epoch(loc, table=dt) if dt is not None else None
        epoch = state.epoch if state is not None else 0
        # (a) exactly-once on replay
        done = committed_barrier(loc, job_id, table=dt, epoch=state) if dt is not None else None
    if done is not None and barrier <= done:
        with phase("delta_log"):
            winner = _committed_attempt(loc, barrier)
            removed = remove_orphan_attempts(loc, job_id, epoch, barrier, winner, held=held, before_delete=fence)
            version = version_of_barrier(loc, barrier)
            if version is None:
                version = dt.version()  # type: ignore[union-attr]
        report_written(version, winner)
        return WriteResult(table, barrier, version, skipped=True, orphans_removed=removed)

    # (b) orphans of failed attempts (nothing of this barrier is committed in this epoch)
    with phase("delta_log"):
        removed = remove_orphan_attempts(loc, job_id, epoch, barrier, keep=None, held=held, before_delete=fence)

    attempt = uuid.uuid4().hex
    rel_dir = f"{staging_dir(job_id, epoch, barrier)}/{attempt}"
    try:
        staged = _stage(
            spark, df, loc=loc, rel_dir=rel_dir, dt=dt, mode=mode, keys=keys, max_files=max_files,
            table=table, job_id=job_id, barrier=barrier, partition_by=partition_by, delete_when=delete_when,
            declared_schema=declared_schema, compaction=compaction,
        )
        files, table_schema, removes = staged.files, staged.schema, staged.removed
        rows = sum(f.num_records for f in files)
        # (e) PROCESSED with the manifest, before the commit
        if catalog is not None:
            _report_processed(catalog, table, barrier, job_id, mode, files, removes)
        crash_point("after_files", job_id, barrier)

        # (f) one atomic commit, by the job's newest attempt only
        tag = BarrierTag(barrier=barrier, job_id=job_id, inputs=dict(inputs), ts_ms=ts_ms, attempt=attempt)
        delta_schema = DeltaSchema.from_json(json.dumps(table_schema.jsonValue()))
        with phase("commit"):
            outcome = commit_barrier_files(
                loc, files, tag=tag, mode="overwrite" if mode == "overwrite" else "append", schema=delta_schema,
                partition_by=partition_by, removes=removes, before_commit=fence,
            )
    except FencedError:
        _drop_unserved_attempt(loc, rel_dir, held)
        raise
    except Exception as exc:
        fenced = _fenced_now(fence)
        if fenced is None:
            raise
        _drop_unserved_attempt(loc, rel_dir, held)
        raise fenced from exc
    crash_point("after_commit", job_id, barrier)
    winner = attempt if outcome.committed else _committed_attempt(loc, barrier)
    if not outcome.committed:  # another attempt won the race: ours are orphans
        remove_orphan_attempts(loc, job_id, epoch, barrier, winner, held=held, before_delete=fence)

    # (g) WRITTEN, then the withdrawn attempts no reader can hold any more
    report_written(outcome.version, winner)
    if staging is not None:
        with phase("delta_log"):
            removed += collect_withdrawn(loc, table, staging, grace)
    return WriteResult(
        table,
        barrier,
        outcome.version,
        skipped=not outcome.committed,
        files=len(files) if outcome.committed else 0,
        rows=rows if outcome.committed else 0,
        orphans_removed=removed,
    )


@dataclass(frozen=True)
class _Staged:
    files: list[StagedFile]
    schema: StructType
    removed: list[RemovedFile]


def _report_processed(
    catalog: BarrierCatalog, table: str, barrier: int, job_id: str, mode: SinkMode,
    files: Sequence[StagedFile], removes: Sequence[RemovedFile],
) -> None:
    """PROCESSED with the manifest: ``append`` (staged files added to the previous version, minus
    a merge's ``removes``) or ``overwrite`` (staged files replace it)."""
    staged_mode = "overwrite" if mode == "overwrite" else "append"
    entries = [{**f.to_json(), "sink_mode": staged_mode} for f in files]
    if removes and isinstance(catalog, StagingCatalog):
        for entry in entries:
            entry.pop("sink_mode")
        manifest = {"mode": staged_mode, "files": entries, "removes": [r.path for r in removes]}
        catalog.record_processed(table, barrier, job_id, manifest)  # type: ignore[arg-type]
    else:
        catalog.record_processed(table, barrier, job_id, entries)


def _stage(
    spark: SparkSession, df: DataFrame, *, loc: str, rel_dir: str, dt: DeltaTable | None, mode: SinkMode,
    keys: Sequence[str], max_files: int | None, table: str, job_id: str, barrier: int,
    partition_by: Sequence[str], delete_when: str | None, declared_schema: str | None,
    compaction: Compaction | None = None,
) -> _Staged:
    """Steps c and d: the executors write the attempt's files, the driver reads their footers."""
    if mode == "merge" and not keys:
        raise ValueError(f"merge sink {table} needs key columns")
    if delete_when and mode != "merge":
        raise ValueError(f"sink {table}: delete_when needs mode 'merge', not {mode!r}")
    columns = df.columns  # one schema request (a Spark Connect round trip)
    missing = [c for c in [*keys, *partition_by] if c not in columns]
    if missing:
        raise SchemaChangeError(
            f"table {table}, barrier {barrier}: the output has no column(s) {missing} named in the sink's keys / "
            f"partition_by (output columns: {columns})"
        )
    flagged = _flag_deletes(df, delete_when, table, barrier) if mode == "merge" else None
    removed: list[RemovedFile] = []
    cached: DataFrame | None = None
    if dt is not None:
        check_partition_columns(table, loc, dt.metadata().partition_columns, partition_by)
        declared = spark.createDataFrame([], declared_schema).schema if declared_schema else None
        table_schema = evolve_schema(df.schema, spark_schema(dt), table=table, barrier=barrier, declared=declared)
        if mode == "overwrite":
            table_schema = _nullable(table_schema)
        out = _align_to_table(df, loc, table_schema)
        if flagged is not None:
            # read three times (key bounds, affected files, the write): computed once
            cached = flagged = _flag_deletes(out, delete_when, table, barrier).persist(StorageLevel.MEMORY_AND_DISK)
            try:  # one action: the keys' uniqueness and bounds; it fills the cache the plan reads
                summary = check_unique_keys(flagged, keys, table=table, barrier=barrier)
            except DuplicateKeyError:
                cached.unpersist()
                raise
            plan = plan_merge(spark, loc, dt.version(), flagged, keys, table_schema, summary)
            out, removed = plan.rows, plan.removed
    else:
        table_schema = _nullable(df.schema)
        out = df
        if flagged is not None:  # a new table: the deletes delete nothing
            check_unique_keys(flagged, keys, table=table, barrier=barrier)
            out = flagged.where(~F.col(DELETE_FLAG)).drop(DELETE_FLAG)
    if max_files:
        out = out.coalesce(max_files)
    fs, root = filesystem(loc)
    # "error" (errorifexists): the attempt directory is new; Spark Connect knows only this spelling
    writer = out.write.mode("error").option("compression", "snappy")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    try:
        with crash_point_during("while_writing", job_id, barrier, lambda: _has_any_file(fs, f"{root}/{rel_dir}")):
            with phase("spark"):
                writer.parquet(f"{loc}/{rel_dir}")
    finally:
        if cached is not None:
            cached.unpersist()
    with phase("footers"):
        files = _staged_files(loc, rel_dir, partition_by)
    if dt is not None and mode != "overwrite" and compaction is not None:
        adds, gone = _compact(spark, loc, rel_dir, dt.version(), table_schema, partition_by, compaction,
                              removed, files)
        files, removed = files + adds, removed + gone
    return _Staged(files, table_schema, removed)


def _compact(
    spark: SparkSession, loc: str, rel_dir: str, version: int, schema: StructType, partition_by: Sequence[str],
    options: Compaction, removed: Sequence[RemovedFile], staged: Sequence[StagedFile],
) -> tuple[list[StagedFile], list[RemovedFile]]:
    """Auto compaction (:mod:`airflow_provider_tsb.spark.outputs_compaction`): the executors
    rewrite the table's small files into the attempt directory (appended next to the barrier's
    own files); returns their ``dataChange = false`` adds and removes, or nothing."""
    with phase("delta_log"):
        snapshot = snapshot_at(loc, version)
        plan = plan_compaction(snapshot, options, exclude={r.path for r in removed})
    if not plan.files:
        return [], []
    writer = compacted_rows(spark, loc, snapshot, plan, schema, options).write.mode("append")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    with phase("spark"):
        writer.option("compression", "snappy").parquet(f"{loc}/{rel_dir}")
    known = {f.path for f in staged}
    with phase("footers"):
        written = [f for f in _staged_files(loc, rel_dir, partition_by) if f.path not in known]
    log.info("compacted %d small files (%d bytes) of %s into %d", len(plan.files), plan.bytes, loc, len(written))
    return rearranged(written, plan)


def _flag_deletes(df: DataFrame, delete_when: str | None, table: str, barrier: int) -> DataFrame:
    """:func:`split_deletes`, with a clear error for a condition Spark cannot resolve."""
    try:
        flagged = split_deletes(df, delete_when)
        if delete_when:
            flagged.schema  # noqa: B018 - analyzed now (Spark Connect analyzes lazily, at the first action)
        return flagged
    except AnalysisException as exc:
        raise ValueError(
            f"table {table}, barrier {barrier}: Sink(delete_when={delete_when!r}) is not a boolean condition "
            f"on the output's columns {df.columns}: {str(exc).splitlines()[0]}"
        ) from exc


def _fenced_now(fence: Callable[[], None]) -> FencedError | None:
    """The :class:`FencedError` of a failure caused by a newer attempt (e.g. it deleted our
    in-progress files), or ``None`` when this attempt is still the newest."""
    try:
        fence()
    except FencedError as exc:
        return exc
    except Exception:  # the metastore is down: the original error is the one to show
        return None
    return None
