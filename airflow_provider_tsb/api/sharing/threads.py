"""The worker threads that answer Delta Sharing requests in an api-server process.

FastAPI runs a plain-function endpoint in a worker thread of Starlette's pool (40 threads per
process, shared with Airflow's own routes). A sharing request is CPU work with short metastore
round trips between, so many concurrent requests on 40 threads take turns at the interpreter
lock and the slowest waits several times the median. Queued for a few threads of their own,
the requests are answered in arrival order: the slowest come close to the median, and more are
answered a second (docs/benchmarks.md "Delta Sharing"). The routes of :mod:`.sharing` run
their plain-function endpoints here (:func:`in_sharing_threads`); coroutines stay on the event
loop. The tsb REST API's routes keep Starlette's pool: there, threads of their own do not
shorten the tail under many clients without pause (``benchmarks/rest_load.py``), the clients'
own threads being the tail.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow_provider_tsb.api.limits import config_number

#: worker threads per api-server process for Delta Sharing requests (``[tsb] sharing_threads``)
DEFAULT_SHARING_THREADS = 2
_executors: dict[int, ThreadPoolExecutor] = {}
_lock = threading.Lock()


def sharing_executor() -> ThreadPoolExecutor:
    """The sharing worker threads of this process: ``[tsb] sharing_threads`` of them (default
    :data:`DEFAULT_SHARING_THREADS`; a metastore several milliseconds away wants more, so one
    request's CPU overlaps another's round trips), made at first use.

    A plain executor and ``loop.run_in_executor``, not anyio's ``to_thread``: the hop is a future
    and a callback, where anyio's builds a task group and cancel scopes per call (a visible share
    of a sharing query's CPU through the api-server).

    Raises:
        ValueError: ``[tsb] sharing_threads`` is not a positive number (names the setting).
    """
    threads = config_number("sharing_threads", DEFAULT_SHARING_THREADS)
    with _lock:
        executor = _executors.get(threads)
        if executor is None:
            executor = _executors[threads] = ThreadPoolExecutor(threads, thread_name_prefix="tsb-sharing")
    return executor


def in_sharing_threads(endpoint: Callable[..., Any]) -> Callable[..., Coroutine[Any, Any, Any]]:
    """``endpoint`` (a plain function) as a coroutine that runs it on a :func:`sharing_executor`
    thread, in the caller's context variables (as Starlette's pool does); FastAPI reads the
    parameters of ``endpoint`` (``functools.wraps``)."""

    @functools.wraps(endpoint)
    async def run(*args: Any, **kwargs: Any) -> Any:
        call = functools.partial(contextvars.copy_context().run, endpoint, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(sharing_executor(), call)

    return run


__all__ = ["DEFAULT_SHARING_THREADS", "in_sharing_threads", "sharing_executor"]
