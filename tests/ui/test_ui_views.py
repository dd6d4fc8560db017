"""The TSB UI pages in a real Airflow: lineage graph and delay views, in headless Chromium.

Starts its own Airflow (``conftest.py``: the plugin's API reads the metastore named by
``TSB_METASTORE_URL``, a SQLite file populated through the real :class:`MetaStore` API with the
flights topology and a few barriers, :mod:`tests.ui.flights_ui`), logs in through the Airflow UI, and checks the
rendered SVG graph, the barrier history of a table, the delay charts and numbers, and that an
unauthenticated client gets no data. Screenshots: ``test-output/screenshots/{lineage,delays}.png``
(the README's screenshots come from a real streaming run: ``tests/e2e/test_flights_streaming.py``).

Run: ``.venv/bin/pytest tests/ui/test_ui_views.py``
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page

from airflow_provider_tsb.metastore.store import MetaStore
from dev.airflow_harness import AirflowHandle
from dev.browser import frame_with_selector, screenshot
from tests.ui.flights_ui import JOBS, N_BARRIERS, ROOTS, SINKS
from tests.ui.flights_ui import open_page as _open

pytestmark = [pytest.mark.airflow, pytest.mark.browser]


def test_lineage_graph(page: Page, airflow_server: AirflowHandle, screenshot_dir: Path) -> None:
    # a running job shows "running" while it beats (stale after 300 s of silence): beat again, since
    # the package's set-up and earlier tests take longer than that on a loaded machine
    store = MetaStore(airflow_server.metastore_url)  # type: ignore[attr-defined]
    store.job_runs.heartbeat("carrier_ranking", status="running", barrier=N_BARRIERS)
    store.dispose()
    _open(page, f"{airflow_server.base_url}/tsb/ui/lineage?topology=flights", "#tsb-graph-svg")
    for table in ROOTS + SINKS:
        node = page.locator(f'[data-node="table:{table}"]')
        assert node.count() == 1, table
        assert node.get_attribute("data-kind") == "table"
    for job_id in JOBS:
        node = page.locator(f'[data-node="job:{job_id}"]')
        assert node.count() == 1, job_id
        assert node.get_attribute("data-kind") == "job"
    assert page.locator("[data-kind=table]").count() == 5
    assert page.locator("[data-kind=job]").count() == 3
    assert page.locator("path.edge").count() == 7
    # newest WRITTEN barrier, version and lag per table; job states
    ranking = page.locator('[data-node="table:tsb.flights.carrier_ranking"]')
    assert (ranking.get_attribute("data-barrier"), ranking.get_attribute("data-lag")) == (str(N_BARRIERS - 1), "1")
    enriched = page.locator('[data-node="table:tsb.flights.flights_enriched"]')
    assert enriched.get_attribute("data-version") == str(N_BARRIERS)
    assert enriched.get_attribute("data-lag") == "0"
    assert page.locator('[data-node="job:carrier_daily_delay"]').get_attribute("data-state") == "failed"
    assert page.locator('[data-node="job:carrier_ranking"]').get_attribute("data-state") == "running"
    # freshness targets: carrier_ranking (1 s) misses it, held back by its own job; the others (1 h) meet it
    assert (ranking.get_attribute("data-missed"), ranking.get_attribute("data-bottleneck"),
            ranking.get_attribute("data-freshness-target")) == ("true", "carrier_ranking", "1")
    assert float(ranking.get_attribute("data-freshness-lag") or 0) > 1
    # one wording: how far behind (barriers and time), then the target and whether it is met
    assert ranking.locator("text.freshness").text_content() == "target 1.0 s: MISSED"
    assert (ranking.locator("text.lag").text_content() or "").startswith("behind: 1 barrier, ")
    assert (enriched.get_attribute("data-missed"), enriched.get_attribute("data-freshness-lag")) == ("false", "0")
    assert enriched.locator("text.lag").text_content() == "up to date"
    assert enriched.locator("text.freshness").text_content() == "target 1.0 h: met"
    # click a table: barrier history and consistent versions
    ranking.dispatch_event("click")  # off the view at a readable zoom (a user pans to it)
    page.wait_for_selector("#tsb-history tr[data-barrier]")
    assert page.locator("#tsb-history tr[data-barrier]").count() == N_BARRIERS
    assert page.locator(f'#tsb-history tr[data-barrier="{N_BARRIERS}"]').get_attribute("data-state") == "PROCESSED"
    rr = page.locator('#tsb-consistent tr[data-level="REPEATABLE_READ"]').inner_text()
    assert f"#{N_BARRIERS - 1}" in rr
    screenshot(page, screenshot_dir, "lineage")


def test_asset_history_link_opens_the_tables_barrier_history(page: Page, airflow_server: AirflowHandle) -> None:
    """The ``tsb_history`` link of a tsb asset's extra (docs/airflow.md) opens the table's history."""
    from airflow_provider_tsb.ui.links import history_path

    link = history_path("flights", "flights.carrier_ranking")
    _open(page, f"{airflow_server.base_url}{link}", "#tsb-history tr[data-barrier]")
    assert page.locator("#tsb-detail-title").inner_text() == "Table tsb.flights.carrier_ranking"
    assert page.locator("#tsb-history tr[data-barrier]").count() == N_BARRIERS
    assert page.locator('[data-node="table:tsb.flights.carrier_ranking"]').get_attribute("class").split().count(
        "selected") == 1


def test_lineage_from_dag_tab_maps_dag_to_topology(page: Page, airflow_server: AirflowHandle) -> None:
    _open(page, f"{airflow_server.base_url}/tsb/ui/lineage?dag_id=flights_topology", "#tsb-graph-svg")
    assert page.locator("#tsb-topology-name").inner_text() == "flights"
    assert page.locator("#tsb-lineage-scope").inner_text() == "Scope: DAG flights_topology"


def test_delays_view(page: Page, airflow_server: AirflowHandle, screenshot_dir: Path) -> None:
    _open(page, f"{airflow_server.base_url}/tsb/ui/delays?topology=flights&limit=50", "#tsb-delay-table")
    rows = page.locator("#tsb-delay-table tr[data-barrier]")
    assert rows.count() == N_BARRIERS
    for job_id in JOBS:
        cells = page.locator(f'#tsb-delay-table td[data-job="{job_id}"]')
        values = [c for c in cells.evaluate_all("cs => cs.map(c => c.dataset.ms)") if c]
        expected = N_BARRIERS - 1 if job_id == "carrier_ranking" else N_BARRIERS
        assert len(values) == expected, (job_id, values)
        assert all(int(v) > 0 for v in values)
        assert page.locator(f'#tsb-job-summary-table td[data-job="{job_id}"][data-stat=avg]').inner_text() != "–"
    # barrier 1: enrich 4900, daily 4000, ranking 2600 -> enrich_flights is the bottleneck
    first = page.locator('#tsb-delay-table tr[data-barrier="1"]')
    assert first.locator("td.bottleneck").get_attribute("data-job") == "enrich_flights"
    assert first.locator("td[data-e2e]").get_attribute("data-e2e") == str(4900 + 4000 + 2600)
    # barrier 5: enrich 5800, daily 4000, ranking 7000 -> carrier_ranking
    fifth = page.locator('#tsb-delay-table tr[data-barrier="5"]')
    assert fifth.locator("td.bottleneck").get_attribute("data-job") == "carrier_ranking"
    assert page.locator(f'#tsb-delay-table tr[data-barrier="{N_BARRIERS}"]').get_attribute("data-complete") == "false"
    assert page.locator("#tsb-chart-tables-svg circle[data-series]").count() == 3 * N_BARRIERS - 1
    assert page.locator("#tsb-chart-jobs-svg rect.bar.bottleneck").count() == N_BARRIERS
    screenshot(page, screenshot_dir, "delays")


def test_freshness_page(page: Page, airflow_server: AirflowHandle, screenshot_dir: Path) -> None:
    response = page.goto(f"{airflow_server.base_url}/tsb/ui/freshness?topology=flights")
    assert response is not None and response.status == 200
    page.wait_for_selector("body[data-loaded=true]")
    # freshness: target, lag, missed and the bottleneck job per table
    fresh = page.locator("#tsb-freshness-table tr[data-table]")
    got = fresh.evaluate_all(
        "rs => rs.map(r => [r.dataset.table, r.dataset.missed, r.dataset.targetS, r.dataset.bottleneck])")
    assert got == [["tsb.flights.carrier_daily_delay", "false", "3600", ""],
                   ["tsb.flights.carrier_ranking", "true", "1", "carrier_ranking"],
                   ["tsb.flights.flights_enriched", "false", "3600", ""]]
    ranking = page.locator('#tsb-freshness-table tr[data-table="tsb.flights.carrier_ranking"]')
    assert float(ranking.get_attribute("data-lag-s") or 0) > 1
    assert page.locator("#tsb-freshness-summary").inner_text().startswith(
        "1 table(s) miss their freshness target: tsb.flights.carrier_ranking")
    assert ranking.locator("td").nth(3).inner_text() == "MISSED"
    assert ranking.locator("td").nth(1).inner_text().startswith("1 barrier, ")  # the lineage graph's wording
    enriched = page.locator('#tsb-freshness-table tr[data-table="tsb.flights.flights_enriched"]')
    assert [enriched.locator("td").nth(i).inner_text() for i in (1, 2, 3)] == ["up to date", "1.0 h", "met"]
    jobs = page.locator("#tsb-freshness-jobs-table tr[data-job]").evaluate_all("rs => rs.map(r => r.dataset.job)")
    assert jobs == sorted(JOBS)
    screenshot(page, screenshot_dir, "freshness")


def test_delays_view_pages_through_older_barriers(page: Page, airflow_server: AirflowHandle) -> None:
    _open(page, f"{airflow_server.base_url}/tsb/ui/delays?topology=flights&limit=4", "#tsb-delay-table")
    shown = page.locator("#tsb-delay-table tr[data-barrier]").evaluate_all("rs => rs.map(r => r.dataset.barrier)")
    assert sorted(int(b) for b in shown) == list(range(N_BARRIERS - 3, N_BARRIERS + 1))
    assert page.locator("#tsb-newest").count() == 0
    page.click("#tsb-older")
    page.wait_for_selector("body[data-loaded=true]")
    page.wait_for_selector("#tsb-delay-table tr[data-barrier]")
    older = page.locator("#tsb-delay-table tr[data-barrier]").evaluate_all("rs => rs.map(r => r.dataset.barrier)")
    assert sorted(int(b) for b in older) == list(range(1, N_BARRIERS - 3))
    assert page.locator("#tsb-older").count() == 0  # barrier 1 is on this page: nothing older
    assert "before=" in page.url and page.locator("#tsb-newest").count() == 1


def test_delays_in_browse_menu(page: Page, airflow_server: AirflowHandle) -> None:
    page.goto(f"{airflow_server.base_url}/")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="TSB Delays").click()
    frame = frame_with_selector(page, "#tsb-delays")
    assert frame != page.main_frame
    assert "/plugin/tsb-delays" in page.url


def test_unauthenticated_gets_no_data(browser: Browser, airflow_server: AirflowHandle) -> None:
    base = airflow_server.base_url
    with httpx.Client(base_url=base, timeout=30) as client:
        for path in ("/tsb/api/v1/topology?name=flights", "/tsb/api/v1/delays?topology=flights",
                     "/tsb/api/v1/freshness?topology=flights",
                     "/tsb/api/v1/tables/tsb/raw/flights/barriers", "/tsb/ui/lineage?topology=flights",
                     "/tsb/ui/delays?topology=flights", "/tsb/ui/freshness?topology=flights"):
            r = client.get(path)
            assert r.status_code == 401, (path, r.status_code)
            assert "flights_enriched" not in r.text and "enrich_flights" not in r.text
        bad = client.get("/tsb/api/v1/delays?topology=flights", headers={"Authorization": "Bearer forged"})
        assert bad.status_code in (401, 403)
    context = browser.new_context()
    try:
        anon = context.new_page()
        anon.goto(f"{base}/tsb/ui/lineage?topology=flights")
        assert anon.locator("#tsb-login").count() == 1
        assert anon.locator("[data-node]").count() == 0
    finally:
        context.close()


def test_freshness_in_browse_menu(page: Page, airflow_server: AirflowHandle) -> None:
    page.goto(f"{airflow_server.base_url}/")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="TSB Freshness").click()
    frame = frame_with_selector(page, "#tsb-freshness")  # two topologies: the page offers the selector
    assert frame != page.main_frame
    assert "/plugin/tsb-freshness" in page.url
