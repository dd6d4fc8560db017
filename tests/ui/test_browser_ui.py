"""Headless Chromium: log in to the Airflow UI and open the TSB pages (screenshots in test-output/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page

from dev.airflow_harness import AirflowHandle
from dev.browser import capture, frame_with_selector, screenshot
from tests.support.airflow_fixtures import DeployDag

pytestmark = [pytest.mark.airflow, pytest.mark.browser]

UI_DAG = """
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

with DAG(dag_id="browser_ui_dag", schedule=None, catchup=False):
    EmptyOperator(task_id="noop")
"""


def test_lineage_page_after_ui_login(page: Page, airflow_server: AirflowHandle, screenshot_dir: Path) -> None:
    shot = capture(page, f"{airflow_server.base_url}/tsb/ui/lineage", "#tsb-lineage", screenshot_dir, "lineage")
    assert shot.stat().st_size > 0
    assert page.locator("#tsb-user").inner_text() == "Signed in as admin"


def test_lineage_in_browse_menu(page: Page, airflow_server: AirflowHandle, screenshot_dir: Path) -> None:
    page.goto(f"{airflow_server.base_url}/")
    page.get_by_role("button", name="Browse").click()
    item = page.get_by_role("menuitem", name="TSB Lineage")
    item.wait_for()
    screenshot(page, screenshot_dir, "browse_menu", full_page=False)
    item.click()
    frame = frame_with_selector(page, "#tsb-lineage")
    assert frame != page.main_frame  # embedded by the Airflow UI as an external view
    assert "/plugin/tsb-lineage" in page.url
    screenshot(page, screenshot_dir, "lineage_nav_view")


def test_lineage_tab_on_dag_page(
    page: Page, airflow_server: AirflowHandle, deploy_dag: DeployDag, screenshot_dir: Path
) -> None:
    deploy_dag(UI_DAG, name="browser_ui_dag.py")
    page.goto(f"{airflow_server.base_url}/dags/browser_ui_dag")
    page.get_by_role("tab", name="TSB lineage").or_(page.get_by_role("link", name="TSB lineage")).first.click()
    frame = frame_with_selector(page, "#tsb-lineage-scope")
    assert frame.locator("#tsb-lineage-scope").inner_text() == "Scope: DAG browser_ui_dag"
    # inside the DAG tab's iframe the page still fits its width and keeps 12 px text
    fit = frame.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert fit[0] <= fit[1], fit
    sizes = frame.evaluate("""() => [...document.querySelectorAll("body *")].filter((e) =>
        [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim()) && e.getClientRects().length
        && !["SCRIPT", "STYLE"].includes(e.tagName)).map((e) => parseFloat(getComputedStyle(e).fontSize))""")
    assert sizes and min(sizes) >= 12, sizes
    screenshot(page, screenshot_dir, "lineage_dag_tab")
