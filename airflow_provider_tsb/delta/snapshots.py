"""A per-process cache of Delta snapshots: load a table's log once, then follow it.

A fresh ``DeltaTable(location)`` reads the last checkpoint, every JSON commit after it and
builds the list of active files (delta-rs docs, "Loading a Delta Table"); loaded for each use, a
job would do that five or more times per sink and barrier. Here each location is loaded once per process
and then advanced with ``DeltaTable.update_incremental()`` (latest) or ``load_as_version(v)``
for a higher ``v`` (history), which apply only the JSON commits added since. This relies on
the Delta protocol ("Delta Log Entries", "Requirements for Writers"): commit ``n`` is the file
``_delta_log/<n:020d>.json``, written once and never changed, and versions are contiguous, so
no newer commit exists while ``<head + 1>.json`` does not. Two kinds of hand-outs:

* :func:`latest_table`: the location's shared, mutable ``DeltaTable``, advanced to the newest
  commit on disk before it is returned, so a commit made by another process since the last
  call is always seen (the same guarantee as a fresh load). Use it for the commit path: the
  txn replay check (``transaction_version``), the epoch, ``create_write_transaction`` (which
  does not advance the object: the next call does). Callers must not time travel it
  (``load_as_version``); it is only ever moved forward. It is meant for a sink's one writer.
* :func:`snapshot_at`: an immutable :class:`Snapshot` of one version (schema, partition
  columns, reader features and the active files with their statistics, copied out of
  delta-rs), cached per ``(location, version)``; advancing the latest table or a later read
  cannot change it.

A location whose log no longer holds the cached head (table deleted, or deleted and
created again) is reloaded from scratch: the head's commit file is checked on every
:func:`latest_table` call (one ``stat``, local tables). Thread-safe (one lock); memory is
bounded by
:data:`MAX_LOCATIONS` and :data:`MAX_SNAPSHOTS`.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.delta.arrow_rows import stream_table
from airflow_provider_tsb.delta.log import LOG_DIR, normalize_location, open_table
from airflow_provider_tsb.exceptions import TableNotFoundError

#: Locations whose ``DeltaTable`` objects are kept (least recently used are dropped).
MAX_LOCATIONS = 64
#: Immutable :class:`Snapshot` values kept, over all locations.
MAX_SNAPSHOTS = 128


@dataclass(frozen=True)
class Snapshot:
    """One version of a Delta table, copied out of delta-rs (never changes).

    Attributes:
        location: normalized table location.
        version: the Delta version.
        schema_json: the table schema as Delta schema JSON (Spark's ``StructType`` JSON).
        partition_columns: partition column names, in order.
        reader_features: the protocol's reader features (e.g. ``deletionVectors``).
        add_actions: ``DeltaTable.get_add_actions(flatten=True)`` at this version: one row per
            active file (``path`` relative to the table root, ``partition.<col>``,
            ``min.<col>``/``max.<col>`` statistics, ...).
    """

    location: str
    version: int
    schema_json: str
    partition_columns: tuple[str, ...]
    reader_features: frozenset[str]
    add_actions: pa.Table
    #: the table properties (``metaData.configuration``), e.g. ``delta.enableChangeDataFeed``
    configuration: tuple[tuple[str, str], ...] = ()

    def property(self, key: str) -> str | None:
        """The table property ``key`` at this version (``None`` when unset)."""
        return dict(self.configuration).get(key)


class _Latest:
    """A location's shared latest ``DeltaTable`` and the fingerprint of its head commit file."""

    def __init__(self, table: DeltaTable) -> None:
        self.table = table
        self.head = -1
        self.fingerprint: tuple[int, int] | None = None

    def mark(self, location: str) -> None:
        """Remember the head version and its commit file's fingerprint."""
        self.head = self.table.version()
        self.fingerprint = commit_fingerprint(location, self.head)


_lock = threading.RLock()
_latest: OrderedDict[str, _Latest] = OrderedDict()
#: ``{location: (newest version seen by newest_version, its commit file's fingerprint)}``
_newest: OrderedDict[str, tuple[int, tuple[int, int] | None]] = OrderedDict()
_cursors: OrderedDict[str, DeltaTable] = OrderedDict()
_snapshots: OrderedDict[tuple[str, int], Snapshot] = OrderedDict()


def commit_fingerprint(location: str, version: int) -> tuple[int, int] | None:
    """``(mtime ns, size)`` of ``_delta_log/<version>.json`` (``location`` normalized), ``None``
    if absent: a table deleted and created again gives another; object stores: always
    ``(0, 0)`` (no check, ``update_incremental`` runs on every call there)."""
    if "://" in location:
        return (0, 0)
    try:
        st = os.stat(f"{location}/{LOG_DIR}/{version:020d}.json")
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _remember(cache: OrderedDict, key: object, value: object, limit: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)


def newer_commit_possible(location: str, version: int) -> bool:
    """Whether a commit after ``version`` may exist: Delta versions are contiguous, so none does
    while ``_delta_log/<version + 1>.json`` is absent (local tables, one ``stat``; object stores:
    always ``True``). ``location``: normalized."""
    if "://" in location:
        return True
    return os.path.exists(f"{location}/{LOG_DIR}/{version + 1:020d}.json")


def latest_table(location: str) -> DeltaTable:
    """Return the location's shared ``DeltaTable``, advanced to the newest commit on disk.

    Cost (local tables): two ``stat`` calls when nothing was committed since the last call;
    otherwise ``update_incremental`` (a log listing and the new JSON commits). The first call
    per location, or after the table was deleted or re-created, is a full load (last
    checkpoint + later JSON commits + active files).

    Raises:
        TableNotFoundError: no Delta table at ``location`` (message names it).
        DeltaLogError: delta-rs cannot load the table.
    """
    loc = normalize_location(location)
    with _lock:
        entry = _latest.get(loc)
        if entry is not None:
            version = entry.table.version()
            if version == entry.head and commit_fingerprint(loc, version) != entry.fingerprint:
                entry = None  # the cached head's commit file is gone or rewritten: reload
            elif newer_commit_possible(loc, version):
                try:
                    entry.table.update_incremental()
                except Exception:  # log cleaned up under us, or the table was removed: reload
                    entry = None
            if entry is None:
                _forget(loc)  # its snapshots may describe the removed table
        if entry is None:
            entry = _Latest(open_table(loc))
        entry.mark(loc)
        _remember(_latest, loc, entry, MAX_LOCATIONS)
        return entry.table


def newest_version(location: str) -> int:
    """The newest version of the table at ``location``, found without loading its new commits.

    Cost (local tables): after the first call, one ``stat`` for the version found last time
    (its commit file unchanged, else the table was re-created: reloaded) and one per commit
    since, as versions are contiguous (module doc): flat in the length of the log, where
    ``update_incremental`` lists the whole ``_delta_log`` directory on a local filesystem (a
    cost growing with the log) and reads every new commit. The first call,
    and every call on an object store, is :func:`latest_version`. Use it where only the
    number is needed (a root table's version at barrier generation); the cached snapshot is
    not advanced.

    Raises:
        TableNotFoundError: no Delta table at ``location``.
    """
    loc = normalize_location(location)
    if "://" in loc:
        return latest_version(loc)
    with _lock:
        known = _newest.get(loc)
    if known is not None and commit_fingerprint(loc, known[0]) == known[1]:
        version = known[0]
    else:
        version = latest_version(loc)
    while newer_commit_possible(loc, version):
        version += 1
    fingerprint = commit_fingerprint(loc, version)
    if fingerprint is None:  # the table went away under us
        raise TableNotFoundError(f"no Delta table at {loc!r}: its commit {version} is gone")
    with _lock:
        _remember(_newest, loc, (version, fingerprint), MAX_LOCATIONS)
    return version


def latest_table_or_none(location: str) -> DeltaTable | None:
    """:func:`latest_table`, or ``None`` when there is no Delta table at ``location``."""
    try:
        return latest_table(location)
    except TableNotFoundError:
        return None


def latest_version(location: str) -> int:
    """The newest version of the table at ``location`` (see :func:`latest_table` for cost).

    Raises:
        TableNotFoundError: no Delta table at ``location``.
    """
    return latest_table(location).version()


def _capture(loc: str, table: DeltaTable) -> Snapshot:
    protocol = table.protocol()
    return Snapshot(
        location=loc,
        version=table.version(),
        schema_json=table.schema().to_json(),
        partition_columns=tuple(table.metadata().partition_columns),
        reader_features=frozenset(protocol.reader_features or ()),
        add_actions=stream_table(table.get_add_actions(flatten=True)),
        configuration=tuple(sorted((table.metadata().configuration or {}).items())),
    )


def snapshot_at(location: str, version: int) -> Snapshot:
    """Return the immutable :class:`Snapshot` of ``version`` of the table at ``location``.

    Cost: nothing when cached; otherwise taken from the latest table if it is at ``version``,
    else a private per-location cursor is moved forward to ``version`` (only the JSON commits
    in between are read) or, for a version older than the cursor, loaded afresh.

    Raises:
        TableNotFoundError: no Delta table at ``location``.
        DeltaLogError: ``version`` does not exist (or its log was cleaned up).
    """
    loc = normalize_location(location)
    key = (loc, int(version))
    with _lock:
        cached = _snapshots.get(key)
        if cached is not None:
            _snapshots.move_to_end(key)
            return cached
        entry = _latest.get(loc)
        if entry is not None and entry.table.version() == version:
            snap = _capture(loc, entry.table)
        else:
            cursor = _cursors.get(loc)
            if cursor is not None and cursor.version() < version:
                try:
                    cursor.load_as_version(version)
                except Exception:
                    cursor = None
            if cursor is None or cursor.version() != version:
                cursor = open_table(loc, version)
            _remember(_cursors, loc, cursor, MAX_LOCATIONS)
            snap = _capture(loc, cursor)
        _remember(_snapshots, key, snap, MAX_SNAPSHOTS)
        return snap


def _forget(loc: str) -> None:
    _latest.pop(loc, None)
    _newest.pop(loc, None)
    _cursors.pop(loc, None)
    for key in [k for k in _snapshots if k[0] == loc]:
        del _snapshots[key]


def clear(location: str | None = None) -> None:
    """Forget the cached tables and snapshots of ``location`` (all locations when ``None``)."""
    with _lock:
        if location is None:
            _latest.clear()
            _newest.clear()
            _cursors.clear()
            _snapshots.clear()
        else:
            _forget(normalize_location(location))


CACHES.on_clear("delta.snapshots", clear)
