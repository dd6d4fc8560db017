"""The barrier log: every barrier of a topology as one row of a Delta table.

The metastore is an index; the Delta logs are the durable truth (docs/design.md "Durability").
A job's commit carries the barrier it wrote (:mod:`.conventions`), but what a barrier *is* --
its timestamp and the Delta version of every root table at generation (FLIP-276 "Timestamp
Barrier": the (barrier, offset) map that makes replay deterministic) -- would otherwise live
only in the metastore. The barrier log keeps it in Delta, so ``tsb db rebuild`` can restore a
lost metastore (:mod:`airflow_provider_tsb.maintenance.rebuild`).

Location (a convention, one table per topology): ``<warehouse>/_tsb/<topology>/barrier_log``,
where ``<warehouse>`` is the topology's ``warehouse`` (default
:func:`~airflow_provider_tsb.lineage.default_warehouse`): :func:`barrier_log_location`.

Schema, one row per barrier:

* ``topology`` string, ``barrier`` long (the id), ``ts_ms`` long (barrier timestamp, epoch ms),
  ``ts_kind`` string (``system`` or ``event``), ``final`` boolean (FLIP-147 end of input),
  ``created_at_ms`` long (generation time, epoch ms), ``run_key`` string (nullable: the
  idempotency key of the generation), ``root_versions`` map<string, long> (root table name ->
  Delta version recorded at the barrier).

Each barrier is one Delta commit carrying the app transaction
``txn(appId="tsb-barrier-log:<topology>", version=<barrier>)`` (Delta protocol "Transaction
Identifiers"), so the newest barrier in the log is the newest commit's
(:func:`logged_barrier`), and commit metadata ``tsb.barrier_log.barrier``. Once the log exists,
a local log's rows are appended by tsb's own blind-append commits
(:func:`~airflow_provider_tsb.delta.direct_append.append_file`; delta-rs creates the log,
replaces a leftover row, compacts it, and writes every commit to an object store). Barrier generation
writes the row under the topology lock *before* the metastore transaction that makes the
barrier visible commits (:meth:`~airflow_provider_tsb.metastore.barriers.BarrierManager.create`):
a crash in between leaves a log row for a barrier no job ever saw, and the next generation
replaces that row (a predicate overwrite of ``barrier = n``: still one row per barrier). Every
:data:`COMPACT_EVERY` barriers the log's one-row files are compacted into one, checkpointed and
its older commit files deleted (:func:`_maintain`), so a generation costs the same after a
million barriers as after a hundred. The maintenance runs on a thread of its own, after the
generation that started it returned, so no generation waits for it (:func:`wait_maintenance`).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.delta.arrow_rows import rows_table
from airflow_provider_tsb.delta.direct_append import append_file, supports_direct_append
from airflow_provider_tsb.delta.log import (
    native_filesystem,
    normalize_location,
    read_commit_actions,
    transaction_version,
    txn_version_of,
)
from airflow_provider_tsb.delta.snapshots import latest_table_or_none, newer_commit_possible, newest_version
from airflow_provider_tsb.delta.storage import storage_options
from airflow_provider_tsb.exceptions import DeltaLogError, TableNotFoundError
from airflow_provider_tsb.lineage import default_warehouse

log = logging.getLogger("airflow_provider_tsb.delta")

#: Folder under the warehouse holding tsb's own tables.
TSB_DIR = "_tsb"
#: Delta txn appId prefix of barrier-log commits (``tsb-barrier-log:<topology>``).
APP_ID_PREFIX = "tsb-barrier-log:"
#: Commit metadata key: the barrier a barrier-log commit holds.
LOG_BARRIER_KEY = "tsb.barrier_log.barrier"

#: Barrier-log commits between two compactions of its one-row files. A generation's own append
#: is flat in the log's length (:mod:`.direct_append`), but a delta-rs commit to the log (a
#: crash leftover's replacement, an object store, the compaction itself) and every reader's load
#: cost time in proportion to its live files, and a compaction brings that cost back down
#: (``benchmarks/generation_history.py``).
COMPACT_EVERY = 100

#: The barrier log's table properties, set when it is created (and on a log created before
#: them). The log is read only at its newest version (:func:`logged_barrier`,
#: :func:`read_barrier_log`), so its commit files need not outlive the next checkpoint but one:
#: its maintenance (:func:`_maintain`) checkpoints after each compaction and deletes, oldest
#: first, the log files below the checkpoint before (:func:`_cleanup_behind`). With Delta's default
#: of 30 days of commits a generation would list every commit of the last month, as delta-rs lists
#: the whole ``_delta_log`` of a local table at each commit (an append's cost grows with the log
#: files listed). delta-rs's own checkpoints (``delta.checkpointInterval``, every 100 commits) and
#: its own cleanup (``delta.enableExpiredLogCleanup``) are turned off: its cleanup deletes by age,
#: in listing order, so at a high barrier rate it can delete a commit a generation is reading
#: while older commit files are still there. ``delta.logRetentionDuration`` stays short for a log
#: created before that.
LOG_PROPERTIES = {"delta.logRetentionDuration": "interval 10 seconds", "delta.checkpointInterval": "1000000000",
                  "delta.enableExpiredLogCleanup": "false"}

#: The barrier logs this process writes, each kept loaded and moved forward incrementally, so
#: a generation does not load the log from its last checkpoint again (``_writer_table``).
_writers: dict[str, DeltaTable] = CACHES.add("delta.barrier_log.writers", {})
_writers_lock = threading.Lock()
#: Commits :func:`logged_barrier` reads back from the newest for the newest ``txn`` before it asks
#: the snapshot: a compaction's commit carries none, and without it the generation after a
#: maintenance would pay a snapshot update over the last :data:`COMPACT_EVERY` commits.
TXN_LOOK_BACK = 8
#: Per barrier log this process writes: whether it appends with its own commit files (``_appends_directly``).
_direct: dict[str, bool] = CACHES.add("delta.barrier_log.direct", {})
#: Commit attempts of the log's compaction before it takes :data:`_writers_lock` (delta-rs's
#: ``max_commit_retries``; its default of 15 attempts can all fail beside a generation appending
#: in a tight loop on a loaded machine: each attempt lands only if no generation commits between
#: delta-rs's listing of the newest version and its put-if-absent of the next).
COMPACT_COMMIT_RETRIES = 100
#: The barrier logs whose maintenance is running on its own thread (one at a time per log).
_maintenance: dict[str, threading.Thread] = {}

SCHEMA = pa.schema(
    [
        pa.field("topology", pa.string(), nullable=False),
        pa.field("barrier", pa.int64(), nullable=False),
        pa.field("ts_ms", pa.int64(), nullable=False),
        pa.field("ts_kind", pa.string(), nullable=False),
        pa.field("final", pa.bool_(), nullable=False),
        pa.field("created_at_ms", pa.int64(), nullable=False),
        pa.field("run_key", pa.string()),
        pa.field("root_versions", pa.map_(pa.string(), pa.int64())),
    ]
)


@dataclass(frozen=True)
class BarrierLogEntry:
    """One barrier as the barrier log holds it (see module doc for the units)."""

    topology: str
    barrier: int
    ts_ms: int
    ts_kind: str
    final: bool
    created_at_ms: int
    run_key: str | None
    root_versions: dict[str, int] = field(default_factory=dict)


def barrier_log_location(warehouse: str | None, topology: str) -> str:
    """``<warehouse>/_tsb/<topology>/barrier_log`` (a URI warehouse keeps its scheme).

    ``warehouse``: the topology's ``Topology(warehouse=...)``; ``None`` means
    :func:`~airflow_provider_tsb.lineage.default_warehouse` (``$TSB_WAREHOUSE``, else
    ``$AIRFLOW_HOME/tsb-warehouse``), as for its tables.
    """
    if warehouse is None:
        warehouse = default_warehouse()
    if "://" in warehouse:
        return f"{warehouse.rstrip('/')}/{TSB_DIR}/{topology}/barrier_log"
    return os.path.join(warehouse, TSB_DIR, topology, "barrier_log")


def log_app_id(topology: str) -> str:
    """The Delta txn appId of ``topology``'s barrier-log commits."""
    return f"{APP_ID_PREFIX}{topology}"


