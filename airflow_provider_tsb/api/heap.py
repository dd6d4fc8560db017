"""The api-server's heap: what its startup built kept out of the garbage collector's full passes.

An Airflow 3 api-server process holds hundreds of thousands of objects once its apps are built
(Airflow's models, FastAPI's routes, SQLAlchemy's mappers, the providers). CPython's full
(generation 2) collection walks all of them, holding the interpreter lock, whenever enough new
objects have survived: a pause far longer than a request. Under many Delta Sharing clients
without pause that happens every few seconds, and every request in flight then waits, so the
pauses make the tail latency (``benchmarks/sharing_load.py --api-server``; docs/benchmarks.md
"Delta Sharing").

:class:`FreezeHeapMiddleware` runs one full collection before the first request the tsb app
serves in a process, then :func:`gc.freeze` (Python docs, ``gc.freeze``: "move all the objects
tracked by the garbage collector into a permanent generation, i.e. ignore them in all the
future collections"), so later full passes walk only what requests keep. The first requests
import and build more (deltalake, pyarrow, FastAPI's parameter analysis): objects that later full
passes would walk again and again under load, collecting nothing. So it freezes again before
requests :data:`FREEZE_BEFORE_REQUESTS` (the 100th and the 1,000th), once the process is warm; a
full pass then walks only what requests keep. Objects frozen stay freed by reference counting; only reference
cycles among them are never collected: after a collection the heap holds none that are garbage,
and what a later freeze catches in flight is at most the requests being served then.
``[tsb] api_gc_freeze = False`` turns it off.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any

from airflow_provider_tsb.api.limits import config_flag

log = logging.getLogger(__name__)
#: the HTTP requests of a process (1-based) before which the heap is frozen
FREEZE_BEFORE_REQUESTS = frozenset({1, 100, 1000})
#: HTTP requests the tsb app served so far: (process id, count)
_served: tuple[int, int] = (0, 0)


def freeze_heap() -> float:
    """Collect garbage once and freeze the objects that survive (:func:`gc.freeze`); returns
    the seconds it took."""
    began = time.perf_counter()
    gc.collect()
    gc.freeze()
    took = time.perf_counter() - began
    log.info("tsb: froze the api-server's heap (%d objects) in %.0f ms", gc.get_freeze_count(), took * 1000)
    return took


def count_request() -> int:
    """Count one HTTP request of this process; returns its number (1-based, per process: a
    forked worker starts again at 1)."""
    global _served
    pid, count = _served
    _served = (os.getpid(), (count if pid == os.getpid() else 0) + 1)
    return _served[1]


class FreezeHeapMiddleware:
    """ASGI middleware: :func:`freeze_heap` before the HTTP requests
    :data:`FREEZE_BEFORE_REQUESTS` of each process (when ``[tsb] api_gc_freeze``, default on).

    Args:
        app: the ASGI app it wraps.

    Raises:
        ValueError: ``[tsb] api_gc_freeze`` is not a boolean (names the setting).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._enabled = config_flag("api_gc_freeze", True)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve ``scope`` (ASGI), freezing the heap first before the requests named above."""
        if self._enabled and scope.get("type") == "http" and count_request() in FREEZE_BEFORE_REQUESTS:
            freeze_heap()
        await self.app(scope, receive, send)


__all__ = ["FREEZE_BEFORE_REQUESTS", "FreezeHeapMiddleware", "count_request", "freeze_heap"]
