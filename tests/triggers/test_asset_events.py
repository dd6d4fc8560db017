"""What Airflow's own mechanisms get from tsb: the asset event ``extra`` of a committed barrier,
the asset's link to its TSB history, and the ``AssetWatcher`` trigger's events, against a real
SQLite metastore filled through the managers (no Spark: the barrier is committed by recording
its Delta versions WRITTEN, as a job's commit does)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from typing import Any

import pytest

from airflow_provider_tsb.assets import EVENT_EXTRA_KEYS, barrier_event_extra, table_asset
from airflow_provider_tsb.triggers.barrier_committed import TsbBarrierCommittedEventTrigger
from tests.support.orchestration import wordcount_topology

WORDS, COUNTS = "tsb.wordcount.word_count", "tsb.wordcount.count_of_counts"


def _barrier(store: Any, ts_ms: int, written: dict[str, int], root_version: int) -> int:
    """Generate a barrier of ``wordcount`` and record it WRITTEN in ``written`` ({table: version})."""
    b = store.barriers.create("wordcount", {"tsb.raw.words": root_version}, ts_ms=ts_ms).barrier
    for table, version in written.items():
        job = "wordcount_words" if table == WORDS else "wordcount_counts"
        store.table_states.record_written(table, b, version, job)
    return b


def test_job_asset_event_extra_names_barrier_version_commit_state_and_lag(tsb_env) -> None:
    topo = wordcount_topology(tsb_env.warehouse)
    store = tsb_env.store
    store.registry.register_topology(topo)
    b = _barrier(store, 1_780_000_000_000, {WORDS: 4}, 0)  # only word_count WRITTEN so far
    partial = barrier_event_extra(store, topo, "wordcount.word_count", b, job_id="wordcount_words")
    assert set(partial) == set(EVENT_EXTRA_KEYS)
    assert (partial["barrier"], partial["version"], partial["state"]) == (1, 4, "WRITTEN")
    assert partial["barrier_ts_ms"] == 1_780_000_000_000 and partial["barrier_ts"] == "2026-05-28T20:26:40.000+00:00"
    assert partial["commit_state"] is None  # count_of_counts has not processed barrier 1
    assert partial["ts_kind"] == "system" and partial["job"] == "wordcount_words"
    assert 0 <= partial["lag_s"] < 60
    assert partial["tsb_history"] == "/tsb/ui/lineage?topology=wordcount&table=tsb.wordcount.word_count"
    store.table_states.record_written(COUNTS, b, 7, "wordcount_counts")
    full = barrier_event_extra(store, topo, COUNTS, b, job_id="wordcount_counts")
    assert (full["version"], full["commit_state"]) == (7, "COMMIT")


def test_asset_extra_links_to_the_tables_history_page(tsb_env) -> None:
    asset = table_asset(wordcount_topology(tsb_env.warehouse), "wordcount.count_of_counts")
    assert asset.name == COUNTS and asset.group == "tsb"
    assert asset.extra == {"tsb_topology": "wordcount",
                           "tsb_history": "/tsb/ui/lineage?topology=wordcount&table=tsb.wordcount.count_of_counts"}


def _run(coro: Any) -> Any:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def _events(trigger: TsbBarrierCommittedEventTrigger, n: int, timeout: float = 10.0) -> list[dict]:
    """The first ``n`` event payloads of the trigger (it never ends by itself)."""
    out: list[dict] = []

    async def collect() -> None:
        async for ev in trigger.run():
            out.append(ev.payload)
            if len(out) == n:
                return

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        pass
    return out


class _StateStore:
    """The asset state store's async interface (``aget``/``aset``), in memory."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_event_trigger_announces_each_committed_barrier_once_in_order(tsb_env) -> None:
    topo = wordcount_topology(tsb_env.warehouse)
    store = tsb_env.store
    store.registry.register_topology(topo)
    _barrier(store, 1_000, {WORDS: 0, COUNTS: 0}, 0)  # committed before the watcher started
    trigger = TsbBarrierCommittedEventTrigger([COUNTS, WORDS], poll_interval_s=0.05)
    trigger.asset_state_store = state = _StateStore()
    assert _run(_events(trigger, 1, timeout=0.4)) == []  # backlog not replayed; nothing new
    assert state.values == {"tsb_committed_barrier:tsb.wordcount.count_of_counts,tsb.wordcount.word_count": 1}
    _barrier(store, 2_000, {WORDS: 1, COUNTS: 1}, 1)
    _barrier(store, 3_000, {WORDS: 2}, 2)  # not committed: count_of_counts lags
    _barrier(store, 4_000, {WORDS: 3, COUNTS: 2}, 3)
    events = _run(_events(trigger, 3, timeout=0.4))  # 8 polls: a third event would show
    assert [e["barrier"] for e in events] == [2, 4]
    assert events[0]["versions"] == {COUNTS: 1, WORDS: 1} and events[0]["commit_state"] == "COMMIT"
    assert events[1]["barrier_ts_ms"] == 4_000 and events[1]["barrier_ts"] == "1970-01-01T00:00:04.000+00:00"
    assert events[1]["topology"] == "wordcount" and events[1]["lag_s"] >= 0
    # a restarted triggerer goes on after the stored barrier: 3 commits late, 2 and 4 are not repeated
    store.table_states.record_written(COUNTS, 3, 5, "wordcount_counts")
    assert [e["barrier"] for e in _run(_events(trigger, 2, timeout=0.4))] == []
    state.values[trigger.watermark_key] = 2
    assert [e["barrier"] for e in _run(_events(trigger, 3, timeout=0.4))] == [3, 4]
    replay = TsbBarrierCommittedEventTrigger([WORDS], poll_interval_s=0.05, from_barrier=0)
    assert [e["barrier"] for e in _run(_events(replay, 3, timeout=1.0))] == [1, 2, 3]


