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
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from airflow_provider_tsb.delta.log import normalize_location, table_exists
from airflow_provider_tsb.delta.storage import storage_options

#: commit metadata key marking the newest version of a root table as the end of its input
END_OF_INPUT = "tsb.end_of_input"


def append_rows(
    location: str, rows: pa.Table, *, metadata: dict[str, Any] | None = None, end_of_input: bool = False
) -> int:
    """Append ``rows`` to the root table at ``location`` (created if missing); one commit.

    Args:
        location: table location.
        rows: Arrow table (its schema becomes the table schema on creation).
        metadata: extra commit metadata (e.g. ``{"ingest.day": "2013-01-01"}``).
        end_of_input: mark this commit as the end of a bounded input (FLIP-147).

    Returns:
        The new Delta version.
    """
    loc = normalize_location(location)
    meta = {**(metadata or {}), **({END_OF_INPUT: "true"} if end_of_input else {})}
    write_deltalake(
        loc,
        rows,
        mode="append",
        commit_properties=CommitProperties(custom_metadata=meta) if meta else None,
        storage_options=storage_options(loc),
    )
    return DeltaTable(loc, storage_options=storage_options(loc)).version()


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
    """
    loc = normalize_location(location)
    if not table_exists(loc):
        return False
    history = DeltaTable(loc, storage_options=storage_options(loc)).history(1)
    if not history or str(history[0].get(END_OF_INPUT, "")).lower() != "true":
        return False
    return since_ms is None or int(history[0].get("timestamp") or 0) >= since_ms


def append_words(location: str, words: list[str]) -> int:
    """Append ``words`` (one row each, column ``word``) to a words root table; the new version."""
    return append_rows(location, pa.table({"word": pa.array(words, pa.string())}))


def event_time_watermark(location: str, version: int, column: str) -> int | None:
    """Max of ``column`` at Delta ``version`` in epoch ms, from the files' statistics (no data scan).

    Dates count from their midnight UTC; naive timestamps are read as UTC; numbers are taken as
    epoch ms already. Returns ``None`` for an empty table or a column without statistics.

    Cost: the version's cached :class:`~airflow_provider_tsb.delta.snapshots.Snapshot` (the
    barrier's root versions were just read, so usually an incremental update of the latest
    table), not a fresh load of the log.
    """
    from airflow_provider_tsb.delta.snapshots import snapshot_at

    actions = snapshot_at(location, version).add_actions
    name = f"max.{column}"
    if name not in actions.schema.names or actions.num_rows == 0:
        return None
    values = [v for v in actions.column(name).to_pylist() if v is not None]
    if not values:
        return None
    newest = max(values)
    if isinstance(newest, dt.datetime):
        if newest.tzinfo is None:
            newest = newest.replace(tzinfo=dt.UTC)
        return int(newest.timestamp() * 1000)
    if isinstance(newest, dt.date):
        return int(dt.datetime(newest.year, newest.month, newest.day, tzinfo=dt.UTC).timestamp() * 1000)
    return int(newest)
