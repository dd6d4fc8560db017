"""One barrier emitter per topology (issue 57 item 6): a second emitter waits as a standby,
naming the running one, and takes over when it stops or its lease lapses. Two emitters used to
interleave, and one died with a false "a root table must not be restored" error."""

from __future__ import annotations

import logging
import re
import threading
import time

import pyarrow as pa

from airflow_provider_tsb.delta.roots import append_rows
from airflow_provider_tsb.hooks.barrier import TsbBarrierHook
from airflow_provider_tsb.metastore.emitters import EmitterManager
from tests.support.orchestration import wordcount_topology


def test_the_lease_is_one_emitters_until_it_is_released_or_lapses(tsb_env) -> None:
    emitters = EmitterManager(tsb_env.store.core)
    assert emitters.acquire("wc", "dag_a/run_1", lease_s=30) is None
    held = emitters.acquire("wc", "dag_b/run_1", lease_s=30)
    assert held is not None and held.owner == "dag_a/run_1"
    assert re.fullmatch(r"emitter dag_a/run_1 \(heartbeat \d+ s ago, lease for \d+ s more\)", held.describe())
    assert emitters.acquire("wc", "dag_a/run_1", lease_s=30) is None  # a renewal
    emitters.release("wc", "dag_b/run_1")  # not its lease: nothing happens
    assert emitters.holder("wc").owner == "dag_a/run_1"
    emitters.release("wc", "dag_a/run_1")
    assert emitters.holder("wc") is None
    assert emitters.acquire("wc", "dag_b/run_1", lease_s=0.2) is None
    time.sleep(0.3)  # dag_b's emitter died: its lease lapses
    assert emitters.acquire("wc", "dag_c/run_1", lease_s=30) is None and emitters.holder("wc").owner == "dag_c/run_1"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_second_emitter_waits_as_a_standby_and_takes_over(tsb_env) -> None:
    topology = wordcount_topology(tsb_env.warehouse)
    words = topology.location("raw.words")
    append_rows(words, pa.table({"word": ["a"]}))
    stop = threading.Event()

    def ingest() -> None:  # a new root version every 50 ms
        n = 0
        while not stop.is_set():
            append_rows(words, pa.table({"word": [f"w{n}"]}))
            n += 1
            time.sleep(0.05)

    results: dict[str, list[int]] = {}
    errors: dict[str, BaseException] = {}

    lines = _Lines()

    def run(name: str, duration_s: float) -> None:
        hook = TsbBarrierHook(topology, tsb_conn_id="tsb_default")
        hook._log = logging.getLogger(f"test.emitter.{name}")  # a stdlib logger in place of Airflow's structlog one
        hook._log.addHandler(lines)
        hook._log.setLevel(logging.INFO)
        try:
            results[name] = hook.emit(name, interval_s=0.2, duration_s=duration_s, final_on_stop=False,
                                      max_in_flight=None)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors[name] = exc

    feeder = threading.Thread(target=ingest)
    first = threading.Thread(target=run, args=("dag_a/run_1", 3.0))
    second = threading.Thread(target=run, args=("dag_b/run_1", 7.0))
    feeder.start()
    first.start()
    time.sleep(0.8)
    second.start()
    first.join(60)
    second.join(60)
    stop.set()
    feeder.join(10)
    assert errors == {}, errors
    assert results["dag_a/run_1"] and results["dag_b/run_1"], results
    assert max(results["dag_a/run_1"]) < min(results["dag_b/run_1"])  # never both at once
    text = "\n".join(lines.lines)
    assert "standby: topology 'wordcount' has a running barrier emitter, emitter dag_a/run_1" in text, text
    assert "took over barrier generation for topology 'wordcount'" in text, text
    barriers = [b.barrier for b in tsb_env.store.barriers.list("wordcount", limit=1000, ascending=True)]
    assert barriers == sorted(results["dag_a/run_1"] + results["dag_b/run_1"])
