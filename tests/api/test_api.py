"""REST endpoints through FastAPI's TestClient and the TsbClient, on SQLite and PostgreSQL."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable
from fastapi.testclient import TestClient

from airflow_provider_tsb.api.routes import create_metaservice_app
from airflow_provider_tsb.exceptions import (
    CycleError,
    DoubleWriterError,
    InconsistentReadError,
    UnknownConsistencyLevelError,
    UnknownJobError,
    UnknownTableError,
)
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.client import TsbClient
from tests.support.metaservice import AMOUNT, ORDERS, PRICE, TOTAL, build_shop

PREFIX = "/tsb/api/v1"


@pytest.fixture
def http(store: MetaStore) -> TestClient:
    return TestClient(create_metaservice_app(store, prefix=PREFIX))


def test_flip276_registration_endpoints(http: TestClient, store: MetaStore, tmp_path) -> None:
    r = http.post(f"{PREFIX}/register/source/ingest_reader/c/raw/events",
                  json={"topology": "flow", "root": True, "location": str(tmp_path / "events")})
    assert r.status_code == 200, r.text
    assert r.json()["sources"] == ["c.raw.events"] and r.json()["topology"] == "flow"
    assert store.registry.table("c.raw.events").kind == "root"
    r = http.post(f"{PREFIX}/register/sink/ingest_reader/c/mart/agg")
    assert r.status_code == 200 and r.json()["sinks"] == ["c.mart.agg"]
    # a new job joins the topology of its (registered) source table without a body
    r = http.post(f"{PREFIX}/register/source/second/c/mart/agg")
    assert r.status_code == 200 and r.json()["topology"] == "flow"
    r = http.post(f"{PREFIX}/register/sink/second/c/mart/agg2", json={"application": "apps/second.py"})
    assert r.status_code == 200 and r.json()["sinks"] == ["c.mart.agg2"]

    r = http.post(f"{PREFIX}/register/sink/intruder/c/mart/agg", json={"topology": "flow"})
    assert r.status_code == 409
    assert r.json()["error"] == "DoubleWriterError" and r.json()["jobs"] == ["ingest_reader", "intruder"]
    assert "'c.mart.agg' has two writer jobs, 'ingest_reader' and 'intruder'" in r.json()["detail"]
    with pytest.raises(UnknownJobError):
        store.registry.job("intruder")  # the failed first registration left no job behind

    r = http.post(f"{PREFIX}/register/source/ingest_reader/c/mart/agg2")
    assert r.status_code == 409 and r.json()["error"] == "CycleError"
    assert "c.mart.agg -> job second -> c.mart.agg2 -> job ingest_reader -> c.mart.agg" in r.json()["detail"]
    assert r.json()["cycle"][0] == r.json()["cycle"][-1]

    r = http.post(f"{PREFIX}/register/source/third/c/raw/unknown_table")
    assert r.status_code == 404 and "'c.raw.unknown_table'" in r.json()["detail"]
    r = http.post(f"{PREFIX}/register/sink/third/c/mart/new_table")
    assert r.status_code == 422 and "give 'topology'" in r.json()["detail"]
    r = http.post(f"{PREFIX}/register/sink/third/c/mart/1bad")
    assert r.status_code == 422 and "'1bad' is not an identifier" in r.json()["detail"]
    r = http.post(f"{PREFIX}/register/sink/bad$job/c/mart/x", json={"topology": "flow"})
    assert r.status_code == 422 and "invalid job id 'bad$job'" in r.json()["detail"]
    r = http.post(f"{PREFIX}/register/sink/second/c/raw/events")
    assert r.status_code == 409 and "is a root table and cannot be a sink" in r.json()["detail"]
    r = http.post(f"{PREFIX}/register/sink/second/c/mart/x", json={"topology": "other"})
    assert r.status_code == 409 and "registered in topology 'flow', not 'other'" in r.json()["detail"]

    assert http.post(f"{PREFIX}/unregister/second").json() == {"job_id": "second", "unregistered": True}
    r = http.post(f"{PREFIX}/unregister/second")
    assert r.status_code == 404 and "job 'second' is not registered" in r.json()["detail"]
    assert store.registry.writer_of("c.mart.agg2") is None


def test_versions_endpoints_and_errors(http: TestClient, store: MetaStore, tmp_path) -> None:
    shop = build_shop(store, str(tmp_path))
    r = http.post(f"{PREFIX}/versions", json={"tables": [PRICE, AMOUNT], "level": "read-committed"})
    assert r.status_code == 200
    body = r.json()
    assert body["barrier"] == 2 and body["level"] == "READ_COMMITTED"
    assert body["tables"][AMOUNT]["state"] == "PROCESSED" and body["tables"][AMOUNT]["version"] == 0
    assert body["tables"][PRICE] == {"version": 1, "barrier": 2, "state": "WRITTEN",
                                     "location": shop.locations[PRICE], "staged": None,
                                     "file_count": None, "size_bytes": None}  # shop commits record no figures
    body = http.post(f"{PREFIX}/versions", json={"tables": [PRICE, AMOUNT]}).json()
    assert body["barrier"] == 1 and {n: t["version"] for n, t in body["tables"].items()} == {PRICE: 0, AMOUNT: 0}
    body = http.post(f"{PREFIX}/versions", json={"tables": [PRICE, AMOUNT], "level": "READ_UNCOMMITTED"}).json()
    assert body["barrier"] is None and {n: (t["version"], t["barrier"]) for n, t in body["tables"].items()} == {
        PRICE: (1, 2), AMOUNT: (0, 1)}
    body = http.post(f"{PREFIX}/versions", json={"tables": [ORDERS, PRICE], "as_of": 1, "lease_seconds": 30}).json()
    assert body["as_of"] == 1 and body["tables"][ORDERS]["version"] == 0 and body["lease"]["id"]
    assert store.leases.leased_versions(PRICE) == {0}

    r = http.get(f"{PREFIX}/version/read-committed/tsb/shop/user_item_amount")
    assert r.status_code == 200 and r.json()["state"] == "PROCESSED" and r.json()["barrier"] == 2
    assert r.json()["staged"]["files"] == ["tsb_staging/amount_job/0/2/attempt1/part-00000.parquet"]
    r = http.get(f"{PREFIX}/version/REPEATABLE_READ/tsb/shop/user_item_price", params={"as_of": 1})
    assert r.json()["version"] == 0

    r = http.get(f"{PREFIX}/version/serializable/tsb/shop/user_item_price")
    assert r.status_code == 422 and "unknown consistency level 'serializable'" in r.json()["detail"]
    r = http.get(f"{PREFIX}/version/repeatable-read/tsb/shop/nope")
    assert r.status_code == 404 and "['tsb.shop.nope'] are not registered" in r.json()["detail"]
    r = http.post(f"{PREFIX}/versions", json={"tables": [PRICE, AMOUNT], "as_of": 2})
    assert r.status_code == 409 and r.json()["error"] == "InconsistentReadError"
    assert "barrier 2 is not COMMIT" in r.json()["detail"] and AMOUNT in r.json()["detail"]
    r = http.post(f"{PREFIX}/versions", json={"tables": [PRICE], "level": "read-committed", "as_of": 1})
    assert r.status_code == 422 and "use level REPEATABLE_READ" in r.json()["detail"]
    r = http.post(f"{PREFIX}/versions", json={"tables": ["no dots"]})
    assert r.status_code == 422 and "invalid table name 'no dots'" in r.json()["detail"]
    r = http.post(f"{PREFIX}/versions", json={"tables": []})
    assert r.status_code == 422 and "tables" in str(r.json()["detail"])
    r = http.post(f"{PREFIX}/versions", json={"tables": [PRICE], "lease_seconds": -1})
    assert r.status_code == 422 and "lease_seconds" in str(r.json()["detail"])
    r = http.post(f"{PREFIX}/versions", json={"tables": [PRICE], "lease_holder": "a\x00b"})
    assert r.status_code == 422 and "control characters" in str(r.json()["detail"])


def test_monotonic_reads_through_the_api(http: TestClient, store: MetaStore, tmp_path) -> None:
    build_shop(store, str(tmp_path))
    client = TsbClient(PREFIX, http=http, monotonic=True)
    q = [ORDERS, PRICE]
    assert client.versions(q)["barrier"] == 2
    # explicit min_barrier through the raw endpoint
    r = http.post(f"{PREFIX}/versions", json={"tables": q, "min_barrier": 3})
    assert r.status_code == 409 and "older than the last seen barrier 3" in r.json()["detail"]
    # price_job fails and rolls back barrier 2: the newest consistent barrier goes back to 1
    store.table_states.rollback(PRICE, 1)
    with pytest.raises(InconsistentReadError, match="older than the last seen barrier 2"):
        client.versions(q)
    # a fresh (non-monotonic) reader gets barrier 1; the monotonic one recovers with the job
    assert TsbClient(PREFIX, http=http).versions(q)["barrier"] == 1
    store.table_states.record_written(PRICE, 2, 1, "price_job")
    assert client.versions(q)["barrier"] == 2
    # other client calls and error classes
    assert client.version(AMOUNT, "read-committed")["state"] == "PROCESSED"
    with pytest.raises(UnknownTableError, match="tsb.shop.nope"):
        client.version("tsb.shop.nope")
    with pytest.raises(ValueError, match="use level REPEATABLE_READ"):  # refused before any request
        client.versions(q, "read-committed", as_of=1)
    r = http.post(f"{PREFIX}/versions", json={"tables": q, "level": "read-committed", "as_of": 1})
    assert r.status_code == 422 and "use level REPEATABLE_READ" in r.json()["detail"]
    with pytest.raises(UnknownConsistencyLevelError, match="unknown consistency level 'bogus'"):
        client._call("GET", "/version/bogus/tsb/shop/user_item_price")
    with pytest.raises(DoubleWriterError) as err:
        client.register_sink("intruder", PRICE, topology="shop")
    assert err.value.jobs == ("intruder", "price_job") and err.value.table == PRICE
    with pytest.raises(CycleError) as cyc:
        client.register_source("price_job", TOTAL)
    assert "job price_job" in cyc.value.cycle
    assert client.topology()["name"] == "shop"
    assert client.barriers(limit=1)["next_before"] == 2
    assert client.table_barriers(PRICE)["consistent"]["REPEATABLE_READ"]["barrier"] == 2
    assert client.delays()["barriers"][0]["barrier"] == 2
    assert client.unregister("total_job")["unregistered"] is True


def test_topology_barriers_delays_views(http: TestClient, store: MetaStore, tmp_path) -> None:
    build_shop(store, str(tmp_path))
    store.job_runs.heartbeat("price_job", status="running", barrier=2)
    time.sleep(0.02)
    topo = http.get(f"{PREFIX}/topology", params={"stale_after_s": 0.001}).json()
    assert topo["name"] == "shop" and topo["newest_barrier"] == 2
    kinds = {n["id"]: (n["kind"], n["role"]) for n in topo["nodes"]}
    assert kinds[f"table:{ORDERS}"] == ("table", "root") and kinds["job:total_job"] == ("job", None)
    assert {"source": f"table:{PRICE}", "target": "job:total_job"} in topo["edges"]
    assert {"source": "job:total_job", "target": f"table:{TOTAL}"} in topo["edges"]
    assert (topo["tables"][PRICE]["written_barrier"], topo["tables"][PRICE]["version"], topo["tables"][PRICE]["lag"]) \
        == (2, 1, 0)
    assert (topo["tables"][AMOUNT]["written_barrier"], topo["tables"][AMOUNT]["lag"]) == (1, 1)
    assert topo["tables"][TOTAL]["writer"] == "total_job"
    assert topo["jobs"]["price_job"]["stale"] is True and topo["jobs"]["amount_job"]["stale"] is False
    assert http.get(f"{PREFIX}/topology").json()["jobs"]["price_job"]["stale"] is False
    r = http.get(f"{PREFIX}/topology", params={"name": "nope"})
    assert r.status_code == 404 and "topology 'nope' is not registered" in r.json()["detail"]

    page = http.get(f"{PREFIX}/barriers", params={"limit": 1}).json()
    assert [b["barrier"] for b in page["items"]] == [2] and page["items"][0]["root_versions"] == {ORDERS: 1}
    page = http.get(f"{PREFIX}/barriers", params={"limit": 1, "before": page["next_before"]}).json()
    assert [b["barrier"] for b in page["items"]] == [1] and page["next_before"] is None
    assert http.get(f"{PREFIX}/barriers", params={"limit": 0}).status_code == 422

    tb = http.get(f"{PREFIX}/tables/tsb/shop/user_item_amount/barriers").json()
    assert [(i["barrier"], i["state"]) for i in tb["items"]] == [(2, "PROCESSED"), (1, "WRITTEN")]
    assert tb["consistent"]["READ_UNCOMMITTED"] == {"barrier": 1, "version": 0, "state": "LATEST", "error": None}
    assert tb["consistent"]["READ_COMMITTED"]["barrier"] == 2 and tb["consistent"]["READ_COMMITTED"]["version"] == 0
    assert tb["consistent"]["REPEATABLE_READ"]["barrier"] == 1
    assert http.get(f"{PREFIX}/tables/tsb/shop/nope/barriers").status_code == 404

    # delays: set WRITTEN times relative to barrier 3's generation
    b3 = store.barriers.create("shop", {ORDERS: 1})
    t0 = b3.created_at_ms
    for table in (PRICE, AMOUNT, TOTAL):  # the versions recorded below exist in the Delta logs
        DeltaTable(store.registry.table(table).location).alter.set_table_properties({"delta.appendOnly": "false"})
    store.table_states.record_written(PRICE, 3, 2, "price_job", written_at_ms=t0 + 100)
    store.table_states.record_written(AMOUNT, 3, 1, "amount_job", written_at_ms=t0 + 400)
    store.table_states.record_written(TOTAL, 3, 1, "total_job", written_at_ms=t0 + 450)
    delays = http.get(f"{PREFIX}/delays", params={"limit": 2}).json()
    assert [b["barrier"] for b in delays["barriers"]] == [3, 2] and delays["next_before"] == 2
    d3 = delays["barriers"][0]
    assert d3["complete"] is True and d3["end_to_end_ms"] == 450
    assert {t: v["delay_ms"] for t, v in d3["tables"].items()} == {PRICE: 100, AMOUNT: 400, TOTAL: 450}
    assert {j: v["delay_ms"] for j, v in d3["jobs"].items()} == {"price_job": 100, "amount_job": 400, "total_job": 50}
    assert d3["bottleneck"] == "amount_job"
    d2 = delays["barriers"][1]
    assert d2["complete"] is False and d2["end_to_end_ms"] is None
    assert d2["tables"][AMOUNT]["state"] == "PROCESSED" and d2["tables"][TOTAL]["state"] == "PENDING"
    assert d2["jobs"]["total_job"]["delay_ms"] is None


def test_registering_a_table_again_with_another_location_is_a_conflict(http: TestClient, store: MetaStore,
                                                                       tmp_path) -> None:
    """Issue 25 item 5: the answer was 200 and the old location silently kept."""
    events, agg, elsewhere = str(tmp_path / "events"), str(tmp_path / "wh" / "agg"), str(tmp_path / "other")
    r = http.post(f"{PREFIX}/register/source/loader/c/raw/events",
                  json={"topology": "flow", "root": True, "location": events})
    assert r.status_code == 200, r.text
    r = http.post(f"{PREFIX}/register/sink/loader/c/mart/agg", json={"location": agg})
    assert r.status_code == 200, r.text
    assert http.post(f"{PREFIX}/register/sink/loader/c/mart/agg", json={"location": agg}).status_code == 200
    r = http.post(f"{PREFIX}/register/sink/loader/c/mart/agg", json={"location": elsewhere})
    assert r.status_code == 409 and r.json()["error"] == "TableLocationConflictError", r.text
    assert (f"table 'c.mart.agg' is registered at location '{agg}' and registered again at '{elsewhere}'"
            in r.json()["detail"])
    r = http.post(f"{PREFIX}/register/source/reader/c/raw/events", json={"location": elsewhere})
    assert r.status_code == 409 and f"'{events}'" in r.json()["detail"] and f"'{elsewhere}'" in r.json()["detail"]
    assert store.registry.table("c.mart.agg").location == agg
    assert store.registry.table("c.raw.events").location == events
    with pytest.raises(UnknownJobError):
        store.registry.job("reader")  # the refused first registration left no job behind