def logged_barrier(location: str, topology: str) -> int | None:
    """The newest barrier written to the log (its txn version); ``None`` without a log.

    Every log commit carries the topology's ``txn``, so the newest commit answers (Delta protocol
    "Transaction Identifiers": an application's later ``txn`` replaces an earlier one). Cost
    (local logs): the newest version by probing commit files
    (:func:`~airflow_provider_tsb.delta.snapshots.newest_version`, flat in the log's length)
    and one read of that commit; when it holds no ``txn`` of the topology (the log's compaction,
    :func:`_maintain`), the commits before it, newest first, up to :data:`TXN_LOOK_BACK` (the
    first ``txn`` found is the newest); the cached snapshot's incremental update and delta-rs's
    txn look-up only past those (a log written by hand).
    """
    loc = normalize_location(location)
    app_id = log_app_id(topology)
    try:
        version = newest_version(loc)
    except TableNotFoundError:
        return None
    for back in range(version, max(-1, version - TXN_LOOK_BACK), -1):
        actions = read_commit_actions(loc, back)
        if actions is None:  # cleaned up behind a checkpoint: the snapshot answers
            break
        found = txn_version_of(actions, app_id)
        if found is not None:
            return found
    table = latest_table_or_none(loc)
    if table is None:
        return None
    return transaction_version(table, loc, app_id)


