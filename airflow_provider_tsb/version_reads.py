"""Read one resolved table version with Spark, Arrow or pandas.

A resolved version (:class:`~airflow_provider_tsb.metastore.records.TableVersion`) is a Delta
version, plus at READ_COMMITTED the staged files of a PROCESSED barrier (FLIP-276 "Data
Consistency Type"; docs/design.md "Vocabulary"):

* a WRITTEN (or READ_UNCOMMITTED ``LATEST``) table is read at its Delta version;
* a PROCESSED table is its previous WRITTEN version with the staged manifest applied:
  ``append`` = snapshot + staged files, ``overwrite`` = staged files only. Staged file paths
  are relative to the table root (sinks are unpartitioned).

With Spark, delta-rs gives the file list of the version on the driver (metadata only) and the
executors read the Parquet files; with Arrow, delta-rs ``to_pyarrow_table`` plus
``pyarrow.parquet`` read it in memory. This module knows nothing of the metastore: it takes
any object with the :class:`ResolvedVersion` attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


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


def expired_version(tv: ResolvedVersion, exc: BaseException) -> Exception:
    """The :class:`~airflow_provider_tsb.exceptions.ExpiredVersionError` for a data file of a
    resolved Delta version that vacuum deleted (delta-rs / pyarrow raise ``FileNotFoundError``)."""
    from airflow_provider_tsb.exceptions import ExpiredVersionError

    barrier = getattr(tv, "barrier", None)
    return ExpiredVersionError(
        f"table {tv.table!r}, barrier {barrier} (Delta version {tv.version}): a data file of the version "
        f"is gone ({exc}): snapshot expiry (vacuum) removed it after this read was resolved. Resolve "
        "again for a barrier that is kept, or resolve with a lease (lease_seconds) so that expiry keeps "
        "the versions until the read is done",
        table=tv.table, version=tv.version, barrier=barrier,
    )


def _missing(tv: ResolvedVersion) -> Exception:
    from airflow_provider_tsb.delta.errors import TableNotFoundError

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
    """
    from pyspark.sql.types import StructType

    from airflow_provider_tsb.delta.log import open_table
    from airflow_provider_tsb.spark.inputs import read_snapshot, spark_schema

    mode = _mode(tv.staged)
    if mode is None:
        if tv.version is None:
            raise _missing(tv)
        return read_snapshot(spark, tv.location, tv.version)
    files = staged_paths(tv.location, tv.staged or {})
    _check_staged(tv, files)
    schema: StructType | None = spark_schema(open_table(tv.location, tv.version)) if tv.version is not None else None
    if files:
        reader = spark.read.schema(schema) if (schema is not None and mode == "append") else spark.read
        staged = reader.parquet(*files)
    elif schema is not None:
        staged = spark.createDataFrame([], schema)
    else:
        staged = spark.createDataFrame([], StructType([]))
    if mode == "overwrite" or tv.version is None:
        return staged
    base = read_snapshot(spark, tv.location, tv.version)
    return base.unionByName(staged, allowMissingColumns=True)



def read_table_arrow(tv: ResolvedVersion) -> pa.Table:
    """One table of a resolution as a ``pyarrow.Table`` (delta-rs + pyarrow.parquet).

    Raises:
        TableNotFoundError: nothing to read (no version and no staged files).
        ExpiredVersionError: a data file of the version was deleted by snapshot expiry after
            the read was resolved (read without a lease).
        StagedFilesGoneError: a staged file of a PROCESSED answer is gone (resolve again).
    """
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from airflow_provider_tsb.delta.log import filesystem, open_table

    mode = _mode(tv.staged)
    base: pa.Table | None = None
    if tv.version is not None:
        try:
            base = scan_to_arrow(open_table(tv.location, tv.version))
        except FileNotFoundError as exc:
            raise expired_version(tv, exc) from exc
    if mode is None:
        if base is None:
            raise _missing(tv)
        return base
    fs, _root = filesystem(tv.location)
    parts = []
    for path in staged_paths(tv.location, tv.staged or {}):
        file_fs, file_path = (fs, path) if "://" not in path else pafs.FileSystem.from_uri(path)
        try:
            parts.append(pq.read_table(file_path, filesystem=file_fs))
        except FileNotFoundError as exc:
            raise staged_gone(tv, path) from exc
    if base is not None:
        parts = [_conform(p, base.schema) for p in parts]
    if mode == "append" and base is not None:
        parts = [base, *parts]
    if not parts:
        return base.schema.empty_table() if base is not None else pa.table({})
    return pa.concat_tables(parts, promote_options="default")


def scan_to_arrow(table: Any, columns: list[str] | None = None) -> pa.Table:
    """A delta-rs ``DeltaTable`` read into memory by a single-threaded Arrow scan.

    ``DeltaTable.to_pyarrow_table()`` scans on Arrow's thread pool; with ``deltalake`` 1.6 and
    ``pyarrow`` 26 a process that did so aborted at interpreter exit with "terminate called
    without an active exception" (SIGABRT, exit code 134) in 15 of 20 runs on this project's
    machines, after the reader's work was done (the failure delta-io/delta-rs#2184 reports). A
    scan without threads ended cleanly in 20 of 20, so a reader's script exits 0.
    """
    return table.to_pyarrow_dataset().to_table(columns=columns, use_threads=False)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast a staged file's table to the Delta schema when the columns match (else keep it)."""
    if set(table.column_names) != set(schema.names):
        return table
    try:
        return table.select(schema.names).cast(schema)
    except Exception:  # incompatible types: let concat_tables promote or report
        return table
