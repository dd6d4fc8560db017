"""Commit one barrier's output DataFrame to one sink table, exactly once.

Protocol of :func:`write_barrier` (one sink, one barrier):

a. barrier already committed (epoch-scoped txn) -> remove orphan attempts, re-report
   WRITTEN, return the existing version (replay discarded);
b. remove orphan staging directories of earlier failed attempts of this (job, barrier);
c. executors write Parquet files into ``<table>/tsb_staging/<job>/<epoch>/<barrier>/<attempt>/``
   (a non-hidden directory, so that ``vacuum`` can expire the files once they are removed
   from the table; the Delta ``add`` paths are relative to the table root);
d. the driver reads only the footers of those files (size, row count, stats);
e. PROCESSED is reported with the staged-file manifest;
f. one delta-rs commit with the txn and the barrier metadata;
g. WRITTEN is reported with the new version.

Modes: ``append`` adds the rows; ``overwrite`` replaces the table; ``merge`` upserts by key
columns: new state = current rows whose key is not in the update, plus the update rows,
implemented as a full rewrite through ``overwrite`` (the old files are removed logically,
kept for time travel). Sinks are unpartitioned. The ``crash_point`` calls are a test facility,
inert unless ``TSB_KILL_AT`` is set (:mod:`airflow_provider_tsb.spark.killpoints`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import pyarrow.fs as pafs
from deltalake import Schema as DeltaSchema
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from airflow_provider_tsb.delta.barriers import committed_barrier, table_epoch, version_of_barrier
from airflow_provider_tsb.delta.commit import StagedFile, commit_barrier_files
from airflow_provider_tsb.delta.conventions import BarrierTag, parse_tag
from airflow_provider_tsb.delta.log import commit_info, filesystem, normalize_location
from airflow_provider_tsb.delta.snapshots import latest_table_or_none
from airflow_provider_tsb.delta.stats import footer_stats
from airflow_provider_tsb.spark.inputs import read_snapshot, spark_schema
from airflow_provider_tsb.spark.killpoints import crash_point, crash_point_during
from airflow_provider_tsb.spark.timing import phase

if TYPE_CHECKING:
    from airflow_provider_tsb.spark.catalog import BarrierCatalog

SinkMode = Literal["append", "overwrite", "merge"]
STAGING_DIR = "tsb_staging"


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


def staging_dir(job_id: str, epoch: int, barrier: int) -> str:
    """Directory (relative to the table root) holding all attempts of (job, epoch, barrier)."""
    return f"{STAGING_DIR}/{job_id}/{epoch}/{barrier}"


def _committed_attempt(location: str, barrier: int) -> str | None:
    version = version_of_barrier(location, barrier)
    if version is None:
        return None
    tag = parse_tag(commit_info(location, version))
    return tag.attempt if tag else None


def remove_orphan_attempts(location: str, job_id: str, epoch: int, barrier: int, keep: str | None) -> int:
    """Delete every attempt directory of (job, epoch, barrier) except ``keep``.

    Only the current epoch's directory is touched: files of an earlier epoch may still be
    referenced by undone versions and are left to ``vacuum``. Returns the number deleted.
    """
    fs, root = filesystem(location)
    base = f"{root}/{staging_dir(job_id, epoch, barrier)}"
    info = fs.get_file_info(base)
    if info.type != pafs.FileType.Directory:
        return 0
    removed = 0
    for entry in fs.get_file_info(pafs.FileSelector(base, recursive=False)):
        if entry.type == pafs.FileType.Directory and entry.base_name != keep:
            fs.delete_dir(entry.path)
            removed += 1
    return removed


def _nullable(schema: StructType) -> StructType:
    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])


def _align_to_table(df: DataFrame, location: str, table_schema: StructType) -> DataFrame:
    missing = [f.name for f in table_schema.fields if f.name not in df.columns]
    extra = [c for c in df.columns if c not in table_schema.fieldNames()]
    if missing or extra:
        raise ValueError(
            f"output for {location!r} does not match the table schema: missing columns {missing}, "
            f"unexpected columns {extra} (schema evolution is not supported)"
        )
    actual = {f.name: f.dataType for f in df.schema.fields}
    if [f.name for f in df.schema.fields] == table_schema.fieldNames() and all(
        actual[f.name] == f.dataType for f in table_schema.fields
    ):
        return df  # already the table's columns and types: no projection (saves driver round trips)
    return df.select(
        *[
            F.col(f.name) if actual[f.name] == f.dataType else F.col(f.name).cast(f.dataType).alias(f.name)
            for f in table_schema.fields
        ]
    )


def merge_rows(current: DataFrame, update: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Upsert: rows of ``current`` whose key is not in ``update``, plus all ``update`` rows."""
    if not keys:
        raise ValueError("merge mode needs key columns")
    update_keys = update.select(*keys).distinct()
    kept = current.join(update_keys, on=list(keys), how="left_anti")
    return kept.unionByName(update.select(*current.columns))


