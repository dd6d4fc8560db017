"""The barrier-committed sensor and its deferrable trigger against a real metastore and real Delta
tables: the timeout message names each table's lag; the barrier comes from the task's asset events."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any

import pytest

from airflow_provider_tsb.operators.barrier import TsbBarrierOperator
from airflow_provider_tsb.sensors.barrier_committed import TsbBarrierCommittedSensor
from airflow_provider_tsb.triggers.barrier_committed import TsbBarrierCommittedTrigger
from tests.support.orchestration import run_context, wordcount_topology
from tsb_examples.ingest import ingest_next_words


def run_in_own_loop(coro: Any) -> Any:
    """``asyncio.run`` in a thread of its own, like the triggerer's loop: works even when the
    test session already runs an event loop in the main thread (Playwright's sync API does)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def test_sensor_timeout_lists_tables_and_lag(tsb_env) -> None:
    topo = wordcount_topology(tsb_env.warehouse)
    ingest_next_words(topo.location("raw.words"), run_key="r1", lines=20)
    TsbBarrierOperator(task_id="b", topology=topo).execute(run_context("run-1"))
    tsb_env.store.table_states.record_written("wordcount.word_count", 1, 0, "wordcount_words")
    sensor = TsbBarrierCommittedSensor(task_id="wait", tables=["raw.words", "wordcount.word_count",
                                    "wordcount.count_of_counts"], barrier=1, poke_interval=0.2, timeout=1,
                                    mode="poke")
    from airflow.sdk.exceptions import AirflowSensorTimeout

    start = time.monotonic()
    with pytest.raises(AirflowSensorTimeout) as err:
        sensor.execute({"triggering_asset_events": {}})
    assert time.monotonic() - start < 30
    message = str(err.value)
    assert "barrier 1 not committed within 1 s" in message
    assert "tsb.raw.words: at barrier 1, WRITTEN (not lagging)" in message
    expected = "tsb.wordcount.count_of_counts: at barrier none, waiting for barrier 1 (1 barrier(s) behind, lagging"
    assert expected in message
    assert "tsb.wordcount.word_count" in message and "word_count: at barrier 1, WRITTEN" in message


def test_sensor_barrier_from_asset_events_and_trigger(tsb_env) -> None:
    topo = wordcount_topology(tsb_env.warehouse)
    ingest_next_words(topo.location("raw.words"), run_key="r1", lines=20)
    TsbBarrierOperator(task_id="b", topology=topo).execute(run_context("run-1"))
    event = type("Event", (), {"extra": {"barrier": 1, "version": 0}})()
    sensor = TsbBarrierCommittedSensor(task_id="wait", tables="raw.words")
    assert sensor.resolve_barrier({"triggering_asset_events": {"a": [event]}}) == 1
    with pytest.raises(Exception, match="no triggering asset event carries extra"):
        sensor.resolve_barrier({"triggering_asset_events": {}})

    async def first_event(trigger: TsbBarrierCommittedTrigger) -> dict:
        async for ev in trigger.run():
            return ev.payload
        raise AssertionError("no event")

    committed = TsbBarrierCommittedTrigger(["tsb.raw.words"], 1, poll_interval_s=0.1, timeout_s=5)
    ok = run_in_own_loop(first_event(committed))
    assert ok == {"status": "committed", "barrier": 1, "tables": ["tsb.raw.words"]}
    trigger = TsbBarrierCommittedTrigger(["tsb.raw.words"], 2, poll_interval_s=0.1, timeout_s=0.3)
    late = run_in_own_loop(first_event(trigger))
    assert late["status"] == "timeout"
    assert "tsb.raw.words: at barrier 1, waiting for barrier 2 (1 barrier(s) behind, barrier 2 not generated yet)" \
        in late["message"]
    classpath, kwargs = TsbBarrierCommittedTrigger(["t"], 3, timeout_s=9).serialize()
    assert classpath.endswith("TsbBarrierCommittedTrigger") and kwargs["barrier"] == 3 and kwargs["timeout_s"] == 9


def test_sensor_takes_the_barrier_of_an_asset_watcher_event() -> None:
    sensor = TsbBarrierCommittedSensor(task_id="wait", tables=["tsb.wordcount.count_of_counts"])
    watcher_event = type("E", (), {"extra": {"from_trigger": True, "payload": {"barrier": 5}}})()
    job_event = type("E", (), {"extra": {"barrier": 3}})()
    assert sensor.resolve_barrier({"triggering_asset_events": {"a": [job_event, watcher_event]}}) == 5
