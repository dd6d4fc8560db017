"""Read a whole resolution: every table of Q at its resolved version, with Spark, Arrow or pandas.

A :class:`~airflow_provider_tsb.metastore.records.Resolution` is plain data: which Delta version
(and, at READ_COMMITTED, which staged files) of each table of Q to read (FLIP-276 "Data
Consistency Type"). Reading it lives here, in the read layer, like delta-rs's
``DeltaTable.to_pyarrow_table()`` (one table: :func:`~.version_reads.read_table_arrow`,
:func:`~.version_reads.read_table_spark`).

Example::

    from airflow_provider_tsb.read.resolutions import to_pandas

    frames = to_pandas(store.resolution.resolve(["tsb.flights.daily_delays"], "repeatable-read"))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from airflow_provider_tsb.read.version_reads import ResolvedVersion, read_table_arrow, read_table_spark

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


class ResolvedTables(Protocol):
    """What to read of every table of Q (the shape of ``Resolution``): ``{name: version}``."""

    @property
    def tables(self) -> Mapping[str, ResolvedVersion]: ...


def to_spark(resolution: ResolvedTables, spark: SparkSession) -> dict[str, DataFrame]:
    """Every table at its resolved version: ``{canonical name: lazy Spark DataFrame}``.

    The driver lists the version's files (delta-rs, metadata only); executors read the Parquet
    files, nothing is collected to the driver.

    Raises:
        TableNotFoundError: a table has nothing to read (no version and no staged files).
    """
    return {name: read_table_spark(spark, tv) for name, tv in resolution.tables.items()}


def to_arrow(resolution: ResolvedTables) -> dict[str, pa.Table]:
    """Every table at its resolved version: ``{canonical name: pyarrow.Table}`` (in memory).

    Raises:
        TableNotFoundError: a table has nothing to read (no version and no staged files).
        ExpiredVersionError: a version was vacuumed by snapshot expiry (read without a lease).
        StagedFilesGoneError: a READ_COMMITTED answer's staged files were deleted; resolve again.
    """
    return {name: read_table_arrow(tv) for name, tv in resolution.tables.items()}


def to_pandas(resolution: ResolvedTables) -> dict[str, pd.DataFrame]:
    """Every table at its resolved version: ``{canonical name: pandas.DataFrame}`` (in memory).

    Raises:
        As :func:`to_arrow`.
    """
    return {name: table.to_pandas() for name, table in to_arrow(resolution).items()}


__all__ = ["ResolvedTables", "to_arrow", "to_pandas", "to_spark"]
