"""Root-table ingestion with delta-rs (root tables are written from outside the topology).

End of input (FLIP-147): a bounded input says it is exhausted by committing its last version
with the commit metadata ``tsb.end_of_input = "true"`` (:func:`mark_end_of_input`, or
``append_rows(..., end_of_input=True)``). The marker is durable in the table's own Delta log;
:func:`input_ended` reads it. The barrier emitter generates a final barrier once every root
table of a topology has ended at its newest version; a later append (without the marker)
reopens the input.

Event time: :func:`event_time_watermark` reads the newest event time of a root table at a
version from the ``max`` statistics of its ``add`` actions (Delta protocol, "Per-file
Statistics"), without scanning data.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.delta.arrow_rows import stream_table
from airflow_provider_tsb.delta.commit_fold import UNKNOWN, CommitFold
from airflow_provider_tsb.delta.compaction import Compaction
from airflow_provider_tsb.delta.log import commit_info, normalize_location, table_exists
from airflow_provider_tsb.delta.snapshots import commit_fingerprint, newer_commit_possible, newest_version
from airflow_provider_tsb.delta.storage import storage_options
from airflow_provider_tsb.exceptions import TableNotFoundError

#: commit metadata key marking the newest version of a root table as the end of its input
END_OF_INPUT = "tsb.end_of_input"
#: commit metadata key of a root table's auto compaction commit (:func:`append_rows`)
COMPACTION = "tsb.compaction"
#: commits an event-time watermark is moved forward over, one by one, at most
MAX_STEP = 100
#: root tables (and columns) whose last watermark is kept, and root tables whose writer table is kept
MAX_WATERMARKS = 256
_writers: dict[str, tuple[DeltaTable, tuple[int, int] | None]] = CACHES.add("delta.roots.writers", {})
_writers_lock = threading.Lock()



def append_rows(
    location: str, rows: pa.Table, *, metadata: dict[str, Any] | None = None, end_of_input: bool = False,
    compaction: Compaction | None = None,
) -> int:
    """Append ``rows`` to the root table at ``location`` (created if missing); one commit, and
    with ``compaction`` a second one when the table's small files reach its ``min_files``.

    Cost: after the first call per location, the commit alone: the append goes through this
    process's loaded table, moved to the newest commit on disk first (one ``stat`` when no other
    writer committed since; ``update_incremental`` otherwise), not a load of the table per append
    (docs/benchmarks.md, "Root-table appends").

    Args:
        location: table location.
        rows: Arrow table (its schema becomes the table schema on creation).
        metadata: extra commit metadata (e.g. ``{"ingest.day": "2013-01-01"}``).
        end_of_input: mark this commit as the end of a bounded input (FLIP-147).
        compaction: auto compaction (Databricks' ``autoCompact`` rule, :mod:`.compaction`):
            once the table has ``min_files`` files below ``target_bytes``, they are rewritten
            right after the append (``optimize.compact``, a ``dataChange = false`` commit that
            change readers skip). A streaming ingest appends a small file per barrier; without
            it every later append, read and expiry of the table costs more (an append's cost
            grows with the table's live files, ``benchmarks/barrier_rate.py``).
            Never with ``end_of_input``: the marker must stay the newest commit.

    Returns:
        The new Delta version: the append's, or the compaction's when one followed it.

    Raises:
        Exception: delta-rs's error when the commit fails (a schema that does not match the
            table's names the fields); the loaded table is dropped and loaded again next time.
    """
    loc = normalize_location(location)
    meta = {**(metadata or {}), **({END_OF_INPUT: "true"} if end_of_input else {})}
    props = CommitProperties(custom_metadata=meta) if meta else None
    with _writers_lock:
        try:
            table = _writer_table(loc)
            if table is None:
                write_deltalake(loc, rows, mode="append", commit_properties=props, storage_options=storage_options(loc))
                table = DeltaTable(loc, storage_options=storage_options(loc))
            else:
                write_deltalake(table, rows, mode="append", commit_properties=props)
            if compaction is not None and not end_of_input:
                compact_small_files(table, compaction)  # under _writers_lock: this process's appends wait
            _remember_writer(loc, table)
            return table.version()
        except Exception:
            _writers.pop(loc, None)
            raise


def compact_small_files(table: DeltaTable, options: Compaction) -> bool:
    """Rewrite ``table``'s files below ``options.target_bytes`` into files of about that size
    once they number ``options.min_files`` (Databricks' ``autoCompact`` rule): delta-rs's
    ``optimize.compact``, one ``dataChange = false`` commit with commit info ``tsb.compaction``,
    which change readers skip (Delta protocol "Add File and Remove File"). The auto compaction of
    :func:`append_rows` and of :func:`~airflow_provider_tsb.root_tables.append_to_root`.

    Args:
        table: the root table, loaded at its newest version (moved to the compaction's).
        options: when to compact.

    Returns:
        Whether it compacted.

    Raises:
        Exception: delta-rs's error when the commit fails (the table keeps its small files).
    """
    sizes = stream_table(table.get_add_actions(flatten=True)).column("size_bytes").to_pylist()
    if sum(1 for size in sizes if size < options.target_bytes) < options.min_files:
        return False
    table.optimize.compact(target_size=options.target_bytes,
                           commit_properties=CommitProperties(custom_metadata={COMPACTION: "auto"}))
    return True


def _writer_table(loc: str) -> DeltaTable | None:
    """This process's loaded table at ``loc`` (normalized), at the newest commit on disk; ``None``
    when there is no table yet. The table is loaded again when the commit file of the version it
    holds changed (the table was deleted and created again) or ``update_incremental`` fails (its
    log cleaned up under it), as :func:`~.snapshots.latest_table` does. Called under ``_writers_lock``."""
    entry = _writers.get(loc)
    table = None
    if entry is not None and commit_fingerprint(loc, entry[0].version()) == entry[1]:
        table = entry[0]
        if newer_commit_possible(loc, table.version()):
            try:
                table.update_incremental()
            except Exception:
                table = None
    if table is None:
        if not table_exists(loc):
            return None
        table = DeltaTable(loc, storage_options=storage_options(loc))
    return table


def _remember_writer(loc: str, table: DeltaTable) -> None:
    """Keep ``table`` with its head commit's fingerprint (at most :data:`MAX_WATERMARKS` tables)."""
    _writers.pop(loc, None)
    if len(_writers) >= MAX_WATERMARKS:
        _writers.pop(next(iter(_writers)))
    _writers[loc] = (table, commit_fingerprint(loc, table.version()))


def mark_end_of_input(location: str, *, metadata: dict[str, Any] | None = None) -> int:
    """Commit an empty append marked ``tsb.end_of_input``: the input of this root table ended.

    Returns the new Delta version. Raises :class:`ValueError` naming the location when the
    table does not exist (there is no schema to append an empty batch with).
    """
    loc = normalize_location(location)
    if not table_exists(loc):
        raise ValueError(f"cannot mark the end of input of {loc!r}: the root table does not exist yet")
    schema = DeltaTable(loc, storage_options=storage_options(loc)).schema().to_arrow()
    empty = pa.Table.from_batches([], schema=pa.schema(schema))
    return append_rows(loc, empty, metadata=metadata, end_of_input=True)


def input_ended(location: str, since_ms: int | None = None) -> bool:
    """True when the newest version of the root table at ``location`` is marked end of input.

    ``since_ms``: count only a mark committed at or after this time (epoch ms, the Delta
    commit's ``timestamp``): a streaming run ignores the mark a previous run left, else its
    first barrier would be a final one and the new data would never get barriers.

    Cost: the newest version by ``stat`` (:func:`~airflow_provider_tsb.delta.snapshots.newest_version`)
    and one read of that commit file; the emitter asks every interval (loading the table for its
    ``history(1)`` would cost a log replay growing with the log). ``False`` when no table is at
    ``location``.
    """
    loc = normalize_location(location)
    try:
        info = commit_info(loc, newest_version(loc)) or {}
    except TableNotFoundError:
        return False
    if str(info.get(END_OF_INPUT, "")).lower() != "true":
        return False
    return since_ms is None or int(info.get("timestamp") or 0) >= since_ms


def append_words(location: str, words: list[str]) -> int:
    """Append ``words`` (one row each, column ``word``) to a words root table; the new version."""
    return append_rows(location, pa.table({"word": pa.array(words, pa.string())}))


def event_time_watermark(location: str, version: int, column: str) -> int | None:
    """Max of ``column`` at Delta ``version`` in epoch ms, from the files' statistics (no data scan).

    Dates count from their midnight UTC; naive timestamps are read as UTC; numbers are taken as
    epoch ms already. Returns ``None`` for an empty table or a column without statistics.

    Cost: flat in the table's history. The watermark computed last for the table (this process)
    is moved forward with the ``add`` actions of the commits since (one commit-file read each,
    their ``maxValues``; :class:`~airflow_provider_tsb.delta.commit_fold.CommitFold`): a root
    table only grows between barriers. The version's snapshot (every live file's statistics,
    :func:`~airflow_provider_tsb.delta.snapshots.snapshot_at`) is read the first time, for an
    older version, after a commit that removed a file (a delete can lower the max) or changed the
    metadata, over more than :data:`MAX_STEP` commits, on object stores, or when the table was
    created again.
    """
    return _WATERMARKS.at(location, version, column)


def _watermark_step(mark: int | None, actions: list[Mapping[str, Any]], column: str) -> int | None:
    """The watermark after one commit: its ``add`` actions raise it to their ``maxValues[column]``;
    a ``remove`` with ``dataChange`` or a ``metaData`` action cannot be applied (:data:`UNKNOWN`).
    A compaction's ``remove`` (``dataChange = false``) keeps every row in the table, so it keeps
    the max."""
    for action in actions:
        remove = action.get("remove")
        if "metaData" in action or (remove is not None and remove.get("dataChange", True)):
            return UNKNOWN
        add = action.get("add")
        value = _stats_max(add.get("stats"), column) if add is not None else None
        if value is not None:
            mark = value if mark is None else max(mark, value)
    return mark


def _watermark_from_snapshot(loc: str, version: int, column: str) -> int | None:
    return _snapshot_watermark(loc, version, column)  # looked up at call time (tests count the reads)


_WATERMARKS: CommitFold[int | None] = CACHES.add("delta.roots.watermarks", CommitFold(
    _watermark_step, _watermark_from_snapshot, max_step=MAX_STEP, max_tables=MAX_WATERMARKS))


def _stats_max(stats: str | None, column: str) -> int | None:
    """``maxValues[column]`` of an ``add`` action's stats JSON in epoch ms (Delta protocol
    "Per-file Statistics": timestamps and dates as ISO-8601 strings), ``None`` without one."""
    value = (json.loads(stats) if stats else {}).get("maxValues", {}).get(column)
    if value is None or isinstance(value, dict):
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value) if "T" in value or " " in value else dt.date.fromisoformat(value)
    return _epoch_ms(value)


def _snapshot_watermark(loc: str, version: int, column: str) -> int | None:
    """The watermark at ``version`` from every live file's statistics (the version's snapshot)."""
    from airflow_provider_tsb.delta.snapshots import snapshot_at

    actions = snapshot_at(loc, version).add_actions
    name = f"max.{column}"
    if name not in actions.schema.names or actions.num_rows == 0:
        return None
    values = actions.column(name)
    if values.null_count == len(values):
        return None
    return _max_epoch_ms(values)


def _max_epoch_ms(values: pa.ChunkedArray) -> int:
    """The largest of non-empty ``values`` as :func:`_epoch_ms` gives it, computed in Arrow:
    ``to_pylist()`` of a zoned timestamp column would import pandas for its time zone."""
    top, kind = pc.max(values), values.type
    if pa.types.is_timestamp(kind):
        raw = top.cast(pa.int64()).as_py()
        return raw * 1000 if kind.unit == "s" else raw // {"ms": 1, "us": 1_000, "ns": 1_000_000}[kind.unit]
    if pa.types.is_date32(kind):
        return top.cast(pa.int32()).as_py() * 86_400_000
    if pa.types.is_date64(kind):
        return top.cast(pa.int64()).as_py()
    return _epoch_ms(top.as_py())


def _epoch_ms(value: Any) -> int:
    """A statistic as epoch ms: a timestamp (naive: UTC), a date (its midnight UTC), a number."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return (value - _EPOCH) // _MS  # exact, and floored before 1970 too
    if isinstance(value, dt.date):
        return (dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC) - _EPOCH) // _MS
    return int(value)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MS = dt.timedelta(milliseconds=1)
