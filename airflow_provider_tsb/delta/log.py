"""Direct, cheap reads of single Delta log commits (``_delta_log/<version>.json``).

delta-rs loads a whole snapshot to answer ``history()``; the barrier look-ups only need one
commit at a time, so they read the commit JSON file directly. Each read costs one small file
read (O(actions in that commit)). Locations are local paths or URIs understood by
``pyarrow.fs`` (``file://``, ``s3://``, ``gs://``, ``abfs://`` ...).
"""

from __future__ import annotations

import contextvars
import json
import os
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs
from deltalake import DeltaTable

from airflow_provider_tsb.delta.storage import is_remote, pyarrow_filesystem, storage_options
from airflow_provider_tsb.exceptions import DeltaLogError, TableNotFoundError

LOG_DIR = "_delta_log"

class CommitMemo:
    """Commit files already read, by ``(location, version)``: at most ``size`` of them, the least
    recently used dropped first.

    A commit file ``_delta_log/<n>.json`` is written once and never changed (Delta protocol "Delta
    Log Entries"), so its actions can be kept for as long as a job runs: a barrier's newest sink
    commit is the one the next barrier's log read starts from, and an input's version at barrier
    ``n`` is its version before barrier ``n + 1``.

    Args:
        size: commits kept (a few per table and barrier; 256 is a few hundred KB).
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._actions: OrderedDict[tuple[str, int], list[dict[str, Any]]] = OrderedDict()

    def get(self, key: tuple[str, int]) -> list[dict[str, Any]] | None:
        """The actions kept for ``key``, or ``None``."""
        actions = self._actions.get(key)
        if actions is not None:
            self._actions.move_to_end(key)
        return actions

    def put(self, key: tuple[str, int], actions: list[dict[str, Any]]) -> None:
        """Keep ``actions`` for ``key``."""
        self._actions[key] = actions
        self._actions.move_to_end(key)
        while len(self._actions) > self.size:
            self._actions.popitem(last=False)


#: the memo of the current :func:`shared_commit_reads` block
_SHARED: contextvars.ContextVar[CommitMemo | None] = contextvars.ContextVar("tsb_shared_commit_reads", default=None)


@contextmanager
def shared_commit_reads(memo: CommitMemo | None = None) -> Iterator[CommitMemo]:
    """Within the block (a job's run, or one barrier), each commit file is read at most once
    while the block's :class:`CommitMemo` keeps it: the alignment check, the change reads of the
    inputs and the sinks' look-ups share them, and so do the barriers of a run. A commit found
    absent is not kept (it may be committed later in the block). Blocks nest: an inner block uses
    the outermost one's memo.

    Args:
        memo: a memo kept by the caller across blocks (a streaming query's micro-batches, each
            run in a callback of its own); default a new one for the block.

    Yields the block's memo.
    """
    outer = _SHARED.get()
    if outer is not None:
        yield outer
        return
    memo = memo if memo is not None else CommitMemo()
    token = _SHARED.set(memo)
    try:
        yield memo
    finally:
        _SHARED.reset(token)


def normalize_location(location: str) -> str:
    """Return ``location`` as an absolute local path (no ``file://``) or an unchanged URI."""
    location = str(location)
    if location.startswith("file://"):
        return unquote(urlparse(location).path).rstrip("/") or "/"
    if "://" in location:
        return location.rstrip("/")
    return os.path.abspath(location)


def native_filesystem(location: str) -> pafs.FileSystem | None:
    """Arrow's own local filesystem rooted at the local table ``location`` (a path or a
    ``file://`` URI), for ``DeltaTable.to_pyarrow_dataset(filesystem=...)``; ``None`` for an
    object store (delta-rs's own filesystem then).

    A dataset of ``to_pyarrow_dataset()`` reads through delta-rs's filesystem handler (Python
    calling into Rust from Arrow's I/O threads); a reader process that used it sometimes aborted
    at interpreter exit with "terminate called without an active exception" (SIGABRT, exit code
    134), the failure delta-io/delta-rs#2184 and pola-rs/polars#24169 report, whose workaround is
    Arrow's own filesystem. delta-rs documents a ``SubTreeFileSystem`` at the table root for this.
    """
    loc = normalize_location(location)
    if "://" in loc:
        return None
    return pafs.SubTreeFileSystem(loc, pafs.LocalFileSystem())


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """Return ``(filesystem, path)`` for a table location (path without scheme); object stores
    with the configured storage options (:mod:`airflow_provider_tsb.delta.storage`)."""
    loc = normalize_location(location)
    if not is_remote(loc):
        return pafs.LocalFileSystem(), loc
    return pyarrow_filesystem(loc)


def join(location: str, relative: str) -> str:
    """Join a table location and a relative (possibly URL-encoded) Delta path."""
    return normalize_location(location) + "/" + unquote(relative)


def table_exists(location: str) -> bool:
    """Whether a Delta table exists at ``location`` (one log listing)."""
    loc = normalize_location(location)
    return DeltaTable.is_deltatable(loc, storage_options=storage_options(loc))


def open_table(location: str, version: int | None = None) -> DeltaTable:
    """Load the Delta table at ``location`` (latest or ``version``).

    Cost: a snapshot load, O(log since last checkpoint + active files).

    Raises:
        TableNotFoundError: no Delta table at ``location`` (message names it).
    """
    loc = normalize_location(location)
    options = storage_options(loc)
    if not DeltaTable.is_deltatable(loc, storage_options=options):
        raise TableNotFoundError(
            f"no Delta table at {loc!r}: create it (root tables are created by ingestion, "
            "intermediate tables by their writer job's first barrier)"
        )
    try:
        return DeltaTable(loc, version=version, storage_options=options)
    except Exception as exc:  # delta-rs raises its own errors for missing versions
        raise DeltaLogError(f"cannot load Delta table {loc!r} at version {version}: {exc}") from exc


def read_commit_actions(location: str, version: int) -> list[dict[str, Any]] | None:
    """Return the actions of commit ``version`` (one dict per JSON line), or ``None`` if absent.

    Cost: one read of ``_delta_log/<version:020d>.json``; none when the current
    :func:`shared_commit_reads` block keeps it.
    """
    shared = _SHARED.get()
    key = (normalize_location(location), int(version))
    kept = shared.get(key) if shared is not None else None
    if kept is not None:
        return kept
    actions = _read_commit_file(location, version)
    if shared is not None and actions is not None:
        shared.put(key, actions)
    return actions


def commit_exists(location: str, version: int) -> bool:
    """Whether commit ``version`` exists (``_delta_log/<version:020d>.json``; a version of a Delta
    table is its commit file, Delta protocol "Delta Log Entries").

    Cost: none when the current :func:`shared_commit_reads` block keeps it, else one ``stat``.
    """
    shared = _SHARED.get()
    if shared is not None and shared.get((normalize_location(location), int(version))) is not None:
        return True
    fs, path = filesystem(location)
    return fs.get_file_info(f"{path}/{LOG_DIR}/{version:020d}.json").type != pafs.FileType.NotFound


def _read_commit_file(location: str, version: int) -> list[dict[str, Any]] | None:
    fs, path = filesystem(location)
    log_file = f"{path}/{LOG_DIR}/{version:020d}.json"
    try:
        with fs.open_input_stream(log_file) as stream:
            data = stream.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
            return None
        raise DeltaLogError(f"cannot read {log_file!r}: {exc}") from exc
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def commit_info(location: str, version: int) -> dict[str, Any] | None:
    """Return the ``commitInfo`` of ``version`` (``{}`` if it has none, ``None`` if absent)."""
    return commit_info_of(read_commit_actions(location, version))


def commit_info_of(actions: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The ``commitInfo`` among a commit's ``actions`` (``{}`` if it has none, ``None`` for no
    commit)."""
    if actions is None:
        return None
    for action in actions:
        if "commitInfo" in action:
            return dict(action["commitInfo"])
    return {}


def txn_version_of(actions: list[dict[str, Any]] | None, app_id: str) -> int | None:
    """The version of the ``txn`` action of ``app_id`` among a commit's ``actions``, or ``None``.

    In the newest commit of a table this is the table's transaction version for ``app_id``
    (Delta protocol "Transaction Identifiers": a later ``txn`` of an application replaces an
    earlier one), with no log replay; ``None`` says nothing about older commits.
    """
    for action in actions or ():
        txn = action.get("txn")
        if txn is not None and txn.get("appId") == app_id:
            return int(txn["version"])
    return None


def transaction_version(table: DeltaTable, location: str, app_id: str) -> int | None:
    """``table.transaction_version(app_id)`` (Delta protocol "Transaction Identifiers"), answered
    from the ``txn`` of ``table``'s newest commit when it holds one of ``app_id`` (one commit-file
    read), else by delta-rs (a log replay, growing with the log since the last checkpoint).

    Args:
        table: the loaded table; its :meth:`~deltalake.DeltaTable.version` is the one asked.
        location: its location (normalized or not).
    """
    found = txn_version_of(read_commit_actions(location, table.version()), app_id)
    return found if found is not None else table.transaction_version(app_id)


def latest_version(location: str) -> int:
    """Return the latest version of the table.

    Cost: one snapshot load (see :func:`open_table`).

    Raises:
        TableNotFoundError: no table at ``location``.
    """
    return open_table(location).version()
