"""Freshness targets (issue 13 item 6) on the metastore, the REST API, TsbClient, the sensor and
``tsb freshness``, on SQLite and PostgreSQL.

The shop topology (tests/support/metaservice.py): ``price_job`` and ``amount_job`` read the
root table ``orders``, ``total_job`` joins their sinks. After ``build_shop`` barrier 2 is
WRITTEN by ``price_job`` but only PROCESSED by ``amount_job`` (held back), so ``amount`` and
``total`` commit barrier 1. Targets come from the declaration: the topology's default 30 s,
``total`` 0.05 s. Exact lags use ``freshness(now=...)``; the API and sensor use the clock.
The real run with Spark jobs is tests/spark/test_staleness.py.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

import pytest
from deltalake import DeltaTable
from fastapi.testclient import TestClient

from airflow_provider_tsb.api.routes import create_metaservice_app
from airflow_provider_tsb.cli import main
from airflow_provider_tsb.exceptions import TopologyError
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.client import TsbClient
from airflow_provider_tsb.topology import Topology
from tests.support.metaservice import AMOUNT, ORDERS, PRICE, TOTAL, build_shop

PREFIX = "/tsb/api/v1"


def declare(root: str) -> Topology:
    topo = Topology("shop", warehouse=os.path.join(root, "wh"), freshness=timedelta(seconds=30))
    topo.root_table(ORDERS)
    topo.table(TOTAL, freshness=0.05)
    topo.job("price_job", "price.py", sources=[ORDERS], sinks=[PRICE])
    topo.job("amount_job", "amount.py", sources=[ORDERS], sinks=[AMOUNT])
    topo.job("total_job", "total.py", sources=[PRICE, AMOUNT], sinks=[TOTAL])
    return topo


def test_freshness_declaration_errors() -> None:
    with pytest.raises(TopologyError, match="topology 'x': freshness must be a timedelta or a number of seconds, "
                       "finite and > 0, got -1"):
        Topology("x", freshness=-1)
    with pytest.raises(TopologyError, match="table 'c.d.t': freshness .* got nan"):
        Topology("y").table("c.d.t", freshness=float("nan"))


def test_freshness_lags_bottleneck_and_surfaces(
    store: MetaStore, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException

    from airflow_provider_tsb.sensors.freshness import TsbFreshnessSensor

    build_shop(store, str(tmp_path))
    store.registry.register_topology(declare(str(tmp_path)))
    assert {t.name: t.freshness_s for t in store.registry.tables("shop")} == {ORDERS: None, PRICE: 30.0, AMOUNT: 30.0,
                                                                     TOTAL: 0.05}
    b2 = store.barriers.get("shop", 2)

    # exact figures at an instant 7 s after barrier 2 was generated
    report = store.freshness.report("shop", now=b2.created_at_ms + 7000)
    assert report.newest_barrier == 2 and report.newest_barrier_age_s == 7.0
    got = {t: (f.lag_s, f.missed, f.committed_barrier, f.processed_barrier, f.bottleneck)
           for t, f in report.tables.items()}
    assert got == {PRICE: (0.0, False, 2, 2, None), AMOUNT: (7.0, False, 1, 2, "amount_job"),
                   TOTAL: (7.0, True, 1, 1, "amount_job")}
    assert {j: (f.written_barrier, f.ready_barrier, f.lag_s) for j, f in report.jobs.items()} == {
        "price_job": (2, 2, 0.0), "amount_job": (1, 2, 7.0), "total_job": (1, 1, 0.0)}
    assert report.missed == [TOTAL]
    # the lag grows with wall time until the next COMMIT: at 31 s amount misses its 30 s too
    assert store.freshness.report("shop", now=b2.created_at_ms + 31_000).missed == [AMOUNT, TOTAL]

    # REST API, TsbClient, the lineage fields of GET /topology
    time.sleep(0.06)
    http = TestClient(create_metaservice_app(store, prefix=PREFIX))
    client = TsbClient(PREFIX, http=http)
    answer = client.freshness("shop")
    assert answer["missed"] == [TOTAL] and answer["newest_barrier"] == 2
    total = answer["tables"][TOTAL]
    assert total["lag_s"] == (answer["measured_at_ms"] - b2.created_at_ms) / 1000 and total["lag_s"] > 0.05
    assert (total["target_s"], total["bottleneck"], total["committed_barrier"]) == (0.05, "amount_job", 1)
    assert answer["jobs"]["amount_job"]["lag_s"] > 0 and answer["jobs"]["total_job"]["lag_s"] == 0
    lineage = http.get(f"{PREFIX}/topology").json()["tables"]
    assert (lineage[TOTAL]["freshness_missed"], lineage[TOTAL]["bottleneck"], lineage[PRICE]["freshness_missed"]) \
        == (True, "amount_job", False)
    assert http.get(f"{PREFIX}/freshness", params={"topology": "nope"}).status_code == 404

    # the sensor (and its callback) and the CLI
    monkeypatch.setenv("TSB_METASTORE_URL", store.url)
    seen: list[list[str]] = []
    check = TsbFreshnessSensor(task_id="fresh", topology="shop", fail_on_miss=True, poke_interval=0.1, timeout=5,
                               mode="poke", on_freshness_miss=lambda r, _ctx: seen.append(r.missed))
    with pytest.raises(AirflowFailException, match=r"tsb.shop.user_item_total: lag \d+\.\d s > target 0.05 s "
                       r"\(committed barrier 1, newest 2; bottleneck job 'amount_job'\)"):
        check.execute({})
    assert seen == [[TOTAL]]
    wait = TsbFreshnessSensor(task_id="wait", topology="shop", tables=[PRICE, AMOUNT, TOTAL], poke_interval=0.1,
                              timeout=0.3, mode="poke")
    with pytest.raises(AirflowSensorTimeout, match="still missed after 0 s: tsb.shop.user_item_total: lag"):
        wait.execute({})
    soft = TsbFreshnessSensor(task_id="soft", topology="shop", poke_interval=0.1, timeout=0.2, soft_fail=True)
    with pytest.raises(AirflowSkipException):
        soft.execute({})
    capsys.readouterr()  # the sensors' log lines
    assert main(["freshness", "shop", "--url", store.url]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("topology shop: newest barrier 2 (generated ")
    rows = {cells[0]: cells[1:] for cells in (line.split() for line in out[2:])}
    assert (rows[TOTAL][0], rows[TOTAL][2:]) == ("0.05", ["MISSED", "1", "amount_job"]) and float(rows[TOTAL][1]) > 0.05
    assert rows[PRICE] == ["30", "0.0", "ok", "2", "-"]

    # amount_job catches up: barrier 2 WRITTEN in amount and total; nothing misses, lags are 0
    for table in (AMOUNT, TOTAL):  # a Delta version for the state to record (as in test_api)
        DeltaTable(store.registry.table(table).location).alter.set_table_properties({"delta.appendOnly": "false"})
    store.table_states.record_written(AMOUNT, 2, 1, "amount_job")
    store.table_states.record_written(TOTAL, 2, 1, "total_job")
    report = store.freshness.report("shop")
    assert report.missed == [] and {t: f.lag_s for t, f in report.tables.items()} == {PRICE: 0, AMOUNT: 0, TOTAL: 0}
    assert all(f.bottleneck is None for f in report.tables.values())
    assert client.freshness()["missed"] == []
    assert check.execute({}) == {AMOUNT: 0.0, PRICE: 0.0, TOTAL: 0.0}
    capsys.readouterr()
    assert main(["freshness", "shop", "--url", store.url, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["tables"][TOTAL]["lag_s"] == 0.0
