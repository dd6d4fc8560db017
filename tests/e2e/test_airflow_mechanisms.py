"""Airflow 3's own mechanisms on a real deployment (scheduler, dag-processor, triggerer,
api-server): a DAG scheduled by an ``AssetWatcher`` on committed barriers runs once per committed
barrier, with no sensor polling for it, and the api-server's connection form metadata carries the
``tsb`` connection's fields (issue 23 item 5).

Barriers are generated and committed through the metastore managers (as the job operators'
commits record them WRITTEN); no Spark runs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from airflow_provider_tsb.metastore.store import MetaStore
from dev.airflow_harness import AirflowHandle, start_airflow
from tests.support.orchestration import wordcount_topology

pytestmark = [pytest.mark.e2e, pytest.mark.airflow]

DAG_ID = "tsb_on_committed_barrier"
WORDS, COUNTS = "tsb.wordcount.word_count", "tsb.wordcount.count_of_counts"

DAG_SOURCE = '''
import os
import pendulum
from airflow.sdk import DAG

from airflow_provider_tsb.assets import committed_barrier_asset
from airflow_provider_tsb.sensors.barrier_committed import TsbBarrierCommittedSensor
from airflow_provider_tsb.topology import Topology

TABLES = ["tsb.wordcount.word_count", "tsb.wordcount.count_of_counts"]
topology = Topology("wordcount", warehouse=os.environ["TSB_WAREHOUSE"])
topology.root_table("raw.words")
topology.job("wordcount_words", "words.py", sources=["raw.words"], sinks=["wordcount.word_count"])
topology.job("wordcount_counts", "counts.py", sources=["wordcount.word_count"], sinks=["wordcount.count_of_counts"])
watched = committed_barrier_asset(topology, TABLES, poll_interval_s=0.5, from_barrier=0)

with DAG(dag_id="tsb_on_committed_barrier", schedule=[watched], start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, max_active_runs=1):
    TsbBarrierCommittedSensor(task_id="wait_for_barrier", tables=TABLES, poke_interval=1, timeout=60)
'''

#: the topology's own DAG: its job tasks have the tables' assets as outlets (parsed every few
#: seconds here: each parse used to cancel a watcher attached to a table's asset)
TOPOLOGY_DAG_SOURCE = '''
import os
import pendulum
from airflow.sdk import DAG

from airflow_provider_tsb.task_group import TsbTopologyTaskGroup
from airflow_provider_tsb.topology import Topology

topology = Topology("wordcount", warehouse=os.environ["TSB_WAREHOUSE"])
topology.root_table("raw.words")
topology.job("wordcount_words", "/nonexistent/words.py", sources=["raw.words"], sinks=["wordcount.word_count"])
topology.job("wordcount_counts", "/nonexistent/counts.py", sources=["wordcount.word_count"],
             sinks=["wordcount.count_of_counts"])

with DAG(dag_id="wordcount_jobs", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    TsbTopologyTaskGroup(topology)
'''


DEADLINE_DAG_SOURCE = '''
import os
import time
import pendulum
from airflow.sdk import DAG, task

from airflow_provider_tsb.deadlines import freshness_deadlines
from airflow_provider_tsb.topology import Topology

topology = Topology("fresh", warehouse=os.environ["TSB_WAREHOUSE"], freshness=3)
topology.root_table("raw.events")
topology.job("count_events", "count.py", sources=["raw.events"], sinks=["fresh.counts"])

with DAG(dag_id="tsb_freshness_deadline", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, deadline=freshness_deadlines(topology)):

    @task
    def slow_job():
        time.sleep(20)  # the barrier is not committed in time

    slow_job()
'''


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("mechanisms")
    url = f"sqlite:///{tmp / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    store.registry.register_topology(wordcount_topology(str(tmp / "warehouse")))
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "on_committed_barrier.py").write_text(DAG_SOURCE)
    (dags / "freshness_deadline.py").write_text(DEADLINE_DAG_SOURCE)
    (dags / "wordcount_jobs.py").write_text(TOPOLOGY_DAG_SOURCE)
    af = start_airflow(dags, home=tmp / "airflow",
                       # the metastore as an Airflow connection, not $TSB_METASTORE_URL: the watcher
                       # looks it up in the real triggerer (TsbMetastoreHook.aget_conn)
                       env_extra={"AIRFLOW_CONN_TSB_DEFAULT": json.dumps(
                                      {"conn_type": "tsb", "extra": {"sqlalchemy_url": url}}),
                                  "TSB_WAREHOUSE": str(tmp / "warehouse"),
                                  "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5"})
    try:
        yield af, store
    finally:
        af.stop()


def _commit(store: MetaStore, barrier_tables: dict[str, int], barrier: int | None = None) -> int:
    """Generate a barrier (or take ``barrier``) and record it WRITTEN in the given tables."""
    if barrier is None:
        newest = store.barriers.latest("wordcount")
        root_version = newest.barrier if newest else 0
        barrier = store.barriers.create("wordcount", {"tsb.raw.words": root_version}).barrier
    for table, version in barrier_tables.items():
        job = "wordcount_words" if table == WORDS else "wordcount_counts"
        store.table_states.record_written(table, barrier, version, job)
    return barrier


def _runs(af: AirflowHandle) -> list[dict[str, Any]]:
    data = af.api("GET", f"/dags/{DAG_ID}/dagRuns", params={"limit": 100, "order_by": "run_after"})
    return list(data["dag_runs"])


def _wait_runs(af: AirflowHandle, n: int, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Wait until ``n`` DAG runs exist and all have finished."""
    deadline = time.monotonic() + timeout
    while True:
        runs = _runs(af)
        if len(runs) >= n and all(r["state"] in ("success", "failed") for r in runs):
            return runs
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(runs)} run(s) of {DAG_ID} after {timeout} s, wanted {n}: {runs}\n"
                                 f"triggerer log:\n{af.component_log('triggerer')}")
        af.check_alive()
        time.sleep(1)


