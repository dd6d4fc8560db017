"""A blind append of one small Parquet file to a local Delta table, its commit file written directly.

What barrier generation pays for its barrier-log row (:mod:`.barrier_log`). delta-rs's commit
of a one-row append costs time in proportion to the table's live files, as it moves its loaded
snapshot past the commit (``write_deltalake`` on a kept ``DeltaTable``); this append writes one
Parquet file and one commit file, so its cost is flat in the table's length (docs/benchmarks.md,
"Barrier-log appends").

The commit is the one the Delta protocol defines for a blind append ("Delta Log Entries",
"Add File and Remove File", "Transaction Identifiers", "Commit Provenance Information"): a
``commitInfo`` (``operation`` ``WRITE``, ``isBlindAppend``), the given ``txn`` and one ``add``
with the file's statistics ("Per-file Statistics"). It is made atomic by put-if-absent: the
commit is written to a temporary file in ``_delta_log`` and hard-linked to
``<version>.json``, which fails if another writer took that version (delta-rs's own local
commit uses a no-replace rename the same way); the append then takes the next version, as a
blind append conflicts with no data commit (Delta's "Optimistic Concurrency Control": it reads
no data; only a protocol or schema change could invalidate it, and the caller owns the table's
protocol and schema, as tsb owns its barrier logs).

Only where that is the whole protocol: a local table whose protocol is reader 1 / writer at
most 2 (no column mapping, constraints, generated or identity columns, deletion vectors or
table features; :func:`supports_direct_append`). Anything else, and every object store, goes
through delta-rs.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_tsb.delta.log import LOG_DIR, normalize_location
from airflow_provider_tsb.delta.snapshots import newest_version
from airflow_provider_tsb.delta.stats import footer_stats
from airflow_provider_tsb.exceptions import DeltaLogError

#: The highest writer protocol version whose blind appends need only the actions written here
#: (Delta protocol "Writer Version Requirements": 2 adds ``appendOnly`` and column invariants,
#: which a blind append of rows that satisfy the schema keeps).
MAX_WRITER_VERSION = 2
#: Versions taken by other writers before the append gives up.
MAX_VERSION_ATTEMPTS = 1000
ENGINE_INFO = "airflow-provider-tsb"


def supports_direct_append(location: str, min_reader_version: int, min_writer_version: int) -> bool:
    """Whether :func:`append_file` may append to the table at ``location`` with this protocol:
    a local table (no ``://``), reader version 1 and writer version at most
    :data:`MAX_WRITER_VERSION` (Delta protocol "Protocol Evolution")."""
    return ("://" not in normalize_location(location) and min_reader_version <= 1
            and min_writer_version <= MAX_WRITER_VERSION)


def append_file(
    location: str, rows: pa.Table, *, app_id: str, txn_version: int, metadata: Mapping[str, str] | None = None,
) -> int:
    """Append ``rows`` to the local Delta table at ``location`` as one Parquet file, in one commit
    carrying ``txn(app_id, txn_version)`` and ``metadata`` in its ``commitInfo``.

    The caller checked :func:`supports_direct_append` and that ``rows`` has the table's schema.
    Cost: one Parquet write, one footer read and one commit file, flat in the table's length
    (module doc).

    Args:
        location: a local table root (path or ``file://`` URI).
        rows: the rows, in the table's schema (written as they are: no schema check here).
        app_id, txn_version: the commit's Delta ``txn`` (an application's transaction id and its
            version, a barrier id for the barrier log).
        metadata: string entries added to ``commitInfo`` (e.g. ``tsb.barrier_log.barrier``).

    Returns:
        The Delta version of the commit.

    Raises:
        TableNotFoundError: no Delta table at ``location`` (nothing written).
        DeltaLogError: :data:`MAX_VERSION_ATTEMPTS` versions
            were taken by other writers (message names the table).
        OSError: the file system refused the data or the commit file.
    """
    loc = normalize_location(location)
    newest = newest_version(loc)  # raises for a missing table before any file is written
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    pq.write_table(rows, os.path.join(loc, name), compression="snappy")
    size = os.path.getsize(os.path.join(loc, name))
    num_records, stats = footer_stats(pafs.LocalFileSystem(), os.path.join(loc, name))
    actions = _blind_append_actions(name, size, num_records, stats, app_id, txn_version, metadata or {})
    log_dir = os.path.join(loc, LOG_DIR)
    temporary = os.path.join(log_dir, f".tsb-{uuid.uuid4()}.json.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write("\n".join(json.dumps(action, separators=(",", ":")) for action in actions) + "\n")
    try:
        version = newest + 1
        for _ in range(MAX_VERSION_ATTEMPTS):
            try:
                os.link(temporary, os.path.join(log_dir, f"{version:020d}.json"))
                return version
            except FileExistsError:  # another writer took it: a blind append takes the next
                version += 1
        raise DeltaLogError(
            f"cannot append to the Delta table at {loc!r}: {MAX_VERSION_ATTEMPTS} versions in a row were "
            "taken by other writers; retry"
        )
    finally:
        os.unlink(temporary)


def _blind_append_actions(
    name: str, size: int, num_records: int, stats: str, app_id: str, txn_version: int, metadata: Mapping[str, str],
) -> list[dict[str, Any]]:
    """The actions of a blind append of one file: ``commitInfo``, ``txn`` and ``add`` (module doc)."""
    now_ms = int(time.time() * 1000)
    commit_info = {
        "timestamp": now_ms, "operation": "WRITE", "operationParameters": {"mode": "Append"},
        "isBlindAppend": True, "engineInfo": ENGINE_INFO,
        "operationMetrics": {"num_added_files": 1, "num_removed_files": 0, "num_added_rows": num_records},
        **dict(metadata),
    }
    return [
        {"commitInfo": commit_info},
        {"txn": {"appId": app_id, "version": int(txn_version), "lastUpdated": now_ms}},
        {"add": {"path": name, "partitionValues": {}, "size": size, "modificationTime": now_ms,
                 "dataChange": True, "stats": stats}},
    ]
