"""Bounded staleness reads (issue 13 item 3) through the store, the REST API and the CLI, on
SQLite and PostgreSQL. The metastore states are recorded through the store's API; the run with
real ``spark-submit`` jobs is ``tests/spark/test_staleness.py``.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from fastapi.testclient import TestClient

from airflow_provider_tsb.api.routes import create_metaservice_app
from airflow_provider_tsb.cli import main
from airflow_provider_tsb.consistency import ReadOptions
from airflow_provider_tsb.exceptions import StaleReadError
from airflow_provider_tsb.metastore.records import now_ms
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.client import TsbClient
from airflow_provider_tsb.topology import Topology

WORDS, WC, CC = "tsb.raw.words", "tsb.mart.word_count", "tsb.mart.count_of_counts"
HOUR_MS = 3_600_000
PREFIX = "/tsb/api/v1"


def deploy(store: MetaStore, tmp_path) -> None:
    """Barrier 1 an hour old, WRITTEN everywhere; barrier 2 new, WRITTEN in word_count only."""
    topo = Topology("wordcount", warehouse=str(tmp_path / "wh"))
    topo.root_table(WORDS)
    topo.job("count_words", "a.py", sources=[WORDS], sinks=[WC])
    topo.job("count_counts", "b.py", sources=[WC], sinks=[CC])
    store.registry.register_topology(topo)
    store.barriers.create("wordcount", {WORDS: 0}, ts_ms=now_ms() - HOUR_MS)
    store.table_states.record_written(WC, 1, 0, "count_words")
    store.table_states.record_written(CC, 1, 0, "count_counts")
    store.barriers.create("wordcount", {WORDS: 1})
    store.table_states.record_written(WC, 2, 1, "count_words")


def test_stale_read_names_lagging_table_and_job(store: MetaStore, tmp_path) -> None:
    deploy(store, tmp_path)
    assert store.resolution.resolve([WC, CC]).barrier == 1  # without a bound: barrier 1, however old
    start = time.monotonic()
    with pytest.raises(StaleReadError) as err:
        store.resolution.resolve([WC, CC], max_staleness_s=600)
    assert time.monotonic() - start < 5  # no wait_s: fails at once
    message = str(err.value)
    assert "the newest COMMIT barrier over ['tsb.mart.word_count', 'tsb.mart.count_of_counts'] is barrier 1, 3600" \
        in message
    assert "older than max_staleness_s=600" in message
    assert "lagging: tsb.mart.count_of_counts: newest WRITTEN barrier 1, 3600" in message
    assert "writer job 'count_counts' (registered)" in message
    assert "tsb.mart.word_count:" not in message  # fresh: not lagging
    assert err.value.lagging == {CC: "count_counts"} and err.value.barrier == 1
    assert 3600 <= err.value.age_s < 3700 and err.value.max_staleness_s == 600
    # word_count alone is fresh: barrier 2, and a lease is taken on a fresh answer
    fresh = store.resolution.resolve([WC], max_staleness_s=600, lease_seconds=60)
    assert fresh.barrier == 2 and fresh.tables[WC].version == 1 and fresh.lease_id
    assert store.leases.leased_versions(WC) == {1}
    # a bound above the age of barrier 1 answers it
    assert store.resolution.resolve([WC, CC], max_staleness_s=7200).barrier == 1


def test_stale_read_waits_for_the_lagging_job(store: MetaStore, tmp_path) -> None:
    deploy(store, tmp_path)
    timer = threading.Timer(0.6, lambda: store.table_states.record_written(CC, 2, 1, "count_counts"))
    timer.start()
    start = time.monotonic()
    res = store.resolution.resolve([WC, CC], max_staleness_s=600, wait_s=20)
    waited = time.monotonic() - start
    timer.join()
    assert res.barrier == 2 and res.tables[CC].version == 1
    assert 0.5 <= waited < 10
    # wait_s runs out: the error after waiting
    store.barriers.create("wordcount", {WORDS: 2}, ts_ms=now_ms() + 1)
    store.table_states.record_written(WC, 3, 2, "count_words")
    with pytest.raises(StaleReadError):
        store.resolution.resolve([WC, CC], max_staleness_s=0, wait_s=0.3)


def test_generation_behind_and_event_time_barriers(store: MetaStore, tmp_path) -> None:
    deploy(store, tmp_path)
    store.table_states.record_written(CC, 2, 1, "count_counts")
    time.sleep(0.3)
    with pytest.raises(StaleReadError) as err:
        store.resolution.resolve([WC, CC], max_staleness_s=0.1)
    assert "no barrier was generated in topology 'wordcount' within 0.1 s (newest: barrier 2" in str(err.value)
    assert "barrier generation is behind" in str(err.value) and err.value.lagging == {}
    # an event-time barrier's age counts from its generation, not from its (old) watermark: a
    # topology of event-time barriers (one topology has one barrier time kind)
    events = Topology("events", warehouse=str(tmp_path / "wh"))
    events.root_table("tsb.raw.events")
    events.job("count_events", "c.py", sources=["tsb.raw.events"], sinks=["tsb.mart.event_count"])
    store.registry.register_topology(events)
    store.barriers.create("events", {"tsb.raw.events": 2}, ts_ms=1_000, ts_kind="event")
    store.table_states.record_written("tsb.mart.event_count", 1, 0, "count_events")
    assert store.resolution.resolve(["tsb.mart.event_count"], max_staleness_s=60).barrier == 1


def test_read_options_refuse_meaningless_bounds() -> None:
    with pytest.raises(ValueError, match="use level REPEATABLE_READ without as_of"):
        ReadOptions("read-committed", max_staleness_s=5)
    with pytest.raises(ValueError, match="as_of 3"):
        ReadOptions(as_of=3, max_staleness_s=5)
    with pytest.raises(ValueError, match="give max_staleness_s too"):
        ReadOptions(wait_s=5)
    with pytest.raises(ValueError, match="max_staleness_s must be a number of seconds >= 0"):
        ReadOptions(max_staleness_s=-1)
    assert ReadOptions.of(max_staleness_s=5, wait_s=2).to_json() == {
        "level": "REPEATABLE_READ", "max_staleness_s": 5, "wait_s": 2}


def test_stale_read_through_rest_api_and_client(store: MetaStore, tmp_path) -> None:
    deploy(store, tmp_path)
    http = TestClient(create_metaservice_app(store, prefix=PREFIX))
    r = http.post(f"{PREFIX}/versions", json={"tables": [WC, CC], "max_staleness_s": 600})
    assert r.status_code == 409 and r.json()["error"] == "StaleReadError"
    assert "writer job 'count_counts'" in r.json()["detail"] and CC in r.json()["detail"]
    r = http.post(f"{PREFIX}/versions", json={"tables": [WC, CC], "max_staleness_s": 600, "wait_s": 31})
    assert r.status_code == 422 and "wait_s" in str(r.json()["detail"])
    r = http.post(f"{PREFIX}/versions", json={"tables": [WC], "level": "read-committed", "max_staleness_s": 1})
    assert r.status_code == 422 and "use level REPEATABLE_READ" in r.json()["detail"]
    client = TsbClient(PREFIX, http=http)
    with pytest.raises(StaleReadError, match="lagging: tsb.mart.count_of_counts"):
        client.versions([WC, CC], max_staleness_s=600, wait_s=0.2)
    timer = threading.Timer(0.5, lambda: store.table_states.record_written(CC, 2, 1, "count_counts"))
    timer.start()
    answer = client.versions([WC, CC], max_staleness_s=600, wait_s=20)
    timer.join()
    assert answer["barrier"] == 2 and answer["tables"][CC]["version"] == 1


def test_stale_read_through_cli(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    deploy(store, tmp_path)
    assert main(["versions", "--url", url, "--max-staleness", "600", WC, CC]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tsb: error: bounded staleness: the newest COMMIT barrier")
    assert "lagging: tsb.mart.count_of_counts" in err and "writer job 'count_counts'" in err
    assert main(["versions", "--url", url, "--max-staleness", "7200", WC, CC]) == 0
    assert json.loads(capsys.readouterr().out)["barrier"] == 1
    store.table_states.record_written(CC, 2, 1, "count_counts")
    assert main(["versions", "--url", url, "--max-staleness", "600", "--wait", "5", WC, CC]) == 0
    assert json.loads(capsys.readouterr().out)["barrier"] == 2
    with pytest.raises(SystemExit):
        main(["versions", "--url", url, "--max-staleness", "-1", WC])