def test_event_trigger_serializes_stably_and_refuses_no_tables() -> None:
    a = TsbBarrierCommittedEventTrigger(["wordcount.word_count", "tsb.wordcount.count_of_counts"])
    b = TsbBarrierCommittedEventTrigger([COUNTS, WORDS])
    assert a.serialize() == b.serialize()
    classpath, kwargs = a.serialize()
    assert classpath == "airflow_provider_tsb.triggers.barrier_committed.TsbBarrierCommittedEventTrigger"
    assert TsbBarrierCommittedEventTrigger(**kwargs).serialize() == a.serialize()
    with pytest.raises(ValueError, match="tables must name at least one table"):
        TsbBarrierCommittedEventTrigger([])


def test_the_committed_barrier_asset_has_an_identity_of_its_own(tsb_env) -> None:
    """The watcher's asset is never a table's (whose watchers a job's DAG file would replace),
    and every DAG file that builds it for the same tables builds the same asset and watcher."""
    from airflow_provider_tsb.assets import committed_barrier_asset
    from airflow_provider_tsb.exceptions import UnknownTableError

    topo = wordcount_topology(tsb_env.warehouse)
    first = committed_barrier_asset(topo, [COUNTS, "wordcount.word_count"], poll_interval_s=2)
    again = committed_barrier_asset(topo, [WORDS, COUNTS], poll_interval_s=2)
    assert (first.name, first.uri) == (again.name, again.uri) and first.name.startswith("tsb.committed.wordcount.")
    assert first.uri.startswith("tsb://committed/wordcount/") and first.group == "tsb"
    assert first.name != table_asset(topo, COUNTS).name and first.uri != table_asset(topo, COUNTS).uri
    (watcher,) = first.watchers
    assert watcher.name == again.watchers[0].name and watcher.trigger.tables == [COUNTS, WORDS]
    assert first.extra["tsb_tables"] == [COUNTS, WORDS]
    assert committed_barrier_asset(topo, [WORDS]).name != first.name
    with pytest.raises(UnknownTableError, match=r"\['tsb.wordcount.nope'\] of topology 'wordcount'"):
        committed_barrier_asset(topo, ["wordcount.nope"])


def test_the_triggers_look_their_connection_up_with_the_async_sdk_call_only(tsb_env, monkeypatch) -> None:
    """Issue 56 item 7: the triggerer logged "TriggerRunner subprocess event loop appears
    deadlocked" when the tsb watcher started. The triggers looked their connection up with the
    sync ``get_connection`` in worker threads, which interleaves with the trigger runner's own
    messages to its supervisor (apache/airflow#66412). Both triggers now take it once with
    ``aget_connection`` on the event loop: the sync call fails here, and they still work."""
    from airflow.sdk import BaseHook, Connection

    from airflow_provider_tsb.triggers.barrier_committed import TsbBarrierCommittedTrigger

    topo = wordcount_topology(tsb_env.warehouse)
    tsb_env.store.registry.register_topology(topo)
    _barrier(tsb_env.store, 1_000, {WORDS: 0, COUNTS: 0}, 0)
    monkeypatch.delenv("TSB_METASTORE_URL")
    looked_up: list[str] = []

    def sync_lookup(cls: type, conn_id: str) -> Connection:
        raise AssertionError(f"sync get_connection({conn_id!r}) in trigger code")

    async def async_lookup(cls: type, conn_id: str) -> Connection:
        looked_up.append(conn_id)
        return Connection(conn_id=conn_id, conn_type="tsb", extra=json.dumps({"sqlalchemy_url": tsb_env.url}))

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(sync_lookup))
    monkeypatch.setattr(BaseHook, "aget_connection", classmethod(async_lookup))
    sensor = TsbBarrierCommittedTrigger([COUNTS, WORDS], barrier=1, tsb_conn_id="tsb_meta", poll_interval_s=0.05)
    assert _run(_events(sensor, 1)) == [{"status": "committed", "barrier": 1, "tables": [COUNTS, WORDS]}]
    watcher = TsbBarrierCommittedEventTrigger([COUNTS, WORDS], tsb_conn_id="tsb_meta", poll_interval_s=0.05,
                                              from_barrier=0)
    assert [e["barrier"] for e in _run(_events(watcher, 1))] == [1]
    assert looked_up == ["tsb_meta", "tsb_meta"]  # once per trigger
