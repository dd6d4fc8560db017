"""Stage one barrier's output DataFrame: the executors write its Parquet files into an attempt
directory, the driver reads their footers (steps c and d of the commit protocol of
:mod:`airflow_provider_tsb.spark.barrier_commit`, which calls :func:`stage_output`).

Modes (:class:`~airflow_provider_tsb.spark.write_options.WriteOptions`): ``append`` adds the
rows; ``overwrite`` replaces the table; ``merge`` upserts and deletes by key columns, rewriting
only the files that hold an affected key (their ``remove`` actions and the new files' ``add``
actions in the barrier's commit; see :mod:`airflow_provider_tsb.spark.outputs_merge`). A merge
without ``delete_when`` writes its output first and checks its keys on the written files
(:func:`_stage_upserts`), so it costs the output one Spark job, as an append does.
Partitioned sinks (``partition_by``) are written as Hive-style ``col=value/`` directories under
the attempt directory and committed with their partition values. A barrier's output may add
nullable columns (schema evolution, :mod:`airflow_provider_tsb.spark.outputs_schema`). With
``compaction`` the table's small files are rewritten next to the output
(:mod:`airflow_provider_tsb.spark.outputs_compaction`). The ``crash_point`` calls are a test
facility, inert unless ``TSB_KILL_AT`` is set (:mod:`airflow_provider_tsb.spark.killpoints`).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce

from deltalake import Schema as DeltaSchema
from pyarrow.fs import FileSelector, FileSystem, FileType
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from pyspark.storagelevel import StorageLevel

from airflow_provider_tsb.delta.commit import RemovedFile, StagedFile
from airflow_provider_tsb.delta.conventions import STAGING_DIR, staging_dir
from airflow_provider_tsb.delta.log import filesystem, normalize_location
from airflow_provider_tsb.delta.sink_log import SinkLog
from airflow_provider_tsb.delta.snapshots import Snapshot, snapshot_at
from airflow_provider_tsb.delta.stats import staged_files
from airflow_provider_tsb.exceptions import BarrierColumnError, DuplicateKeyError, SchemaChangeError
from airflow_provider_tsb.spark.frames import BARRIER_COLUMN, spark_schema
from airflow_provider_tsb.spark.killpoints import crash_point_during
from airflow_provider_tsb.spark.outputs_compaction import Compaction, compacted_rows, plan_compaction, rearranged
from airflow_provider_tsb.spark.outputs_merge import (
    DELETE_FLAG,
    KeySummary,
    affected_files,
    check_unique_keys,
    kept_rows,
    merge_rows,
    plan_merge,
    split_deletes,
    summarize_staged_keys,
)
from airflow_provider_tsb.spark.outputs_schema import (
    align_to_table,
    check_partition_columns,
    evolve_schema,
    nullable_schema,
)
from airflow_provider_tsb.spark.outputs_staging import (
    StagingCatalog,
    collect_withdrawn,
    has_any_file,
    remove_orphan_attempts,
    staging_grace_s,
)
from airflow_provider_tsb.spark.timing import phase
from airflow_provider_tsb.spark.write_options import SinkMode, WriteOptions, WriteTarget

__all__ = [
    "BARRIER_COLUMN", "STAGING_DIR", "SinkMode",
    "Staged", "StagingCatalog", "collect_withdrawn", "merge_rows", "remove_orphan_attempts", "stage_output",
    "stage_outputs", "staging_dir", "staging_grace_s", "tag_outputs",
]


@dataclass(frozen=True)
class Staged:
    """An attempt's staged output, ready to commit.

    Attributes:
        files: the data files written (a compaction's with ``data_change=False``).
        schema: the table's Spark schema after the barrier.
        removed: the table's files the commit removes (a merge's affected files, a compaction's
            small files).
        delta_schema: :attr:`schema` as a delta-rs schema (Delta schema JSON is Spark's).
    """

    files: list[StagedFile]
    schema: StructType
    removed: list[RemovedFile]
    delta_schema: DeltaSchema = field(repr=False, compare=False)

    @classmethod
    def of(cls, files: list[StagedFile], schema: StructType, removed: list[RemovedFile]) -> Staged:
        """The staged output with its :attr:`delta_schema` made from ``schema``."""
        return cls(files, schema, removed, DeltaSchema.from_json(json.dumps(schema.jsonValue())))


def stage_output(
    spark: SparkSession, df: DataFrame, target: WriteTarget, options: WriteOptions, log: SinkLog, rel_dir: str,
) -> Staged:
    """Write ``df`` (the barrier's output) into ``<table>/<rel_dir>`` on the executors and read the
    footers of its files on the driver.

    Args:
        log: the sink's log as the barrier started (the table's schema, partition columns and,
            for a merge, its files at :attr:`SinkLog.version`).
        rel_dir: the attempt directory, relative to the table root (new).

    Raises:
        SchemaChangeError: ``df`` lacks a key or partition column, drops a column of the table,
            changes a type, adds a ``NOT NULL`` column, or the partition columns differ.
        DuplicateKeyError: a ``merge`` output has several rows for one key (nothing reported or
            committed; an upserts-only merge's written files are deleted).
        ValueError: a ``delete_when`` Spark cannot resolve on the output.
    """
    columns = df.columns  # one schema request (a Spark Connect round trip)
    missing = [c for c in [*options.keys, *options.partition_by] if c not in columns]
    if missing:
        raise SchemaChangeError(
            f"table {target.table}, barrier {target.barrier}: the output has no column(s) {missing} named in the "
            f"sink's keys / partition_by (output columns: {columns})"
        )
    if options.mode == "merge" and not options.delete_when:
        schema, removed = _stage_upserts(spark, df, target, options, log, rel_dir)
        with phase("footers"):
            files = staged_files(log.location, rel_dir, options.partition_by)
    else:
        out, schema, removed, cached = _shape_output(spark, df, target, options, log)
        files = _write(out, target, options, log, rel_dir, cached=cached)
    if log.version is not None and options.mode != "overwrite" and options.compaction is not None:
        adds, gone = _compact(spark, log, rel_dir, schema, options, removed, files)
        files, removed = files + adds, removed + gone
    return Staged.of(files, schema, removed)


def tag_outputs(frames: Mapping[int, DataFrame]) -> DataFrame:
    """The union of several barriers' outputs ``{barrier: DataFrame}`` (by column name), each
    row tagged with its barrier in :data:`BARRIER_COLUMN`: :func:`stage_outputs`' input."""
    return reduce(lambda a, b: a.unionByName(b),
                  (frames[b].withColumn(BARRIER_COLUMN, F.lit(b)) for b in sorted(frames)))


def stage_outputs(
    spark: SparkSession, tagged: DataFrame, barriers: Sequence[int], target: WriteTarget, options: WriteOptions,
    log: SinkLog, rel_dirs: Mapping[int, str], group_dir: str,
) -> dict[int, Staged] | None:
    """Stage the outputs of several barriers of one ``append`` sink with one Spark job.

    The executors write the barriers' rows together, partitioned by :data:`BARRIER_COLUMN`,
    into ``<table>/<group_dir>``; each barrier's directory is then moved to its own attempt
    directory ``rel_dirs[barrier]``, so from there on every barrier is an attempt of its own
    (:func:`stage_output`'s result, committed by its own Delta commit). A barrier with no rows
    gets no file.

    Args:
        tagged: the barriers' rows for this sink, each with its barrier in
            :data:`BARRIER_COLUMN` (:func:`tag_outputs` of per-barrier outputs, or a
            micro-batch's output).
        barriers: the micro-batch's barriers, ascending.
        target: the write (its ``barrier`` names the first barrier in errors).
        log: the sink's log before the first barrier (the table exists).
        rel_dirs: ``{barrier: attempt directory}``, relative to the table root (new).
        group_dir: the directory the Spark job writes into, relative to the table root (new;
            deleted once its barriers' directories are moved out).

    With ``options.compaction``, the group's first barrier also carries the auto compaction
    planned on ``log``'s snapshot (the table before the group: its commit is made on that
    version), so a sink compacts at most once per group, with one more Spark job only when the
    table holds ``min_files`` small files.

    Returns ``{barrier: Staged}``, or ``None`` (nothing written) when the outputs cannot share a
    write: not an ``append`` sink, a new table, or outputs whose columns differ between the
    barriers (a schema change inside the group).

    Raises:
        SchemaChangeError: as :func:`stage_output`, for the outputs' common schema.
        BarrierColumnError: ``tagged`` has no :data:`BARRIER_COLUMN`, or rows whose value is
            not in ``barriers`` (null included); the group's files are deleted first.
    """
    if options.mode != "append" or log.table is None or not barriers:
        return None
    shaped = _shape_outputs(spark, tagged, min(barriers), target, options, log)
    if shaped is None:
        return None
    out, schema = shaped
    grouped = WriteOptions(mode="append", partition_by=(BARRIER_COLUMN, *options.partition_by),
                           max_files=options.max_files)
    _write(out, target, grouped, log, group_dir, list_files=False)
    fs, root = filesystem(log.location)
    _check_barrier_dirs(fs, f"{root}/{group_dir}", barriers, target)
    staged = {b: Staged.of(_move_out(fs, log.location, group_dir, b, rel_dirs[b], options), schema, [])
              for b in barriers}
    fs.delete_dir(f"{root}/{group_dir}")
    if options.compaction is not None:
        first = min(barriers)
        adds, gone = _compact(spark, log, rel_dirs[first], schema, options, [], staged[first].files)
        staged[first] = Staged.of(staged[first].files + adds, schema, gone)
    return staged


def _move_out(fs: FileSystem, location: str, group_dir: str, barrier: int, rel_dir: str,
              options: WriteOptions) -> list[StagedFile]:
    """Move ``barrier``'s directory of the group's write to its attempt directory ``rel_dir``
    (an empty one when it has no row) and read its files' footers."""
    _, root = filesystem(location)
    src, dst = f"{root}/{group_dir}/{BARRIER_COLUMN}={barrier}", f"{root}/{rel_dir}"
    fs.create_dir(posixpath.dirname(dst), recursive=True)
    if fs.get_file_info(src).type == FileType.Directory:
        fs.move(src, dst)
    else:  # no row: no file
        fs.create_dir(dst, recursive=True)
    with phase("footers"):
        return staged_files(location, rel_dir, options.partition_by)


def _check_barrier_dirs(fs: FileSystem, group_root: str, barriers: Sequence[int], target: WriteTarget) -> None:
    """Raise :class:`BarrierColumnError` (after deleting ``group_root``) when the group's write
    made a ``_tsb_barrier=<value>`` directory for a value outside ``barriers``."""
    wanted = {f"{BARRIER_COLUMN}={b}" for b in barriers}
    found = [posixpath.basename(i.path) for i in fs.get_file_info(FileSelector(group_root, allow_not_found=True))
             if i.type == FileType.Directory and posixpath.basename(i.path).startswith(f"{BARRIER_COLUMN}=")]
    stray = sorted(name.split("=", 1)[1] for name in found if name not in wanted)
    if stray:
        fs.delete_dir(group_root)
        values = ["null" if v == "__HIVE_DEFAULT_PARTITION__" else v for v in stray]
        raise BarrierColumnError(
            f"job {target.job_id}, table {target.table}: the micro-batch of barriers {min(barriers)}-{max(barriers)} "
            f"has output rows whose {BARRIER_COLUMN} is {', '.join(values)}, not one of its barriers "
            f"{list(barriers)}: keep the {BARRIER_COLUMN} column of ctx.changes(...) on every output row "
            "(nothing of the micro-batch was committed)"
        )


def _shape_outputs(
    spark: SparkSession, tagged: DataFrame, first: int, target: WriteTarget, options: WriteOptions, log: SinkLog,
) -> tuple[DataFrame, StructType] | None:
    """The barriers' rows in the table's schema after them, with :data:`BARRIER_COLUMN`, and
    that schema; ``None`` when they cannot share a write (the union's columns differ between
    barriers, or the table has a column of that name)."""
    try:  # one schema request for all: columns that differ between the barriers fail here
        all_fields = tagged.schema.fields
    except AnalysisException:
        return None
    if BARRIER_COLUMN not in {f.name for f in all_fields}:
        raise BarrierColumnError(
            f"job {target.job_id}, table {target.table}: the micro-batch's output (barriers from {first}) has no "
            f"{BARRIER_COLUMN} column (columns: {[f.name for f in all_fields]}): keep the {BARRIER_COLUMN} column "
            "of ctx.changes(...) on every output row (nothing of the micro-batch was committed)"
        )
    fields = [f for f in all_fields if f.name != BARRIER_COLUMN]
    missing = [c for c in options.partition_by if c not in {f.name for f in fields}]
    if missing or BARRIER_COLUMN in spark_schema(log.table).fieldNames():
        return None  # stage_output gives the error, or writes the column
    check_partition_columns(target.table, log.location, log.table.metadata().partition_columns, options.partition_by)
    declared = spark.createDataFrame([], options.schema).schema if options.schema else None
    schema = evolve_schema(StructType(fields), spark_schema(log.table), table=target.table, barrier=first,
                           declared=declared)
    types = {f.name: f.dataType for f in fields}
    out = tagged.select(*[F.col(f.name) if types[f.name] == f.dataType else F.col(f.name).cast(f.dataType).alias(f.name)
                          for f in schema.fields], F.col(BARRIER_COLUMN).cast("long").alias(BARRIER_COLUMN))
    return out, schema


def _write(
    out: DataFrame, target: WriteTarget, options: WriteOptions, log: SinkLog, rel_dir: str, *,
    cached: DataFrame | None = None, append: bool = False, list_files: bool = True,
) -> list[StagedFile]:
    """The executors write ``out`` (coalesced to ``max_files``) into the attempt directory; the
    driver reads the footers of its files. ``cached``: a persisted frame to release after the
    write; ``append``: the directory holds an earlier write already (else it is new);
    ``list_files=False``: the caller reads the footers (returns ``[]``)."""
    if options.max_files:
        out = out.coalesce(options.max_files)
    fs, root = filesystem(log.location)
    # "error" (errorifexists): the attempt directory is new; Spark Connect knows only this spelling
    writer = out.write.mode("append" if append else "error").option("compression", "snappy")
    if options.partition_by:
        writer = writer.partitionBy(*options.partition_by)
    try:
        with crash_point_during("while_writing", target.job_id, target.barrier,
                                lambda: has_any_file(fs, f"{root}/{rel_dir}")):
            with phase("spark"):
                writer.parquet(f"{log.location}/{rel_dir}")
    finally:
        if cached is not None:
            cached.unpersist()
    if not list_files:
        return []
    with phase("footers"):
        return staged_files(log.location, rel_dir, options.partition_by)


def aligned_output(
    spark: SparkSession, df: DataFrame, target: WriteTarget, options: WriteOptions, log: SinkLog,
) -> tuple[DataFrame, StructType]:
    """``df`` in the table's schema after the barrier (checked against the table's), and that
    schema; a new table's is ``df``'s, nullable.

    Raises:
        SchemaChangeError: ``df`` drops a column of the table, changes a type, adds a ``NOT NULL``
            column, or ``partition_by`` differs from the table's.
    """
    if log.table is None:
        return df, nullable_schema(df.schema)
    table_schema = spark_schema(log.table)
    declared = spark.createDataFrame([], options.schema).schema if options.schema else None
    check_partition_columns(target.table, log.location, log.table.metadata().partition_columns, options.partition_by)
    schema = evolve_schema(df.schema, table_schema, table=target.table, barrier=target.barrier, declared=declared)
    if options.mode == "overwrite":
        schema = nullable_schema(schema)
    return align_to_table(df, log.location, schema), schema


def _stage_upserts(
    spark: SparkSession, df: DataFrame, target: WriteTarget, options: WriteOptions, log: SinkLog, rel_dir: str,
) -> tuple[StructType, list[RemovedFile]]:
    """A merge without ``delete_when``, in one pass over the output: the executors write it
    straight from its plan (no cache, no separate action before), then its keys are checked
    for uniqueness on the written files (:func:`_check_staged_keys`; a duplicate deletes the
    attempt directory before anything is reported or committed), and the table's files holding
    one of its keys are found (:func:`affected_files`: on the driver when the keys are few) and
    their other rows written next to it (a second write, only when such files exist). Returns
    the table's schema after the barrier and the files the commit removes; the caller reads the
    footers of everything written."""
    out, schema = aligned_output(spark, df, target, options, log)
    _write(out, target, options, log, rel_dir, list_files=False)
    staged = _staged_rows(spark, log.location, rel_dir, schema)
    summary = _check_staged_keys(staged, target, options, log, rel_dir)
    if log.table is None:
        return schema, []
    snapshot = sink_snapshot(log)
    if snapshot.add_actions.num_rows == 0:
        return schema, []
    update_keys = staged.select(*options.keys)
    affected, _, _ = affected_files(spark, log.location, snapshot, update_keys, options.keys, summary.bounds,
                                    output_keys=summary.rows)
    kept = kept_rows(spark, log.location, snapshot, affected, update_keys, options.keys, schema)
    if kept is None:
        return schema, []
    _write(kept[0], target, options, log, rel_dir, append=True, list_files=False)
    return schema, kept[1]


def _check_staged_keys(staged: DataFrame, target: WriteTarget, options: WriteOptions, log: SinkLog, rel_dir: str,
                       ) -> KeySummary:
    """The written output's :class:`KeySummary`, on the driver when it is small
    (:func:`summarize_staged_keys`), else one Spark action over ``staged`` (its rows).

    Raises:
        DuplicateKeyError: two rows of the output share a key; the attempt directory is deleted.
    """
    fs, root = filesystem(log.location)
    try:
        summary = summarize_staged_keys(fs, f"{root}/{rel_dir}", options.keys, options.partition_by,
                                        table=target.table, barrier=target.barrier)
        if summary is None:
            summary = check_unique_keys(staged, options.keys, table=target.table, barrier=target.barrier)
    except DuplicateKeyError:
        fs.delete_dir(f"{root}/{rel_dir}")
        raise
    return summary


def _staged_rows(spark: SparkSession, location: str, rel_dir: str, schema: StructType) -> DataFrame:
    """The rows written into the attempt directory so far (lazy), in ``schema``: Spark reads the
    directory (``col=value/`` partition directories included, ``_SUCCESS`` and ``.crc`` files
    skipped as Spark's own)."""
    path = f"{normalize_location(location)}/{rel_dir}"
    return spark.read.schema(schema).option("basePath", path).parquet(path).select(*schema.fieldNames())


def _shape_output(
    spark: SparkSession, df: DataFrame, target: WriteTarget, options: WriteOptions, log: SinkLog,
) -> tuple[DataFrame, StructType, list[RemovedFile], DataFrame | None]:
    """The rows to write in the table's schema after the barrier, the files a merge removes, and
    the persisted output to release after the write (``None``: nothing persisted). A merge here
    has a ``delete_when`` (the others: :func:`_stage_upserts`)."""
    merge = options.mode == "merge"
    if log.table is None and merge:  # a new table: the deletes delete nothing
        flagged = _flag_deletes(df, options.delete_when, target)
        check_unique_keys(flagged, options.keys, table=target.table, barrier=target.barrier)
        return flagged.where(~F.col(DELETE_FLAG)).drop(DELETE_FLAG), nullable_schema(df.schema), [], None
    out, schema = aligned_output(spark, df, target, options, log)
    if not merge or log.table is None:
        return out, schema, [], None
    # read three times (key bounds, affected files, the write): computed once
    cached = _flag_deletes(out, options.delete_when, target).persist(StorageLevel.MEMORY_AND_DISK)
    try:  # one action: the keys' uniqueness and bounds; it fills the cache the plan reads
        summary = check_unique_keys(cached, options.keys, table=target.table, barrier=target.barrier)
    except DuplicateKeyError:
        cached.unpersist()
        raise
    plan = plan_merge(spark, sink_snapshot(log), cached, options.keys, schema, summary)
    return plan.rows, schema, plan.removed, cached


def _compact(
    spark: SparkSession, log: SinkLog, rel_dir: str, schema: StructType, options: WriteOptions,
    removed: Sequence[RemovedFile], staged: Sequence[StagedFile],
) -> tuple[list[StagedFile], list[RemovedFile]]:
    """Auto compaction (:mod:`airflow_provider_tsb.spark.outputs_compaction`): the executors
    rewrite the table's small files into the attempt directory (appended next to the barrier's
    own files); returns their ``dataChange = false`` adds and removes, or nothing."""
    compaction: Compaction = options.compaction  # type: ignore[assignment]
    snapshot = sink_snapshot(log)
    plan = plan_compaction(snapshot, compaction, exclude={r.path for r in removed})
    if not plan.files:
        return [], []
    writer = compacted_rows(spark, log.location, snapshot, plan, schema, compaction).write.mode("append")
    if options.partition_by:
        writer = writer.partitionBy(*options.partition_by)
    with phase("spark"):
        writer.option("compression", "snappy").parquet(f"{log.location}/{rel_dir}")
    known = {f.path for f in staged}
    with phase("footers"):
        written = [f for f in staged_files(log.location, rel_dir, options.partition_by) if f.path not in known]
    return rearranged(written, plan)


def sink_snapshot(log: SinkLog) -> Snapshot:
    """The sink's table at :attr:`SinkLog.version`: the snapshot the log was read with (a merge or
    compaction sink's, :func:`~airflow_provider_tsb.spark.runner.read_sink_logs`), else loaded."""
    if log.snapshot is not None:
        return log.snapshot
    with phase("delta_log"):
        return snapshot_at(log.location, int(log.version or 0))


def _flag_deletes(df: DataFrame, delete_when: str | None, target: WriteTarget) -> DataFrame:
    """:func:`split_deletes`, with a clear error for a condition Spark cannot resolve."""
    try:
        flagged = split_deletes(df, delete_when)
        if delete_when:
            flagged.schema  # noqa: B018 - analyzed now (Spark Connect analyzes lazily, at the first action)
        return flagged
    except AnalysisException as exc:
        raise ValueError(
            f"table {target.table}, barrier {target.barrier}: Sink(delete_when={delete_when!r}) is not a boolean "
            f"condition on the output's columns {df.columns}: {str(exc).splitlines()[0]}"
        ) from exc
