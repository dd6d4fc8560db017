"""The worker threads of Delta Sharing requests (``api/sharing/threads.py``): a sharing route's
plain-function endpoint runs on ``[tsb] sharing_threads`` threads, never more at once."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from airflow_provider_tsb.api.sharing.routes import router
from airflow_provider_tsb.api.sharing.threads import in_sharing_threads, sharing_executor
from tests.support.event_loops import run_coroutine


def test_sharing_requests_run_on_the_configured_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__TSB__SHARING_THREADS", "3")
    running, peak, lock = [0], [0], threading.Lock()

    def endpoint(k: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return k

    async def main() -> list[int]:
        assert sharing_executor()._max_workers == 3
        assert sharing_executor() is sharing_executor()  # one per process and setting
        return list(await asyncio.gather(*(in_sharing_threads(endpoint)(k) for k in range(9))))

    assert run_coroutine(main()) == list(range(9))
    assert peak[0] == 3


def test_every_sharing_endpoint_runs_on_the_sharing_threads() -> None:
    """FastAPI sees coroutines (no hop to Starlette's pool) with the endpoints' own parameters."""
    for route in router.routes:
        endpoint = route.endpoint  # type: ignore[attr-defined]
        assert asyncio.iscoroutinefunction(endpoint), route.path  # type: ignore[attr-defined]
        assert getattr(endpoint, "__wrapped__", None) is not None, route.path  # type: ignore[attr-defined]


def test_a_bad_setting_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__TSB__SHARING_THREADS", "0")

    with pytest.raises(ValueError, match=r"\[tsb\] sharing_threads must be a positive number, got '0'"):
        sharing_executor()


def test_an_endpoint_runs_in_the_callers_context_variables() -> None:
    """Airflow's structlog binds the request id in a context variable: logs of a sharing
    endpoint keep it, as they do on Starlette's pool."""
    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")

    def endpoint() -> tuple[str, str]:
        return request_id.get(), threading.current_thread().name

    async def main() -> tuple[str, str]:
        request_id.set("r-42")
        return await in_sharing_threads(endpoint)()

    seen, thread = run_coroutine(main())
    assert seen == "r-42" and thread.startswith("tsb-sharing")
