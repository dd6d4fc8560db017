"""Running a coroutine from a test whatever the pytest worker's main thread holds."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any


def run_coroutine(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run(coroutine)`` in a thread of its own: a test before this one in the same
    pytest worker may have left an event loop running in the main thread, where ``asyncio.run``
    refuses to start. Re-raises what the coroutine raised."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(asyncio.run(coroutine))
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out[0]
