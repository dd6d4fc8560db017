"""Read one resolved table version with Spark, Arrow or pandas.

A resolved version (:class:`~airflow_provider_tsb.metastore.records.TableVersion`) is a Delta
version, plus at READ_COMMITTED the staged files of a PROCESSED barrier (FLIP-276 "Data
Consistency Type"; docs/design.md "Vocabulary"):

* a WRITTEN (or READ_UNCOMMITTED ``LATEST``) table is read at its Delta version;
* a PROCESSED table is its previous WRITTEN version with the staged manifest applied:
  ``append`` = snapshot + staged files (minus the files in ``removes``: a merge's rewritten
  files), ``overwrite`` = staged files only. Staged file paths are relative to the table root;
  a partitioned sink's entries carry their ``partition_values``. Staged files with a column the
  version lacks (schema evolution) add it (null in the version's rows).

With Spark, delta-rs gives the file list of the version on the driver (metadata only) and the
executors read the Parquet files; with Arrow, delta-rs ``to_pyarrow_table`` plus
``pyarrow.parquet`` read it in memory. This module knows nothing of the metastore: it takes
any object with the :class:`ResolvedVersion` attributes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from deltalake.exceptions import DeltaProtocolError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


class ResolvedVersion(Protocol):
    """What to read of one table (the shape of ``TableVersion``)."""

    @property
    def table(self) -> str: ...
    @property
    def location(self) -> str: ...
    @property
    def version(self) -> int | None: ...
    @property
    def state(self) -> str: ...
    @property
    def staged(self) -> Mapping[str, Any] | None: ...
    # optional: ``file_count`` / ``size_bytes`` (recorded live-file figures, read with getattr)


def staged_paths(location: str, staged: Mapping[str, Any]) -> list[str]:
    """Absolute paths/URIs of the files of a PROCESSED manifest.

    ``staged["files"]`` entries are paths relative to the table root, or dicts with a ``path``
    key (the data plane's ``StagedFile.to_json()``); absolute paths and URIs are kept.
    """
    from airflow_provider_tsb.delta.log import join, normalize_location

    out = []
    for entry in staged.get("files") or []:
        path = entry["path"] if isinstance(entry, Mapping) else str(entry)
        if "://" in path or path.startswith("/"):
            out.append(normalize_location(path))
        else:
            out.append(join(location, path))
    return out


def _mode(staged: Mapping[str, Any] | None) -> str | None:
    if not staged:
        return None
    mode = str(staged.get("mode") or "append")
    if mode not in ("append", "overwrite"):
        raise ValueError(f"staged manifest mode must be 'append' or 'overwrite', got {mode!r}")
    return mode


def _removed(tv: ResolvedVersion) -> set[str]:
    """Paths (relative to the table root) the PROCESSED manifest removes from the version."""
    return {str(p) for p in ((tv.staged or {}).get("removes") or [])}


def _partitioned(staged: Mapping[str, Any]) -> dict[tuple[tuple[str, str | None], ...], list[str]]:
    """``{partition values: relative paths}`` of a manifest whose entries carry partition values
    (``{}`` when none does)."""
    groups: dict[tuple[tuple[str, str | None], ...], list[str]] = {}
    for entry in staged.get("files") or []:
        values = entry.get("partition_values") if isinstance(entry, Mapping) else None
        if not values:
            return {}
        groups.setdefault(tuple(sorted(values.items())), []).append(entry["path"])
    return groups


def staged_gone(tv: ResolvedVersion, path: str) -> Exception:
    """The :class:`~airflow_provider_tsb.exceptions.StagedFilesGoneError` for a vanished staged file."""
    from airflow_provider_tsb.exceptions import StagedFilesGoneError

    barrier = getattr(tv, "barrier", None)
    return StagedFilesGoneError(
        f"table {tv.table!r}, barrier {barrier} (READ_COMMITTED, PROCESSED): staged file {path!r} is gone: "
        "the barrier's attempt was replaced by a rerun and its files were deleted after the staging grace "
        "period (TSB_STAGING_GRACE_SECONDS). Resolve again to read the new attempt or the committed "
        "version, or pass lease_seconds to keep a READ_COMMITTED answer's files as long as the lease"
    )


def _check_staged(tv: ResolvedVersion, paths: list[str]) -> None:
    """Raise :func:`staged_gone` if a staged file no longer exists (one ``stat`` per file)."""
    import pyarrow.fs as pafs

    from airflow_provider_tsb.delta.log import filesystem

    fs, _root = filesystem(tv.location)
    for path in paths:
        file_fs, file_path = (fs, path) if "://" not in path else pafs.FileSystem.from_uri(path)
        if file_fs.get_file_info(file_path).type == pafs.FileType.NotFound:
            raise staged_gone(tv, path)


def unreadable_by_delta_rs(tv: ResolvedVersion, table: Any) -> Exception:
    """The :class:`~airflow_provider_tsb.exceptions.UnsupportedTableFeatureError` for a table
    whose reader features delta-rs cannot read yet (``typeWidening``, ``v2Checkpoint``, ...):
    names the table, the version and the features, and the Spark readers that read them."""
    from airflow_provider_tsb.exceptions import UnsupportedTableFeatureError

    features = sorted(table.protocol().reader_features or [])
    return UnsupportedTableFeatureError(
        f"table {tv.table!r} (Delta version {tv.version}) uses the reader features {features}, which delta-rs (the "
        "reader of pandas, Arrow and the Delta Sharing server) cannot read yet. Read it with Spark, whose Delta "
        "reader reads them: read_table_spark(spark, version) of airflow_provider_tsb.read.version_reads, or "
        f"spark.read.format('delta').option('versionAsOf', {tv.version}).load({tv.location!r})"
    )


def expired_version(tv: ResolvedVersion, exc: BaseException) -> Exception:
    """The error for a data file of a resolved Delta version that is gone (delta-rs / pyarrow
    raise ``FileNotFoundError``): :class:`~airflow_provider_tsb.exceptions.ExpiredVersionError`
    when snapshot expiry may have removed it, else (a missing file still live at the table's
    newest version, which vacuum never deletes) the corruption it is,
    :func:`~airflow_provider_tsb.delta.integrity.missing_file_error`."""
    from airflow_provider_tsb.delta.integrity import live_paths, missing_file_error, missing_files
    from airflow_provider_tsb.delta.log import open_table
    from airflow_provider_tsb.exceptions import ExpiredVersionError

    barrier = getattr(tv, "barrier", None)
    if tv.version is not None:
        try:
            newest = open_table(tv.location)
            live = live_paths(open_table(tv.location, tv.version)) & live_paths(newest)
            gone = missing_files(tv.location, sorted(live))
        except Exception:  # noqa: BLE001 - the table cannot be looked into: keep the expiry reading
            gone = []
        if gone:
            return missing_file_error(tv.table, barrier, tv.version, gone[0], newest.version())
    return ExpiredVersionError(
        f"table {tv.table!r}, barrier {barrier} (Delta version {tv.version}): a data file of the version "
        f"is gone ({exc}): snapshot expiry (vacuum) removed it after this read was resolved. Resolve "
        "again for a barrier that is kept, or resolve with a lease (lease_seconds) so that expiry keeps "
        "the versions until the read is done",
        table=tv.table, version=tv.version, barrier=barrier,
    )


@contextmanager
def log_cleaned_up(tv: ResolvedVersion) -> Iterator[None]:
    """Turn a failure to load the version ``tv`` serves into :func:`expired_version` when snapshot
    expiry's metadata cleanup deleted that version's log (it is below
    :func:`~airflow_provider_tsb.delta.log_cleanup.log_start`: its data files went first); any
    other failure passes through unchanged.

    Raises:
        ExpiredVersionError: the version's log was cleaned up after this read was resolved.
    """
    from airflow_provider_tsb.delta.log_cleanup import log_start
    from airflow_provider_tsb.exceptions import DeltaLogError, TsbError

    try:
        yield
    except Exception as exc:
        if tv.version is None or (isinstance(exc, TsbError) and not isinstance(exc, DeltaLogError)):
            raise
        start = log_start(tv.location)
        if start is not None and tv.version < start:
            raise expired_version(tv, exc) from exc
        raise


def verify_served(tv: ResolvedVersion, table: Any = None) -> None:
    """Verify the Delta log of the version ``tv`` serves against the live-file figures its
    barrier's commit recorded (``tv.file_count`` / ``tv.size_bytes`` from the metastore, else the
    commit's ``tsb.files`` / ``tsb.bytes``); once per (table, version) per process
    (:func:`~airflow_provider_tsb.delta.integrity.verify_version`).

    Raises:
        DeltaLogIntegrityError: the log gives other figures (names the table, the barrier, the
            version, both figures; restore the log, run ``tsb check --integrity``).
    """
    from airflow_provider_tsb.delta.integrity import TableFigures, verify_version

    if tv.version is None:
        return
    count, size = getattr(tv, "file_count", None), getattr(tv, "size_bytes", None)
    expected = TableFigures(int(count), int(size)) if count is not None and size is not None else None
    verify_version(tv.location, tv.version, expected, name=tv.table, barrier=getattr(tv, "barrier", None),
                   table=table)


def _missing(tv: ResolvedVersion) -> Exception:
    from airflow_provider_tsb.exceptions import TableNotFoundError

    return TableNotFoundError(
        f"table {tv.table!r} has no Delta version to read at {tv.location!r} (state {tv.state}): "
        "its writer job has not committed a first barrier yet"
    )


# ------------------------------------------------------------------ Spark
def read_table_spark(spark: SparkSession, tv: ResolvedVersion) -> DataFrame:
    """One table of a resolution as a lazy Spark DataFrame (see module docstring).

    Raises:
        TableNotFoundError: nothing to read (no version and no staged files).
        StagedFilesGoneError: a staged file of a PROCESSED answer is gone (checked on the
            driver, one ``stat`` per file; resolve again).
        DeltaLogIntegrityError: the version's Delta log does not give the recorded live files
            (:func:`verify_served`).
    """

    from airflow_provider_tsb.delta.log import open_table
    from airflow_provider_tsb.spark.frames import spark_schema
    from airflow_provider_tsb.spark.inputs import read_snapshot

    mode = _mode(tv.staged)
    with log_cleaned_up(tv):
        verify_served(tv)
        if mode is None:
            if tv.version is None:
                raise _missing(tv)
            return read_snapshot(spark, tv.location, tv.version)
        schema: StructType | None = (spark_schema(open_table(tv.location, tv.version))
                                     if tv.version is not None else None)
    files = staged_paths(tv.location, tv.staged or {})
    _check_staged(tv, files)
    staged = _staged_spark(spark, tv, files, schema)
    if mode == "overwrite" or tv.version is None:
        return staged
    base = read_snapshot(spark, tv.location, tv.version, exclude=_removed(tv))
    return base.unionByName(staged, allowMissingColumns=True)


def _staged_spark(spark: SparkSession, tv: ResolvedVersion, files: list[str], schema: StructType | None) -> DataFrame:
    """The staged files as a DataFrame: partition values as columns, the version's column types."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructType

    from airflow_provider_tsb.delta.log import join

    if not files:
        return spark.createDataFrame([], schema if schema is not None else StructType([]))
    types = {f.name: f.dataType for f in schema.fields} if schema is not None else {}
    groups = _partitioned(tv.staged or {}) or {(): files}
    frames = []
    for values, paths in groups.items():
        frame = spark.read.parquet(*[p if p in files else join(tv.location, p) for p in paths])
        for name, value in values:
            frame = frame.withColumn(name, F.lit(value).cast(types.get(name, StringType())))
        frames.append(frame.select(*[
            F.col(c).cast(types[c]).alias(c) if c in types and frame.schema[c].dataType != types[c] else F.col(c)
            for c in frame.columns
        ]))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame, allowMissingColumns=True)
    return out


