"""Delta's own Spark writer commits a barrier (``WriteOptions.writer == "delta"``).

The barrier's output goes to the sink in one Delta transaction of Delta's own connector
(delta-spark), made idempotent by Delta's application transaction (Delta protocol "Transaction
Identifiers"): ``txnAppId`` = the job's epoch-scoped app id
(:func:`~airflow_provider_tsb.delta.conventions.app_id`), ``txnVersion`` = the barrier. Delta
skips a write whose ``txnVersion`` is not above the table's recorded one, so a replayed barrier,
or a second attempt racing the first, adds no version: exactly once across kills and retries.
The barrier tag (:class:`~airflow_provider_tsb.delta.conventions.BarrierTag`, with the attempt id)
goes in the commit's ``userMetadata``, where ``DESCRIBE HISTORY``, ``tsb db rebuild`` and the
readers find it.

* ``append`` and ``overwrite``: ``df.write.format("delta")`` with the ``txnAppId``,
  ``txnVersion`` and ``userMetadata`` writer options; new nullable columns by ``mergeSchema``.
* ``merge``: ``MERGE INTO`` on the output (a temporary view) by the key columns, null-safe,
  ``delete_when`` rows deleting their key, new columns added first by ``ALTER TABLE ... ADD
  COLUMNS`` (a schema-only commit without a tag), with the session settings
  ``spark.databricks.delta.write.txnAppId`` / ``txnVersion`` and
  ``spark.databricks.delta.commitInfo.userMetadata`` (set for the one statement, then unset).
* ``compaction``: once the table holds ``min_files`` files under ``target_bytes``, Delta's
  ``OPTIMIZE`` after the barrier's commit (a ``dataChange=false`` commit without a tag: readers
  and downstream jobs see no new data).

What differs from the ``staged`` writer (:mod:`~airflow_provider_tsb.spark.barrier_commit`):
Delta writes and commits in one call, so no staged-file manifest exists before the commit and
PROCESSED is not reported: READ_COMMITTED reads such a sink at its WRITTEN barriers (FLIP-276
PRECOMMIT holds a barrier WRITTEN in every table too). The fencing token is checked right before
the write, as the staged writer checks it right before its commit. The commit carries no
``tsb.files`` / ``tsb.digest`` (Delta takes no other ``commitInfo`` keys): WRITTEN records the
version's live-file figures, read from the log right after the commit, in the metastore
(:meth:`~airflow_provider_tsb.metastore.table_states.TableStateManager.record_written`), and readers
verify the files' count and bytes against them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField

from airflow_provider_tsb.delta.conventions import app_id
from airflow_provider_tsb.delta.log import filesystem
from airflow_provider_tsb.delta.sink_log import SinkLog
from airflow_provider_tsb.exceptions import DeltaWriteError, SchemaChangeError
from airflow_provider_tsb.spark.frames import spark_schema
from airflow_provider_tsb.spark.killpoints import crash_point, crash_point_during
from airflow_provider_tsb.spark.outputs import aligned_output
from airflow_provider_tsb.spark.outputs_compaction import plan_compaction
from airflow_provider_tsb.spark.outputs_merge import check_unique_keys
from airflow_provider_tsb.spark.outputs_staging import has_any_file
from airflow_provider_tsb.spark.timing import phase
from airflow_provider_tsb.spark.write_options import WriteOptions, WriteTarget

__all__ = ["DeltaCommit", "write_with_delta"]

#: Delta's session settings of an idempotent write (the SQL and ``MERGE`` form of the options)
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
#: the output column a ``MERGE`` reads ``delete_when`` from (never written to the table)
DELETE_FLAG = "__tsb_delete"


@dataclass(frozen=True)
class DeltaCommit:
    """The outcome of :func:`write_with_delta`.

    Attributes:
        version: the Delta version that holds the barrier.
        committed: whether this attempt's write made that commit (``False``: another attempt
            of the job committed the barrier first, and Delta skipped this write).
        attempt: the attempt id in the holding commit's tag.
    """

    version: int
    committed: bool
    attempt: str | None


def write_with_delta(
    spark: SparkSession, df: DataFrame, target: WriteTarget, options: WriteOptions, log: SinkLog,
    attempt: str, fence: Callable[[], None],
) -> DeltaCommit:
    """Commit ``df`` as barrier ``target.barrier`` into the sink with Delta's own writer (module doc).

    Args:
        df: the barrier's output (for ``merge``: the upserted and deleted rows, one per key).
        log: the sink's log read when the barrier started (schema, partition columns, epoch).
        attempt: this attempt's id (recorded in the tag).
        fence: raises :class:`~airflow_provider_tsb.exceptions.FencedError` when a newer attempt
            of the job started; called right before the write.

    Raises:
        SchemaChangeError: ``df`` lacks a key or partition column, drops a column of the table,
            changes a type, adds a ``NOT NULL`` column, or ``partition_by`` differs.
        DuplicateKeyError: a ``merge`` output has several rows for one key (nothing written).
        FencedError: a newer attempt of the job started (nothing written).
        DeltaWriteError: the table does not hold the barrier after Delta's write.
    """
    columns = df.columns
    missing = [c for c in [*options.keys, *options.partition_by] if c not in columns]
    if missing:
        raise SchemaChangeError(
            f"table {target.table}, barrier {target.barrier}: the output has no column(s) {missing} named in the "
            f"sink's keys / partition_by (output columns: {columns})"
        )
    out, schema = aligned_output(spark, df, target, options, log)
    if options.mode == "merge":
        check_unique_keys(out, options.keys, table=target.table, barrier=target.barrier)
    if options.max_files:
        out = out.coalesce(options.max_files)
    tag = target.tag(attempt)
    txn = (app_id(target.job_id, log.epoch.epoch), target.barrier)
    fence()  # a zombie writes nothing
    fs, root = filesystem(target.location)
    with crash_point_during("while_writing", target.job_id, target.barrier, lambda: has_any_file(fs, root)):
        with phase("spark"):
            if options.mode == "merge" and log.table is not None:
                known = set(spark_schema(log.table).fieldNames())
                new_columns = [f for f in schema.fields if f.name not in known]
                _merge(spark, out, target, options, txn, tag.user_metadata(), new_columns)
            else:
                _write(out, target, options, txn, tag.user_metadata(), create=log.table is None)
    crash_point("after_files", target.job_id, target.barrier)
    with phase("delta_log"):
        after = SinkLog.read(target.location, target.job_id, barrier=target.barrier)
    if not after.holds_barrier or after.barrier_version is None:
        raise DeltaWriteError(
            f"table {target.table}: Delta's writer returned, but the table at {target.location!r} does not hold "
            f"barrier {target.barrier} of job {target.job_id} (newest version {after.version}); nothing was "
            "reported WRITTEN: check the table's history (DESCRIBE HISTORY) and rerun the job"
        )
    if options.compaction is not None:
        _compact(spark, target, options)
    return DeltaCommit(after.barrier_version, after.barrier_attempt == attempt, after.barrier_attempt)


def _write(out: DataFrame, target: WriteTarget, options: WriteOptions, txn: tuple[str, int], metadata: str, *,
           create: bool) -> None:
    """``append`` / ``overwrite`` (and a ``merge`` sink's first barrier, which creates the table)."""
    mode = "overwrite" if options.mode == "overwrite" else "append"
    if options.mode == "merge" and options.delete_when:  # a new table: the deletions have nothing to delete
        out = out.where(~F.coalesce(F.expr(f"({options.delete_when})"), F.lit(False)))
    writer = (out.write.format("delta").mode(mode).option("txnAppId", txn[0]).option("txnVersion", txn[1])
              .option("userMetadata", metadata).option("mergeSchema", "true"))
    if options.partition_by and create:
        writer = writer.partitionBy(*options.partition_by)
    writer.save(target.location)


def _merge(spark: SparkSession, out: DataFrame, target: WriteTarget, options: WriteOptions, txn: tuple[str, int],
           metadata: str, new_columns: list[StructField]) -> None:
    """``MERGE INTO`` the sink by its keys (null-safe), in the barrier's idempotent transaction.

    The output's new columns are added first (``ALTER TABLE ... ADD COLUMNS``, a schema-only
    commit without a tag, as the staged writer makes one), so the ``MERGE`` names its columns:
    the ``delete_when`` flag it reads from the output is never a column of the table."""
    if new_columns:
        added = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in new_columns)
        spark.sql(f"ALTER TABLE delta.`{target.location}` ADD COLUMNS ({added})")
    view, columns = f"tsb_merge_{uuid.uuid4().hex}", out.columns
    on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in options.keys)
    update = "UPDATE SET " + ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)
    insert = f"INSERT ({', '.join(f'`{c}`' for c in columns)}) VALUES ({', '.join(f's.`{c}`' for c in columns)})"
    clauses = [f"WHEN MATCHED THEN {update}", f"WHEN NOT MATCHED THEN {insert}"]
    if options.delete_when:
        out = out.withColumn(DELETE_FLAG, F.coalesce(F.expr(f"({options.delete_when})"), F.lit(False)))
        clauses = [f"WHEN MATCHED AND s.{DELETE_FLAG} THEN DELETE", f"WHEN MATCHED THEN {update}",
                   f"WHEN NOT MATCHED AND NOT s.{DELETE_FLAG} THEN {insert}"]
    out.createOrReplaceTempView(view)
    settings = {TXN_APP_ID: txn[0], TXN_VERSION: str(txn[1]), USER_METADATA: metadata}
    try:
        with session_settings(spark, settings):
            spark.sql(f"MERGE INTO delta.`{target.location}` AS t USING {view} AS s ON {on} {' '.join(clauses)}")
    finally:
        spark.catalog.dropTempView(view)


def _compact(spark: SparkSession, target: WriteTarget, options: WriteOptions) -> None:
    """Delta's ``OPTIMIZE`` once the table holds ``compaction.min_files`` small files."""
    log = SinkLog.read(target.location, target.job_id, snapshot=True)
    if log.snapshot is None or not plan_compaction(log.snapshot, options.compaction).files:
        return
    size = options.compaction.target_bytes if options.compaction is not None else None
    with phase("compaction"), session_settings(spark, {"spark.databricks.delta.optimize.maxFileSize": str(size)}):
        spark.sql(f"OPTIMIZE delta.`{target.location}`")


@contextmanager
def session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set Spark SQL ``settings`` for a block, then restore what was there (unset when unset)."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
