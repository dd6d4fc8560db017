"""Append data to a root table: the supported way to write the input of a topology.

A root table is written from outside the topology (docs/design.md "Vocabulary"). The jobs read
it at the Delta version each barrier recorded, and ``BarrierContext.changes`` reads the rows a
barrier added, so a root table must be **append-only**: :func:`append_to_root` only appends.

Idempotent per run key: with ``run_key`` the commit carries the Delta app transaction
``txn(appId="tsb-root:<run_key>", version=1)`` (Delta protocol "Transaction Identifiers"), so a
retried ingestion task that already committed finds its transaction in the log and appends
nothing. The commit metadata records ``tsb.root.run_key`` and ``tsb.root.rows``.

Data: a ``pyarrow.Table`` (or anything exporting the Arrow stream interface), a pandas
DataFrame, a Spark DataFrame (converted with ``DataFrame.toArrow()`` on the driver: for slices
that fit in the driver's memory; bigger Spark data belongs in a job of the topology), or a
Parquet or CSV file path.

Example::

    from airflow_provider_tsb.root_tables import append_to_root

    result = append_to_root(topology.location("raw.penguins"), "penguins-2024-06-01.csv",
                            run_key="{{ run_id }}")
    result.version, result.appended
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from airflow_provider_tsb.delta.compaction import Compaction
from airflow_provider_tsb.delta.log import normalize_location, table_exists
from airflow_provider_tsb.delta.roots import END_OF_INPUT, compact_small_files
from airflow_provider_tsb.delta.storage import storage_options
from airflow_provider_tsb.exceptions import DataFileNotFoundError, InvalidLocationError, RootDataError
from airflow_provider_tsb.metastore.locations import check_table_location, configured_location_roots

#: commit metadata keys of an append made through this module
RUN_KEY = "tsb.root.run_key"
ROWS_KEY = "tsb.root.rows"
#: Delta app transaction id prefix of an idempotent append (one app id per run key)
APP_ID_PREFIX = "tsb-root:"


@dataclass(frozen=True)
class AppendResult:
    """What :func:`append_to_root` did.

    Attributes:
        location: the root table's location.
        version: the Delta version holding the rows (the earlier commit when replayed).
        rows: rows appended by this call (0 when replayed).
        run_key: the run key, if any.
        appended: False when ``run_key`` had been committed before and nothing was written.
    """

    location: str
    version: int
    rows: int
    run_key: str | None
    appended: bool


def refuse_foreign_folder(location: str) -> str:
    """``location``, unless it is a local file, or a local folder that holds files but no
    ``_delta_log``: creating a table there would mix its files with what the folder already holds.

    Raises:
        InvalidLocationError: names the folder and what to do.
    """
    import os

    if "://" not in location and os.path.isfile(location):
        raise InvalidLocationError(
            f"root table location {location!r} is a file, not a folder: a Delta table is a folder; give the table's "
            "location (Topology.location(name)) first and the data second"
        )
    if "://" in location or not os.path.isdir(location) or os.path.isdir(os.path.join(location, "_delta_log")):
        return location
    with os.scandir(location) as entries:
        if any(True for _ in entries):
            raise InvalidLocationError(
                f"root table location {location!r} is a folder that holds files but no Delta log (_delta_log): "
                "it is not a Delta table; give an empty or new folder, or the location of a Delta table"
            )
    return location


def _root_location(location: str) -> str:
    """``location`` normalized, once it is absolute without ``..``, under ``[tsb]
    allowed_location_roots`` where those are configured, and no folder of other files."""
    checked = check_table_location("root table", location, configured_location_roots())
    return refuse_foreign_folder(normalize_location(checked))


def append_to_root(
    location: str,
    data: Any,
    *,
    run_key: str | None = None,
    end_of_input: bool = False,
    metadata: Mapping[str, str] | None = None,
    file_format: str | None = None,
    compaction: Compaction | None = None,
) -> AppendResult:
    """Append ``data`` to the root table at ``location`` in one Delta commit (created if missing).

    Args:
        location: the root table's location (``Topology.location(name)`` gives it).
        data: a ``pyarrow.Table``, a pandas or Spark DataFrame, or a path to a Parquet or CSV file.
        run_key: idempotency key (e.g. the Airflow run id): a second call with the same key
            appends nothing and returns the first call's version.
        end_of_input: mark this commit as the end of a bounded input (FLIP-147): the barrier
            emitter then generates a final barrier.
        metadata: extra commit metadata, string values.
        file_format: ``parquet`` or ``csv`` for a path whose suffix says neither.
        compaction: auto compaction: once the table has ``compaction.min_files`` small files,
            the append is followed by a commit that rewrites them
            (:func:`~airflow_provider_tsb.delta.roots.compact_small_files`; never after an
            ``end_of_input`` append, whose marker must stay the newest commit), so a streaming
            ingest's small files do not slow it (docs/design.md "A root table's auto compaction").

    Returns:
        An :class:`AppendResult`.

    Raises:
        InvalidLocationError, LocationNotAllowedError: see :func:`_root_location`.
        RootDataError: ``data`` is of an unsupported type, a file format is unknown, or its columns
            do not match the table's schema (the message names the table and the columns).
        DataFileNotFoundError: a data file does not exist.
    """
    loc = _root_location(location)
    app_id = f"{APP_ID_PREFIX}{run_key}" if run_key is not None else None
    if app_id is not None and table_exists(loc):
        table = DeltaTable(loc, storage_options=storage_options(loc))
        if table.transaction_version(app_id) is not None:
            return AppendResult(loc, _version_of_run(table, run_key), 0, run_key, False)  # type: ignore[arg-type]
    rows = to_arrow(data, file_format=file_format)
    if table_exists(loc):
        rows = _conform(loc, rows)
    meta = {**(metadata or {}), ROWS_KEY: str(rows.num_rows)}
    if run_key is not None:
        meta[RUN_KEY] = run_key
    if end_of_input:
        meta[END_OF_INPUT] = "true"
    properties = CommitProperties(
        custom_metadata=meta, app_transactions=[Transaction(app_id, 1)] if app_id is not None else None
    )
    options = storage_options(loc)
    write_deltalake(loc, rows, mode="append", commit_properties=properties, storage_options=options)
    table = DeltaTable(loc, storage_options=options)
    version = table.version()
    if compaction is not None and not end_of_input:
        compact_small_files(table, compaction)
    return AppendResult(loc, version, rows.num_rows, run_key, True)


def _conform(location: str, rows: pa.Table) -> pa.Table:
    """``rows`` with the table's column order and types (CSV types are guessed), or a clear error."""
    existing = pa.schema(DeltaTable(location, storage_options=storage_options(location)).schema().to_arrow())
    if set(rows.column_names) == set(existing.names):
        try:
            return rows.select(existing.names).cast(existing)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            detail = f" ({exc})"
    else:
        detail = ""
    raise RootDataError(
        f"cannot append to root table {location!r}: the data's columns "
        f"{[f'{f.name}: {f.type}' for f in rows.schema]} do not match the table's "
        f"{[f'{f.name}: {f.type}' for f in existing]}{detail}; a root table keeps its schema, cast or "
        "select the columns first"
    )


