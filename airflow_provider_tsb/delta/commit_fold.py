"""A value of a Delta table's versions, kept per process and moved forward commit by commit.

Barrier generation reads two values of each root table at its newest version: the event-time
watermark (:func:`~airflow_provider_tsb.delta.roots.event_time_watermark`) and the live-file
figures (:func:`~airflow_provider_tsb.delta.integrity.live_figures`). Both are functions of the
version's live files, and a snapshot of a version costs a listing of ``_delta_log`` (O(commits)
on a local filesystem) plus every live file, so reading it at every generation makes the
generation's cost grow with the history (docs/benchmarks.md, "Barrier generation as the history
grows"). A
:class:`CommitFold` keeps the value of the version computed last and applies the actions of the
commits since (one commit-file read each; Delta protocol "Actions"), reading the snapshot only
when it cannot: the first time, for an older version, over more than ``max_step`` commits, on an
object store, when a commit holds an action the fold cannot apply (its ``step`` says
:data:`UNKNOWN`), or when the table was created again (the CRC-32 of the commit file computed
last changed: mtime and size can match).
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from airflow_provider_tsb.delta.log import LOG_DIR, normalize_location, read_commit_actions

T = TypeVar("T")
#: what a fold's ``step`` answers for an action it cannot apply: the snapshot is read instead
UNKNOWN: Any = object()


class CommitFold(Generic[T]):
    """A value of a table's versions moved forward over its commits (see module doc).

    Args:
        step: ``(value, actions, key) -> value``: the value after one commit (its actions as in
            the commit file, e.g. ``[{"add": {...}}, ...]``), or :data:`UNKNOWN`. It must not
            change ``value`` in place: the value kept is another caller's until it returns.
        from_snapshot: ``(location, version, key) -> value``: the value read from the version's
            snapshot.
        max_step: commits moved over at most; more read the snapshot.
        max_tables: (location, key) pairs kept, the oldest forgotten first.
    """

    def __init__(self, step: Callable[[T, list[Mapping[str, Any]], str], T],
                 from_snapshot: Callable[[str, int, str], T],
                 *, max_step: int = 100, max_tables: int = 256) -> None:
        self._step = step
        self._from_snapshot = from_snapshot
        self.max_step = max_step
        self.max_tables = max_tables
        self._lock = threading.Lock()
        #: ``{(location, key): (version, its commit file's CRC-32, value)}``
        self._kept: dict[tuple[str, str], tuple[int, int | None, T]] = {}

    def at(self, location: str, version: int, key: str = "") -> T:
        """The value at Delta ``version`` of the table at ``location`` (``key``: what the
        steps need besides, e.g. a column name).

        Raises:
            whatever ``from_snapshot`` raises for a version it cannot read.
        """
        loc = normalize_location(location)
        with self._lock:
            known = self._kept.get((loc, key))
        value = self._forward(loc, key, known, version) if known is not None else UNKNOWN
        if value is UNKNOWN:
            value = self._from_snapshot(loc, version, key)
        with self._lock:
            self._kept[(loc, key)] = (version, commit_digest(loc, version), value)
            while len(self._kept) > self.max_tables:
                del self._kept[next(iter(self._kept))]
        return value

    def _forward(self, loc: str, key: str, known: tuple[int, int | None, T], version: int) -> T:
        start, digest, value = known
        if "://" in loc or version < start or version - start > self.max_step or commit_digest(loc, start) != digest:
            return UNKNOWN
        for v in range(start + 1, version + 1):
            actions = read_commit_actions(loc, v)
            if actions is None:
                return UNKNOWN
            value = self._step(value, actions, key)
            if value is UNKNOWN:
                return UNKNOWN
        return value

    def clear(self) -> None:
        """Forget every kept value."""
        with self._lock:
            self._kept.clear()


def commit_digest(loc: str, version: int) -> int | None:
    """CRC-32 of commit file ``version`` (local tables; ``None``: absent, or an object store): a
    table deleted and created again has other commits (its file names are new UUIDs), even
    when a commit file's size and modification time happen to match."""
    if "://" in loc:
        return None
    try:
        with open(f"{loc}/{LOG_DIR}/{version:020d}.json", "rb") as handle:
            return zlib.crc32(handle.read())
    except FileNotFoundError:
        return None


__all__ = ["UNKNOWN", "CommitFold", "commit_digest"]