def write_barrier(location: str, entry: BarrierLogEntry, *, replace: bool = False) -> None:
    """Append ``entry`` to the barrier log at ``location`` in one Delta commit (table created if missing).

    Args:
        replace: the log holds a row for ``entry.barrier`` already (left by a generation that
            crashed before its metastore commit): replace it in the same commit.

    Raises:
        DeltaLogError: the commit failed (the message names the log and the barrier).
    """
    row = {
        "topology": entry.topology, "barrier": int(entry.barrier), "ts_ms": int(entry.ts_ms),
        "ts_kind": str(entry.ts_kind), "final": bool(entry.final), "created_at_ms": int(entry.created_at_ms),
        "run_key": entry.run_key, "root_versions": sorted((str(k), int(v)) for k, v in entry.root_versions.items()),
    }
    props = CommitProperties(
        custom_metadata={LOG_BARRIER_KEY: str(entry.barrier)},
        app_transactions=[Transaction(log_app_id(entry.topology), int(entry.barrier))],
    )
    loc = normalize_location(location)
    if replace:
        wait_maintenance(loc)  # the row it replaces may be in the files a running compaction rewrites
    try:
        if "://" not in loc:
            os.makedirs(loc, exist_ok=True)
        with _writers_lock:
            if not replace and _appends_directly(loc):
                target = True
                append_file(loc, rows_table([row], SCHEMA), app_id=log_app_id(entry.topology),
                            txn_version=int(entry.barrier), metadata={LOG_BARRIER_KEY: str(entry.barrier)})
            else:
                if _direct.get(loc):  # the loaded log is behind the direct appends, maybe behind a cleanup
                    _writers.pop(loc, None)
                table = _writer_table(loc)
                target = table is not None
                write_deltalake(
                    table if table is not None else loc, rows_table([row], SCHEMA),
                    mode="overwrite" if replace else "append",
                    predicate=f"barrier = {int(entry.barrier)}" if replace else None, commit_properties=props,
                    configuration=LOG_PROPERTIES if table is None else None,
                    storage_options=storage_options(loc) if table is None else None,
                )
    except Exception as exc:
        _writers.pop(loc, None)  # reload after a failure: the cached table may be stale or broken
        _direct.pop(loc, None)
        raise DeltaLogError(
            f"cannot write barrier {entry.barrier} of topology {entry.topology!r} to its barrier log at "
            f"{loc!r}: {exc}; the barrier was not generated"
        ) from exc
    if target and entry.barrier % COMPACT_EVERY == 0:
        _start_maintenance(loc, entry.barrier)


def wait_maintenance(location: str, timeout: float | None = None) -> bool:
    """Wait for the maintenance of the barrier log at ``location`` this process started, if one runs.

    Args:
        timeout: seconds to wait at most; ``None`` waits until it ends.

    Returns:
        Whether no maintenance of the log runs in this process any more.
    """
    thread = _maintenance.get(normalize_location(location))
    if thread is not None:
        thread.join(timeout)
        return not thread.is_alive()
    return True


def _start_maintenance(loc: str, barrier: int) -> None:
    """Run :func:`_maintain` on a thread of its own, unless the log's last one still runs (the next
    :data:`COMPACT_EVERY` barriers start another). The thread is not a daemon: a process that
    generated a barrier waits for it before it exits, so a short-lived generator (``tsb barrier``)
    still keeps its log short."""
    with _writers_lock:
        running = _maintenance.get(loc)
        if running is not None and running.is_alive():
            return
        thread = _maintenance[loc] = threading.Thread(
            target=_maintain, args=(loc, barrier), name=f"tsb-barrier-log-maintenance:{loc}")
        thread.start()


def _maintain(loc: str, barrier: int) -> None:
    """The log's maintenance, every :data:`COMPACT_EVERY` barriers: its one-row files rewritten
    into one (``optimize.compact``, a ``dataChange=false`` commit), a checkpoint, and the log
    files below the checkpoint before it deleted, oldest first (:func:`_cleanup_behind`).

    It runs beside the generations that go on (:func:`_start_maintenance`), on a table of its
    own: a generation's append and the compaction commit concurrently, and delta-rs's conflict
    check lets both land (a compaction is ``dataChange=false``, so it commits at snapshot isolation
    over a blind append: the Delta protocol's ``dataChange`` flag of "Add File and Remove File",
    delta-rs's ``ConflictChecker``). So the compaction restates no ``txn``: a later barrier's commit may land
    before it, and :func:`logged_barrier` answers from the snapshot when the newest commit is the
    compaction. A failure is logged, not raised: every row is committed already, the log is
    correct without its maintenance, and the next one retries."""
    try:
        table = DeltaTable(loc, storage_options=storage_options(loc))
        _compact(table)
        table.create_checkpoint()
        _cleanup_behind(loc, table.version())
    except Exception as exc:
        log.warning("the maintenance of the barrier log at %r after barrier %s failed: %s", loc, barrier, exc)


