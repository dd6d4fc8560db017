"""Read a set of Delta tables consistently: every table at the version its level resolves to.

FLIP-276 "Data Consistency Type" from the reader's side. The versions come from
:class:`~airflow_provider_tsb.versions.VersionResolver` (or the REST API when ``api_url`` is
given, or a :class:`~airflow_provider_tsb.metastore.store.Resolution` passed in); then:

* a WRITTEN (or READ_UNCOMMITTED ``LATEST``) table is read at its Delta version;
* a PROCESSED table (READ_COMMITTED only) is its previous WRITTEN version with the staged
  manifest applied: ``append`` = snapshot + staged files, ``overwrite`` = staged files only.
  Staged file paths are relative to the table root (sinks are unpartitioned).

Three front ends:

* :func:`read_tables` -> ``{name: pyspark DataFrame}``: delta-rs gives the file list of the
  version on the driver (metadata only); Spark executors read the Parquet files. No data is
  collected to the driver.
* :func:`read_tables_arrow` -> ``{name: pyarrow.Table}`` and :func:`read_tables_pandas` ->
  ``{name: pandas.DataFrame}`` for users without Spark (delta-rs ``to_pyarrow_table`` plus
  ``pyarrow.parquet`` for staged files).

Errors: those of the resolution (``UnknownTableError``, ``InconsistentReadError`` ...), and
``TableNotFoundError`` when a table resolved at READ_UNCOMMITTED has no Delta table yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.metastore.store import Resolution, TableVersion
from airflow_provider_tsb.versions import VersionResolver, resolution_from_dict

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_tsb.metastore.store import MetaStore


def resolve_for_read(
    tables: Iterable[str],
    level: ConsistencyLevel | str = ConsistencyLevel.REPEATABLE_READ,
    as_of: int | None = None,
    store: MetaStore | None = None,
    *,
    min_barrier: int | None = None,
    lease_seconds: float | None = None,
    api_url: str | None = None,
    token: str | None = None,
    resolution: Resolution | None = None,
) -> Resolution:
    """The :class:`Resolution` the readers use: ``resolution`` if given, else through the REST
    API (``api_url``), else from ``store`` (default: the ``tsb_default`` connection)."""
    if resolution is not None:
        return resolution
    names = list(tables)
    if api_url:
        from airflow_provider_tsb.versions import resolve_versions

        answer = resolve_versions(
            names, level=level, as_of=as_of, min_barrier=min_barrier, lease_seconds=lease_seconds,
            api_url=api_url, token=token,
        )
        return resolution_from_dict(answer)
    if store is None:
        from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook

        store = TsbMetastoreHook().get_conn()
    return VersionResolver(store).resolve(
        names, level, as_of=as_of, min_barrier=min_barrier, lease_seconds=lease_seconds
    )


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


def _missing(tv: TableVersion) -> Exception:
    from airflow_provider_tsb.delta.errors import TableNotFoundError

    return TableNotFoundError(
        f"table {tv.table!r} has no Delta version to read at {tv.location!r} (state {tv.state}): "
        "its writer job has not committed a first barrier yet"
    )


# ------------------------------------------------------------------ Spark
def read_table_spark(spark: SparkSession, tv: TableVersion) -> DataFrame:
    """One table of a resolution as a lazy Spark DataFrame (see module docstring).

    Raises:
        TableNotFoundError: nothing to read (no version and no staged files).
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


def read_tables(
    spark: SparkSession,
    tables: Iterable[str],
    level: ConsistencyLevel | str = ConsistencyLevel.REPEATABLE_READ,
    as_of: int | None = None,
    store: MetaStore | None = None,
    *,
    min_barrier: int | None = None,
    lease_seconds: float | None = None,
    api_url: str | None = None,
    token: str | None = None,
    resolution: Resolution | None = None,
) -> dict[str, DataFrame]:
    """Read tables Q consistently with Spark: ``{canonical name: lazy DataFrame}``.

    Args:
        spark: the Spark session.
        tables: ``catalog.database.table`` names.
        level: consistency level (default REPEATABLE_READ); ``as_of``: AS OF barrier n.
        store: metastore (default: ``tsb_default`` connection); ignored with ``api_url``.
        min_barrier: monotonic reads (the last barrier this reader saw).
        lease_seconds: pin the versions while reading (snapshot expiry keeps them).
        api_url, token: resolve through the REST API instead of the metastore.
        resolution: read exactly these versions (skips resolving).

    Returns:
        Lazy DataFrames; data is read by the executors, nothing is collected to the driver.
    """
    res = resolve_for_read(
        tables, level, as_of, store, min_barrier=min_barrier, lease_seconds=lease_seconds, api_url=api_url,
        token=token, resolution=resolution,
    )
    return {name: read_table_spark(spark, tv) for name, tv in res.tables.items()}


# ------------------------------------------------------------------ Arrow / pandas
def read_table_arrow(tv: TableVersion) -> pa.Table:
    """One table of a resolution as a ``pyarrow.Table`` (delta-rs + pyarrow.parquet).

    Raises:
        TableNotFoundError: nothing to read (no version and no staged files).
    """
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from airflow_provider_tsb.delta.log import filesystem, open_table

    mode = _mode(tv.staged)
    base: pa.Table | None = None
    if tv.version is not None:
        base = open_table(tv.location, tv.version).to_pyarrow_table()
    if mode is None:
        if base is None:
            raise _missing(tv)
        return base
    fs, _root = filesystem(tv.location)
    parts = []
    for path in staged_paths(tv.location, tv.staged or {}):
        file_fs, file_path = (fs, path) if "://" not in path else pafs.FileSystem.from_uri(path)
        parts.append(pq.read_table(file_path, filesystem=file_fs))
    if base is not None:
        parts = [_conform(p, base.schema) for p in parts]
    if mode == "append" and base is not None:
        parts = [base, *parts]
    if not parts:
        return base.schema.empty_table() if base is not None else pa.table({})
    return pa.concat_tables(parts, promote_options="default")


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast a staged file's table to the Delta schema when the columns match (else keep it)."""
    if set(table.column_names) != set(schema.names):
        return table
    try:
        return table.select(schema.names).cast(schema)
    except Exception:  # incompatible types: let concat_tables promote or report
        return table


def read_tables_arrow(
    tables: Iterable[str],
    level: ConsistencyLevel | str = ConsistencyLevel.REPEATABLE_READ,
    as_of: int | None = None,
    store: MetaStore | None = None,
    *,
    min_barrier: int | None = None,
    lease_seconds: float | None = None,
    api_url: str | None = None,
    token: str | None = None,
    resolution: Resolution | None = None,
) -> dict[str, pa.Table]:
    """Like :func:`read_tables` without Spark: ``{canonical name: pyarrow.Table}`` (in memory)."""
    res = resolve_for_read(
        tables, level, as_of, store, min_barrier=min_barrier, lease_seconds=lease_seconds, api_url=api_url,
        token=token, resolution=resolution,
    )
    return {name: read_table_arrow(tv) for name, tv in res.tables.items()}


def read_tables_pandas(
    tables: Iterable[str],
    level: ConsistencyLevel | str = ConsistencyLevel.REPEATABLE_READ,
    as_of: int | None = None,
    store: MetaStore | None = None,
    **kwargs: Any,
) -> dict[str, pd.DataFrame]:
    """Like :func:`read_tables_arrow`, as pandas DataFrames."""
    return {name: t.to_pandas() for name, t in read_tables_arrow(tables, level, as_of, store, **kwargs).items()}
