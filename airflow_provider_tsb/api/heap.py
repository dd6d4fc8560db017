"""The api-server's heap: what its startup built kept out of the garbage collector's full passes.

An Airflow 3 api-server process holds about 640,000 objects once its apps are built (Airflow's
models, FastAPI's routes, SQLAlchemy's mappers, the providers). CPython's full (generation 2)
collection walks all of them, holding the interpreter lock, whenever enough new objects have
survived: measured here, 300 ms. Under 20 Delta Sharing clients without pause that happened
every few seconds, and every request in flight then waited: p99 334 ms against a p50 of 43 ms
(``benchmarks/sharing_load.py --api-server``; docs/benchmarks.md "Delta Sharing").

:class:`FreezeHeapMiddleware` runs one full collection before the first request the tsb app
serves in a process, then :func:`gc.freeze` (Python docs, ``gc.freeze``: "move all the objects
tracked by the garbage collector into a permanent generation, i.e. ignore them in all the
future collections"), so later full passes walk only what requests keep. Objects frozen stay
freed by reference counting; only reference cycles among them are never collected, and after a
collection the heap holds none that are garbage. ``[tsb] api_gc_freeze = False`` turns it off.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any

from airflow_provider_tsb.api.limits import config_flag

log = logging.getLogger(__name__)
_frozen_in: int | None = None


def freeze_heap() -> float:
    """Collect garbage once and freeze the objects that survive (:func:`gc.freeze`), once per
    process; returns the seconds it took (``0.0`` when this process already froze its heap)."""
    global _frozen_in
    if _frozen_in == os.getpid():
        return 0.0
    _frozen_in = os.getpid()
    began = time.perf_counter()
    gc.collect()
    gc.freeze()
    took = time.perf_counter() - began
    log.info("tsb: froze the api-server's heap (%d objects) in %.0f ms", gc.get_freeze_count(), took * 1000)
    return took


class FreezeHeapMiddleware:
    """ASGI middleware: :func:`freeze_heap` before the first HTTP request (when ``[tsb]
    api_gc_freeze``, default on).

    Args:
        app: the ASGI app it wraps.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._pending = config_flag("api_gc_freeze", True)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve ``scope`` (ASGI), freezing the heap first on the first HTTP request."""
        if self._pending and scope.get("type") == "http":
            self._pending = False
            freeze_heap()
        await self.app(scope, receive, send)


__all__ = ["FreezeHeapMiddleware", "freeze_heap"]