def read_table_arrow(tv: ResolvedVersion) -> pa.Table:
    """One table of a resolution as a ``pyarrow.Table`` (delta-rs + pyarrow.parquet).

    Raises:
        TableNotFoundError: nothing to read (no version and no staged files).
        ExpiredVersionError: a data file of the version was deleted by snapshot expiry after
            the read was resolved (read without a lease).
        StagedFilesGoneError: a staged file of a PROCESSED answer is gone (resolve again).
        DeltaLogIntegrityError: the version's Delta log does not give the recorded live files
            (:func:`verify_served`).
        DeltaLogError: the version cannot be loaded (e.g. a truncated commit file).
    """
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from airflow_provider_tsb.delta.log import filesystem, open_table

    mode = _mode(tv.staged)
    base: pa.Table | None = None
    if tv.version is not None:
        with log_cleaned_up(tv):
            table = open_table(tv.location, tv.version)
            verify_served(tv, table)
        try:
            base = scan_to_arrow(table, exclude=_removed(tv) if mode else None)
        except FileNotFoundError as exc:
            raise expired_version(tv, exc) from exc
        except DeltaProtocolError as exc:
            raise unreadable_by_delta_rs(tv, table) from exc
    if mode is None:
        if base is None:
            raise _missing(tv)
        return base
    fs, _root = filesystem(tv.location)
    parts = []
    entries = [e for e in (tv.staged or {}).get("files") or []]
    for path, entry in zip(staged_paths(tv.location, tv.staged or {}), entries, strict=True):
        file_fs, file_path = (fs, path) if "://" not in path else pafs.FileSystem.from_uri(path)
        try:
            part = pq.read_table(file_path, filesystem=file_fs)
        except FileNotFoundError as exc:
            raise staged_gone(tv, path) from exc
        for name, value in ((entry.get("partition_values") or {}) if isinstance(entry, Mapping) else {}).items():
            part = part.append_column(name, pa.array([value] * part.num_rows, pa.string()))
        parts.append(part)
    if base is not None:
        parts = [_conform(p, base.schema) for p in parts]
    if mode == "append" and base is not None:
        parts = [base, *parts]
    if not parts:
        return base.schema.empty_table() if base is not None else pa.table({})
    return pa.concat_tables(parts, promote_options="default")


