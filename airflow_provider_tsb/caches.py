"""The process's caches, with one owner: every module-level cache registers here under a name,
and :meth:`ProcessCaches.clear` empties them (all, or those under a name prefix).

A cache holds what a process derived and may derive again: loaded Delta tables and snapshots,
verified versions, metastore engines per URL, settings read from the Airflow config. Clearing one
never changes an answer, only what the next call costs; it is what a test does between tables
that reuse a path, and what a long-running process does after its tables were rewritten under it.
Resources that are not caches (thread pools, running maintenance threads, declared topologies)
do not register.

Example::

    from airflow_provider_tsb.caches import CACHES

    _snapshots = CACHES.add("sharing.snapshots", TTLCache(256, 60.0))
    CACHES.clear("delta.")  # the Delta caches only
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

__all__ = ["CACHES", "Clearable", "ProcessCaches"]


class Clearable(Protocol):
    """Anything with a ``clear()``: a dict, an ``OrderedDict``, a ``cachetools`` cache, a fold."""

    def clear(self) -> None: ...


C = TypeVar("C", bound=Clearable)


class ProcessCaches:
    """The registry of a process's caches: ``{name: how to clear it}``."""

    def __init__(self) -> None:
        self._clears: dict[str, Callable[[], None]] = {}
        self._lock = threading.Lock()

    def add(self, name: str, cache: C) -> C:
        """Register ``cache`` (cleared by its own ``clear()``) under ``name``; returns it.

        Raises:
            ValueError: another cache is registered under ``name``.
        """
        self.on_clear(name, cache.clear)
        return cache

    def on_clear(self, name: str, clear: Callable[[], None]) -> None:
        """Register ``clear`` as how the cache ``name`` is emptied (a cache behind a lock of its
        module, or several structures cleared together).

        Raises:
            ValueError: another cache is registered under ``name``.
        """
        with self._lock:
            if name in self._clears and self._clears[name] is not clear:
                raise ValueError(f"a cache named {name!r} is registered already")
            self._clears[name] = clear

    def names(self) -> list[str]:
        """The registered caches' names, sorted."""
        with self._lock:
            return sorted(self._clears)

    def clear(self, prefix: str = "") -> list[str]:
        """Empty every cache whose name starts with ``prefix`` (all by default); the names
        cleared."""
        with self._lock:
            chosen = {n: c for n, c in self._clears.items() if n.startswith(prefix)}
        for clear in chosen.values():
            clear()
        return sorted(chosen)


#: the one registry of this process
CACHES = ProcessCaches()
