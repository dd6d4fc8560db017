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

Modes: ``append`` adds the rows; ``overwrite`` replaces the table; ``merge`` upserts by key
columns: new state = current rows whose key is not in the update, plus the update rows,
implemented as a full rewrite through ``overwrite`` (the old files are removed logically,
kept for time travel). Sinks are unpartitioned. The ``crash_point`` calls are a test facility,
inert unless ``TSB_KILL_AT`` is set (:mod:`airflow_provider_tsb.spark.killpoints`).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

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
from airflow_provider_tsb.exceptions import FencedError
from airflow_provider_tsb.spark.inputs import read_snapshot, spark_schema
from airflow_provider_tsb.spark.killpoints import crash_point, crash_point_during
from airflow_provider_tsb.spark.timing import phase

if TYPE_CHECKING:
    from airflow_provider_tsb.spark.catalog import BarrierCatalog

SinkMode = Literal["append", "overwrite", "merge"]
STAGING_DIR = "tsb_staging"
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
    for entry in doomed:
        fs.delete_dir(entry.path)
    return len(doomed)


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
        ValueError: bad mode/keys, or ``df`` does not match the existing table's columns, or
            ``$TSB_STAGING_GRACE_SECONDS`` is not a number of seconds >= 0.
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
        files, table_schema = _stage(
            spark, df, loc=loc, rel_dir=rel_dir, dt=dt, mode=mode, keys=keys, max_files=max_files,
            table=table, job_id=job_id, barrier=barrier,
        )
        rows = sum(f.num_records for f in files)
        # (e) PROCESSED with the manifest, before the commit
        if catalog is not None:
            staged_mode = "append" if mode == "append" else "overwrite"  # merge rewrites: staged files replace
            manifest = [{**f.to_json(), "sink_mode": staged_mode} for f in files]
            catalog.record_processed(table, barrier, job_id, manifest)
        crash_point("after_files", job_id, barrier)

        # (f) one atomic commit, by the job's newest attempt only
        tag = BarrierTag(barrier=barrier, job_id=job_id, inputs=dict(inputs), ts_ms=ts_ms, attempt=attempt)
        delta_schema = DeltaSchema.from_json(json.dumps(table_schema.jsonValue()))
        with phase("commit"):
            outcome = commit_barrier_files(
                loc, files, tag=tag, mode="append" if mode == "append" else "overwrite", schema=delta_schema,
                before_commit=fence,
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


def _stage(
    spark: SparkSession, df: DataFrame, *, loc: str, rel_dir: str, dt: object, mode: SinkMode,
    keys: Sequence[str], max_files: int | None, table: str, job_id: str, barrier: int,
) -> tuple[list[StagedFile], StructType]:
    """Steps c and d: the executors write the attempt's files, the driver reads their footers."""
    if dt is not None:
        table_schema = spark_schema(dt)
        out = _align_to_table(df, loc, table_schema)
        if mode == "merge":
            current = read_snapshot(spark, loc, dt.version())  # type: ignore[attr-defined]
            out = merge_rows(current, out, keys)
    else:
        table_schema = _nullable(df.schema)
        out = df
        if mode == "merge" and not keys:
            raise ValueError(f"merge sink {table} needs key columns")
    if max_files:
        out = out.coalesce(max_files)
    fs, root = filesystem(loc)
    with crash_point_during("while_writing", job_id, barrier, lambda: _has_any_file(fs, f"{root}/{rel_dir}")):
        with phase("spark"):
            out.write.mode("errorifexists").option("compression", "snappy").parquet(f"{loc}/{rel_dir}")
    with phase("footers"):
        return _staged_files(loc, rel_dir), table_schema


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


def _drop_unserved_attempt(location: str, rel_dir: str, held: Callable[[], set[str]]) -> None:
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
