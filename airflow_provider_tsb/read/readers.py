"""Read a set of Delta tables consistently: every table at the version its level resolves to.

FLIP-276 "Data Consistency Type" from the reader's side, in two steps:

1. resolve: :func:`resolve_for_read` turns tables Q and :class:`~airflow_provider_tsb.consistency.ReadOptions`
   into a :class:`~airflow_provider_tsb.metastore.records.Resolution`, from the metastore
   (:meth:`store.resolution.resolve <airflow_provider_tsb.metastore.resolution.ResolutionManager.resolve>`) or
   through the REST API (``api_url``), or takes the one passed in;
2. read: :meth:`Resolution.to_spark`, :meth:`~Resolution.to_arrow` or
   :meth:`~Resolution.to_pandas` (see :mod:`airflow_provider_tsb.read.version_reads`).

:func:`read_tables` (Spark), :func:`read_tables_arrow` and :func:`read_tables_pandas` do both.

Bounded staleness: ``max_staleness_s=S`` (and ``wait_s``) reads the newest COMMIT barrier only if
it is at most S seconds old, else raises ``StaleReadError`` naming the lagging tables and their
writer jobs (see :mod:`airflow_provider_tsb.metastore.staleness`).

Errors: those of the resolution (``UnknownTableError``, ``InconsistentReadError`` ...), and
``TableNotFoundError`` when a table resolved at READ_UNCOMMITTED has no Delta table yet.
When a READ_COMMITTED answer's staged files were deleted before the read
(``StagedFilesGoneError``: a rerun replaced the attempt and its grace period ran out), the
readers resolve once more and read the fresh answer; with ``resolution=`` passed in, the
error is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_tsb.consistency import ConsistencyLevel, ReadOptions, table_list
from airflow_provider_tsb.exceptions import StagedFilesGoneError
from airflow_provider_tsb.metastore.records import Resolution
from airflow_provider_tsb.read.resolutions import to_arrow, to_pandas, to_spark

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_tsb.metastore.store import MetaStore

Level = ReadOptions | ConsistencyLevel | str | None
T = TypeVar("T")


def _read(
    read: Callable[[Resolution], T], tables: Iterable[str], level: Level, kwargs: dict[str, Any]
) -> T:
    """Resolve and read; on :class:`StagedFilesGoneError` resolve once more and read again."""
    names = table_list(tables)
    try:
        return read(resolve_for_read(names, level, **kwargs))
    except StagedFilesGoneError:
        if kwargs.get("resolution") is not None:
            raise
        return read(resolve_for_read(names, level, **kwargs))


def resolve_for_read(
    tables: Iterable[str],
    level: Level = None,
    *,
    store: MetaStore | None = None,
    api_url: str | None = None,
    token: str | None = None,
    resolution: Resolution | None = None,
    **options: Any,
) -> Resolution:
    """The :class:`Resolution` the readers use.

    Args:
        tables: ``catalog.database.table`` names (Q).
        level: a :class:`ReadOptions`, or a level (default REPEATABLE_READ).
        store: the metastore (default: the ``tsb_default`` connection); ignored with ``api_url``.
        api_url: resolve through the REST API (``POST /versions``) instead.
        token: the bearer token for ``api_url``.
        resolution: read exactly these versions (skips resolving).
        **options: :class:`ReadOptions` fields (``as_of``, ``min_barrier``, ``lease_seconds``,
            ``lease_holder``, ``max_staleness_s``, ``wait_s``) overriding those of ``level``.

    Raises:
        The errors of :class:`ReadOptions` and of ``store.resolution.resolve``.
    """
    if resolution is not None:
        return resolution
    opts = ReadOptions.of(level, **options)
    names = table_list(tables)
    if api_url:
        from airflow_provider_tsb.read.versions import resolve_versions

        return Resolution.from_dict(resolve_versions(names, opts, api_url=api_url, token=token))
    if store is None:
        from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook

        store = TsbMetastoreHook().get_conn()
    return store.resolution.resolve(names, opts)


def read_tables(spark: SparkSession, tables: Iterable[str], level: Level = None, **kwargs: Any) -> dict[str, DataFrame]:
    """Read tables Q consistently with Spark: ``{canonical name: lazy DataFrame}``.

    Args:
        spark: the Spark session.
        tables: as :func:`resolve_for_read`.
        level: as :func:`resolve_for_read`.
        **kwargs: as :func:`resolve_for_read` (``store``, ``api_url``, ``token``,
            ``resolution`` and the :class:`ReadOptions` fields).

    Returns:
        Lazy DataFrames; data is read by the executors, nothing is collected to the driver.

    Example::

        frames = read_tables(spark, ["tsb.flights.daily_delays", "tsb.flights.carrier_ranking"],
                             "repeatable-read", lease_seconds=600)
    """
    return _read(lambda r: to_spark(r, spark), tables, level, kwargs)


def read_tables_arrow(tables: Iterable[str], level: Level = None, **kwargs: Any) -> dict[str, pa.Table]:
    """Like :func:`read_tables` without Spark: ``{canonical name: pyarrow.Table}`` (in memory)."""
    return _read(to_arrow, tables, level, kwargs)


def read_tables_pandas(tables: Iterable[str], level: Level = None, **kwargs: Any) -> dict[str, pd.DataFrame]:
    """Like :func:`read_tables_arrow`, as pandas DataFrames."""
    return _read(to_pandas, tables, level, kwargs)


__all__ = ["read_tables", "read_tables_arrow", "read_tables_pandas", "resolve_for_read"]