def _list_data_files(fs: pafs.FileSystem, directory: str) -> list[pafs.FileInfo]:
    entries = fs.get_file_info(pafs.FileSelector(directory, recursive=False, allow_not_found=True))
    files = []
    for entry in entries:
        if entry.type != pafs.FileType.File:
            continue
        if entry.base_name.endswith(".parquet") and not entry.base_name.startswith((".", "_")):
            files.append(entry)
        else:  # _SUCCESS, .crc checksums: not data, never referenced
            fs.delete_file(entry.path)
    return sorted(files, key=lambda e: e.base_name)


def _staged_files(location: str, rel_dir: str) -> list[StagedFile]:
    fs, root = filesystem(location)
    infos = _list_data_files(fs, f"{root}/{rel_dir}")

    def one(info: pafs.FileInfo) -> StagedFile:
        num, stats = footer_stats(fs, info.path)
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime else int(time.time() * 1000)
        return StagedFile(f"{rel_dir}/{info.base_name}", int(info.size), mtime, num, stats)

    if len(infos) <= 1:
        return [one(i) for i in infos]
    with ThreadPoolExecutor(max_workers=min(8, len(infos))) as pool:
        return list(pool.map(one, infos))


def _has_any_file(fs: pafs.FileSystem, directory: str) -> bool:
    entries = fs.get_file_info(pafs.FileSelector(directory, recursive=True, allow_not_found=True))
    return any(e.type == pafs.FileType.File and "part-" in e.base_name for e in entries)


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

    Raises:
        ValueError: bad mode/keys, or ``df`` does not match the existing table's columns.
        deltalake.exceptions.CommitFailedError: a concurrent writer conflicted.
    """
    if mode not in ("append", "overwrite", "merge"):
        raise ValueError(f"unknown sink mode {mode!r} for {table}: use append, overwrite or merge")
    loc = normalize_location(location)
    with phase("delta_log"):
        dt = latest_table_or_none(loc)  # cached, advanced to the newest commit on disk
        state = table_epoch(loc, table=dt) if dt is not None else None
        epoch = state.epoch if state is not None else 0
        # (a) exactly-once on replay
        done = committed_barrier(loc, job_id, table=dt, epoch=state) if dt is not None else None
    if done is not None and barrier <= done:
        with phase("delta_log"):
            removed = remove_orphan_attempts(loc, job_id, epoch, barrier, _committed_attempt(loc, barrier))
            version = version_of_barrier(loc, barrier)
            if version is None:
                version = dt.version()  # type: ignore[union-attr]
        if catalog is not None:
            catalog.record_written(table, barrier, version, job_id)
        return WriteResult(table, barrier, version, skipped=True, orphans_removed=removed)

    # (b) orphans of failed attempts (nothing of this barrier is committed in this epoch)
    with phase("delta_log"):
        removed = remove_orphan_attempts(loc, job_id, epoch, barrier, keep=None)

    # prepare the frame to write
    if dt is not None:
        table_schema = spark_schema(dt)
        out = _align_to_table(df, loc, table_schema)
        if mode == "merge":
            current = read_snapshot(spark, loc, dt.version())
            out = merge_rows(current, out, keys)
    else:
        table_schema = _nullable(df.schema)
        out = df
        if mode == "merge" and not keys:
            raise ValueError(f"merge sink {table} needs key columns")
    if max_files:
        out = out.coalesce(max_files)

    # (c) executors write the files into a fresh attempt directory
    attempt = uuid.uuid4().hex
    rel_dir = f"{staging_dir(job_id, epoch, barrier)}/{attempt}"
    fs, root = filesystem(loc)
    abs_dir = f"{loc}/{rel_dir}"
    with crash_point_during("while_writing", job_id, barrier, lambda: _has_any_file(fs, f"{root}/{rel_dir}")):
        with phase("spark"):
            out.write.mode("errorifexists").option("compression", "snappy").parquet(abs_dir)

    # (d) footers only
    with phase("footers"):
        files = _staged_files(loc, rel_dir)
    rows = sum(f.num_records for f in files)

    # (e) PROCESSED with the manifest, before the commit
    if catalog is not None:
        staged_mode = "append" if mode == "append" else "overwrite"  # merge rewrites: staged files replace
        catalog.record_processed(table, barrier, job_id, [{**f.to_json(), "sink_mode": staged_mode} for f in files])
    crash_point("after_files", job_id, barrier)

    # (f) one atomic commit
    tag = BarrierTag(barrier=barrier, job_id=job_id, inputs=dict(inputs), ts_ms=ts_ms, attempt=attempt)
    delta_schema = DeltaSchema.from_json(json.dumps(table_schema.jsonValue()))
    with phase("commit"):
        outcome = commit_barrier_files(
            loc, files, tag=tag, mode="append" if mode == "append" else "overwrite", schema=delta_schema
        )
    crash_point("after_commit", job_id, barrier)
    if not outcome.committed:  # another attempt won the race: ours are orphans
        remove_orphan_attempts(loc, job_id, epoch, barrier, _committed_attempt(loc, barrier))

    # (g) WRITTEN
    if catalog is not None:
        catalog.record_written(table, barrier, outcome.version, job_id)
    return WriteResult(
        table,
        barrier,
        outcome.version,
        skipped=not outcome.committed,
        files=len(files) if outcome.committed else 0,
        rows=rows if outcome.committed else 0,
        orphans_removed=removed,
    )