def scan_to_arrow(table: Any, columns: list[str] | None = None, exclude: set[str] | None = None) -> pa.Table:
    """A delta-rs ``DeltaTable`` read into memory by a single-threaded Arrow scan.

    ``DeltaTable.to_pyarrow_table()`` scans on Arrow's thread pool; with ``deltalake`` 1.6 and
    ``pyarrow`` 26 a process that did so aborted at interpreter exit with "terminate called
    without an active exception" (SIGABRT, exit code 134) in 15 of 20 runs on this project's
    machines, after the reader's work was done (the failure delta-io/delta-rs#2184 reports). A
    scan without threads ended cleanly in 20 of 20, so a reader's script exits 0.

    ``exclude``: data file paths (relative to the table root) left out of the scan (the files a
    PROCESSED merge manifest removes).
    """
    from airflow_provider_tsb.delta.log import native_filesystem

    dataset = table.to_pyarrow_dataset(filesystem=native_filesystem(table.table_uri))
    if exclude:
        import pyarrow.dataset as ds

        kept = [f for f in dataset.get_fragments() if not any(f.path.endswith(p) for p in exclude)]
        dataset = ds.FileSystemDataset(kept, dataset.schema, dataset.format, dataset.filesystem)
    return dataset.to_table(columns=columns, use_threads=False)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast a staged file's table to the Delta schema: its columns in the schema's order and
    types, then columns the schema lacks (a new column of schema evolution); else keep it."""
    import pyarrow as pa

    if not set(schema.names) <= set(table.column_names):
        return table
    extra = [n for n in table.column_names if n not in schema.names]
    try:
        out = table.select(schema.names).cast(schema)
    except Exception:  # incompatible types: let concat_tables promote or report
        return table
    for name in extra:
        out = out.append_column(name, table.column(name))
    return out if not extra else out.cast(pa.schema([*schema, *(table.schema.field(n) for n in extra)]))