def to_arrow(data: Any, *, file_format: str | None = None) -> pa.Table:
    """``data`` as a ``pyarrow.Table`` (see :func:`append_to_root` for what is accepted).

    Raises:
        RootDataError, DataFileNotFoundError: as :func:`append_to_root`.
    """
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, str | Path):
        return _read_file(Path(data), file_format)
    if hasattr(data, "toArrow") and hasattr(data, "sparkSession"):  # a Spark DataFrame
        return data.toArrow()
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if hasattr(data, "__arrow_c_stream__"):
        return pa.table(data)
    raise RootDataError(
        f"cannot append a {type(data).__name__} to a root table: pass a pyarrow.Table, a pandas or "
        "Spark DataFrame, or the path of a Parquet or CSV file"
    )


def _read_file(path: Path, file_format: str | None) -> pa.Table:
    if not path.exists():
        raise DataFileNotFoundError(f"no data file {str(path)!r} to append to the root table")
    fmt = (file_format or path.suffix.lstrip(".")).lower()
    try:
        if fmt in ("parquet", "pq"):
            import pyarrow.parquet as pq

            return pq.read_table(path)
        if fmt == "csv":
            import pyarrow.csv as pcsv

            return pcsv.read_csv(path)
    except (pa.ArrowException, OSError) as exc:  # not a Parquet file, an empty CSV, a folder, ...
        raise RootDataError(f"cannot read {str(path)!r} as a {fmt.replace('pq', 'parquet')} file to append to the "
                            f"root table: {exc}") from exc
    raise RootDataError(
        f"cannot tell the format of {str(path)!r} (suffix {path.suffix!r}): name a .parquet or .csv "
        "file, or pass file_format='parquet' or 'csv'"
    )


def _version_of_run(table: DeltaTable, run_key: str) -> int:
    """The version whose commit carries ``run_key`` (newest 1,000 commits), else the latest."""
    for commit in table.history(1000):
        if commit.get(RUN_KEY) == run_key:
            return int(commit["version"])
    return int(table.version())


__all__ = ["APP_ID_PREFIX", "ROWS_KEY", "RUN_KEY", "AppendResult", "append_to_root", "to_arrow"]