def _cleanup_behind(loc: str, checkpoint: int) -> None:
    """Delete the log files below the newest checkpoint before ``checkpoint``, oldest first
    (:func:`~airflow_provider_tsb.delta.log_cleanup.cleanup_metadata`, Delta protocol "Metadata
    Cleanup"). A reader that loaded the log since that checkpoint (a maintenance ago, the last
    :data:`COMPACT_EVERY` barriers) finds every commit it steps through; the log keeps at most
    two maintenances' commits."""
    from airflow_provider_tsb.delta.log_cleanup import cleanup_metadata, list_log

    before = [v for v in list_log(loc).checkpoints if v < checkpoint]
    if before:
        cleanup_metadata(loc, max(before))


def _compact(table: DeltaTable) -> None:
    """Compact the log's one-row files (:func:`_maintain`). The compaction commits beside this
    process's generations, retrying over theirs (:data:`COMPACT_COMMIT_RETRIES`); should they win
    every attempt, it compacts once more under :data:`_writers_lock`, where they wait for it, so a
    log written in a tight loop is still compacted.

    Raises:
        CommitFailedError: the compaction lost to another process's writer even then.
    """
    try:
        table.optimize.compact(commit_properties=CommitProperties(max_commit_retries=COMPACT_COMMIT_RETRIES))
        return
    except CommitFailedError as exc:
        log.info("the compaction of the barrier log at %r lost to its writers (%s); compacting under their lock",
                 table.table_uri, exc)
    with _writers_lock:
        table.update_incremental()
        table.optimize.compact()


def _writer_table(loc: str) -> DeltaTable | None:
    """This process's loaded barrier log at ``loc``, moved to its newest commit (``None``: no log
    yet; ``write_deltalake`` creates it from the location). Called under ``_writers_lock``."""
    from airflow_provider_tsb.delta.log import table_exists
    table = _writers.get(loc)
    if table is not None and newer_commit_possible(loc, table.version()):  # else ours was the last commit
        try:
            table.update_incremental()
        except Exception:  # another process's commits, cleaned up since (LOG_RETENTION): load again
            table = None
    if table is None:
        if not table_exists(loc):
            return None
        table = _writers[loc] = DeltaTable(loc, storage_options=storage_options(loc))
        configuration = table.metadata().configuration or {}
        if any(configuration.get(key) != value for key, value in LOG_PROPERTIES.items()):
            table.alter.set_table_properties(LOG_PROPERTIES)  # a log written before LOG_PROPERTIES
    return table


def _appends_directly(loc: str) -> bool:
    """Whether this process appends to the barrier log at ``loc`` with its own commit files
    (:func:`~airflow_provider_tsb.delta.direct_append.append_file`, flat in the log's length)
    rather than delta-rs's (which costs more as the log grows between maintenances): a local log
    that exists, with a protocol such commits are the whole of. Checked once per log and process
    (on its first load, :func:`_writer_table`, which also sets :data:`LOG_PROPERTIES`). Called
    under ``_writers_lock``."""
    known = _direct.get(loc)
    if known is None:
        table = _writer_table(loc)
        if table is None:
            return False
        protocol = table.protocol()
        known = _direct[loc] = supports_direct_append(loc, protocol.min_reader_version, protocol.min_writer_version)
    return known


def read_barrier_log(location: str) -> list[BarrierLogEntry]:
    """Every barrier of the log at ``location``, by barrier id; ``[]`` when there is no log.

    Raises:
        DeltaLogError: the log holds two rows for one barrier (written by hand?), naming it.
    """
    table = latest_table_or_none(location)
    if table is None:
        return []
    dataset = table.to_pyarrow_dataset(filesystem=native_filesystem(location))
    rows: list[dict[str, Any]] = dataset.to_table(use_threads=False).to_pylist()
    entries: dict[int, BarrierLogEntry] = {}
    for row in rows:
        barrier = int(row["barrier"])
        if barrier in entries:
            raise DeltaLogError(
                f"the barrier log at {normalize_location(location)!r} holds barrier {barrier} twice; "
                "it is written only by barrier generation: remove the extra row"
            )
        entries[barrier] = BarrierLogEntry(
            topology=str(row["topology"]), barrier=barrier, ts_ms=int(row["ts_ms"]), ts_kind=str(row["ts_kind"]),
            final=bool(row["final"]), created_at_ms=int(row["created_at_ms"]), run_key=row["run_key"],
            root_versions={str(k): int(v) for k, v in (row["root_versions"] or [])},
        )
    return [entries[b] for b in sorted(entries)]