def _barrier_of(af: AirflowHandle, run: dict[str, Any]) -> tuple[list[int], Any]:
    """(the barriers of the run's triggering asset events, the sensor's XCom)."""
    run_id = quote(run["dag_run_id"], safe="")
    events = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/upstreamAssetEvents")["asset_events"]
    xcom = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/wait_for_barrier/xcomEntries/return_value")
    return [e["extra"]["payload"]["barrier"] for e in events], xcom["value"]


def test_asset_watcher_runs_the_dag_once_per_committed_barrier(deployment: Any) -> None:
    af, store = deployment
    af.wait_for_dag(DAG_ID, timeout=120)
    assert not af.import_errors(), af.import_errors()
    af.unpause(DAG_ID)
    assert _commit(store, {WORDS: 0, COUNTS: 0}) == 1
    first = _wait_runs(af, 1)
    assert first[0]["state"] == "success" and first[0]["run_type"] == "asset_triggered"
    assert _barrier_of(af, first[0]) == ([1], 1)
    # barrier 2 WRITTEN in word_count only: not committed, no run
    _commit(store, {WORDS: 1})
    time.sleep(4)  # eight polls of the watcher
    assert len(_runs(af)) == 1
    _commit(store, {COUNTS: 1}, barrier=2)
    runs = _wait_runs(af, 2)
    assert _barrier_of(af, runs[1]) == ([2], 2)
    time.sleep(4)  # eight polls: the watcher announced each barrier once, no third run
    assert len(_runs(af)) == 2
    payloads = [e["extra"]["payload"] for e in af.asset_events() if (e["extra"] or {}).get("from_trigger")]
    assert [p["barrier"] for p in payloads] == [1, 2]
    assert payloads[1]["versions"] == {COUNTS: 1, WORDS: 1} and payloads[1]["commit_state"] == "COMMIT"
    assert payloads[1]["tsb_history"][COUNTS] == "/tsb/ui/lineage?topology=wordcount&table=" + COUNTS
    _watcher_outlives_parses_and_outlet_events(af, store)


def _parsed_at(af: AirflowHandle, dag_id: str) -> str:
    return str(af.api("GET", f"/dags/{dag_id}/details")["last_parsed_time"])


