"""The api-server's heap frozen before its first tsb requests (``api/heap.py``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_tsb.api import heap
from airflow_provider_tsb.api.heap import FreezeHeapMiddleware, freeze_heap
from tests.support.event_loops import run_coroutine


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """A process whose heap was not frozen yet; unfrozen again after the test."""
    gc.unfreeze()
    heap._served = (0, 0)
    yield
    gc.unfreeze()
    heap._served = (0, 0)


def _call(middleware: FreezeHeapMiddleware, kind: str) -> list[str]:
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    middleware.app = app
    run_coroutine(middleware({"type": kind}, None, None))
    return seen


def test_freezing_moves_the_heap_out_of_full_collections(unfrozen: None) -> None:
    assert gc.get_freeze_count() == 0
    assert freeze_heap() > 0.0
    assert gc.get_freeze_count() > 10_000  # pytest, pyarrow, SQLAlchemy, FastAPI: the test process's heap
    assert len(gc.get_objects(2)) < 1_000


def test_the_heap_is_frozen_before_the_first_100th_and_1000th_http_request(
    unfrozen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    froze_before: list[int] = []
    monkeypatch.setattr(heap, "freeze_heap", lambda: froze_before.append(heap._served[1]) or 0.0)
    middleware = FreezeHeapMiddleware(None)
    assert _call(middleware, "lifespan") == ["lifespan"] and froze_before == []
    for _ in range(1500):
        assert _call(middleware, "http") == ["http"]
    assert froze_before == [1, 100, 1000]


def test_the_first_http_request_freezes_the_heap(unfrozen: None) -> None:
    middleware = FreezeHeapMiddleware(None)
    assert _call(middleware, "lifespan") == ["lifespan"] and gc.get_freeze_count() == 0
    assert _call(middleware, "http") == ["http"] and gc.get_freeze_count() > 0


def test_the_setting_turns_it_off_and_a_bad_value_names_itself(
    unfrozen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__TSB__API_GC_FREEZE", "False")
    assert _call(FreezeHeapMiddleware(None), "http") == ["http"] and gc.get_freeze_count() == 0
    monkeypatch.setenv("AIRFLOW__TSB__API_GC_FREEZE", "maybe")
    with pytest.raises(ValueError, match=r"\[tsb\] api_gc_freeze must be True or False, got 'maybe'"):
        FreezeHeapMiddleware(None)