def _watcher_outlives_parses_and_outlet_events(af: AirflowHandle, store: MetaStore) -> None:
    """Issue 56 item 2: three parse cycles of the topology's DAG file (its job tasks have the
    tables' assets as outlets) and of the watcher's cancel nothing, and an event on a table's
    asset (what a job's outlet emits) schedules no run: one run per barrier."""
    seen = {dag: {_parsed_at(af, dag)} for dag in ("wordcount_jobs", DAG_ID)}
    deadline = time.monotonic() + 180
    while min(len(v) for v in seen.values()) < 4:  # the first parse, then three more of each file
        assert time.monotonic() < deadline, f"parse times seen: {seen}"
        time.sleep(2)
        for dag in seen:
            seen[dag].add(_parsed_at(af, dag))
    (counts_asset,) = [a for a in af.assets() if a["name"] == COUNTS]
    af.api("POST", "/assets/events", json={"asset_id": counts_asset["id"], "extra": {"barrier": 2}})
    assert _commit(store, {WORDS: 2, COUNTS: 2}) == 3
    runs = _wait_runs(af, 3)
    assert _barrier_of(af, runs[2]) == ([3], 3)
    time.sleep(4)
    assert len(_runs(af)) == 3  # the table asset's event scheduled nothing
    triggerer = af.component_log("triggerer", lines=2000)
    assert "cancelled" not in triggerer.lower(), triggerer[-3000:]


def test_connection_form_metadata_has_the_tsb_fields(deployment: Any) -> None:
    af, _ = deployment
    metas = _hook_meta(af)
    tsb = next(m for m in metas if m["connection_type"] == "tsb")
    assert tsb["hook_name"] == "TSB Metastore"
    assert tsb["hook_class_name"] == "airflow_provider_tsb.hooks.metastore.TsbMetastoreHook"
    assert tsb["extra_fields"]["sqlalchemy_url"]["schema"]["title"] == "SQLAlchemy URL"
    assert tsb["extra_fields"]["dialect"]["schema"]["enum"] == ["postgresql", "sqlite", None]
    assert tsb["standard_fields"]["url_schema"]["title"] == "Database"
    assert tsb["standard_fields"]["host"]["placeholder"].startswith("PostgreSQL host")


def _hook_meta(af: AirflowHandle) -> list[dict[str, Any]]:
    resp = af.request("GET", "/ui/connections/hook_meta")
    assert resp.status_code == 200, resp.text
    return list(resp.json())


def test_dag_file_defines_the_watched_asset(deployment: Any) -> None:
    af, _ = deployment
    assets = af.api("GET", "/assets", params={"name_pattern": "count_of_counts"})["assets"]
    (asset,) = [a for a in assets if a["name"] == COUNTS]
    assert asset["extra"]["tsb_history"] == "/tsb/ui/lineage?topology=wordcount&table=" + COUNTS
    assert Path(asset["uri"].removeprefix("file://")).name == "count_of_counts"


def test_freshness_target_as_a_deadline_alert_names_the_lagging_table(deployment: Any) -> None:
    from airflow_provider_tsb.topology import Topology

    af, store = deployment
    topology = Topology("fresh", warehouse="/tmp/unused", freshness=3)
    topology.root_table("raw.events")
    topology.job("count_events", "count.py", sources=["raw.events"], sinks=["fresh.counts"])
    store.registry.register_topology(topology)
    store.barriers.create("fresh", {"tsb.raw.events": 0})  # never committed in fresh.counts
    af.wait_for_dag("tsb_freshness_deadline", timeout=120)
    run = af.run_dag("tsb_freshness_deadline", timeout=180)
    run_id = quote(run["dag_run_id"], safe="")
    resp = af.request("GET", f"/ui/dags/tsb_freshness_deadline/dagRuns/{run_id}/deadlines")
    assert resp.status_code == 200, resp.text
    (deadline,) = resp.json()["deadlines"]
    assert deadline["missed"] is True and deadline["alert_name"] == "tsb freshness 3 s: tsb.fresh.counts"
    message = "freshness target missed in topology 'fresh': tsb.fresh.counts"
    deadline_at = time.monotonic() + 60
    while message not in af.component_log("triggerer", lines=2000) and time.monotonic() < deadline_at:
        time.sleep(1)
    log = af.component_log("triggerer", lines=2000)
    assert message in log, log[-4000:]
