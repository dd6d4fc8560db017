"""Pytest fixtures for tests that need a real Airflow 3 deployment (see :mod:`dev.airflow_harness`).

A pytest plugin: ``tests/conftest.py`` registers it with ``pytest_plugins``; elsewhere run
``pytest -p tests.support.airflow_fixtures`` from the repository root.

Fixtures:

* ``airflow_server`` (session): one Airflow for the whole session, started on first use, with the
  TSB plugin loaded. Tests put DAG files into it with ``airflow_server.add_dag_file(...)``.
* ``deploy_dag`` (function): ``deploy_dag(source, dag_ids)`` writes a DAG file into the shared
  deployment and waits until the DAGs are parsed.
* ``airflow_token`` (session): admin JWT from ``POST /auth/token``.
* ``browser`` (session) / ``page`` (function): headless system Chromium; ``page`` is logged in.
* ``screenshot_dir`` (session): ``test-output/screenshots``.

Tests marked ``airflow`` (or ``browser``) are skipped, not failed, when
``TSB_SKIP_AIRFLOW=1`` (or Chromium is missing, for ``browser``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from dev.airflow_harness import AirflowHandle, shared_airflow, stop_shared_airflow

SCREENSHOT_DIR = Path(__file__).resolve().parents[2] / "test-output" / "screenshots"

__all__ = [
    "DeployDag",
    "airflow_server",
    "airflow_token",
    "browser",
    "deploy_dag",
    "page",
    "screenshot_dir",
]

DeployDag = Callable[..., Path]


@pytest.fixture(scope="session")
def airflow_server() -> Iterator[AirflowHandle]:
    if os.environ.get("TSB_SKIP_AIRFLOW") == "1":
        pytest.skip("TSB_SKIP_AIRFLOW=1")
    try:
        handle = shared_airflow()
        yield handle
    finally:
        stop_shared_airflow()


@pytest.fixture(scope="session")
def airflow_token(airflow_server: AirflowHandle) -> str:
    return airflow_server.get_token()


@pytest.fixture
def deploy_dag(airflow_server: AirflowHandle) -> DeployDag:
    """``deploy_dag(source, dag_ids=None, name=None, timeout=60) -> path``.

    ``source`` is DAG code (str) or a path to a DAG file. ``dag_ids`` default: every
    ``dag_id="..."`` / ``DAG("...")`` literal found in the source.
    """

    def deploy(
        source: str | Path,
        dag_ids: Iterable[str] | None = None,
        name: str | None = None,
        timeout: float = 60.0,
    ) -> Path:
        text = Path(source).read_text() if isinstance(source, Path) else source
        ids = list(dag_ids) if dag_ids is not None else _literal_dag_ids(text)
        if name is None:
            name = Path(source).name if isinstance(source, Path) else f"{ids[0] if ids else 'dag'}.py"
        written_at = datetime.now(UTC) - timedelta(seconds=1)
        path = airflow_server.add_dag_file(name, text)
        for dag_id in ids:
            airflow_server.wait_for_dag(dag_id, timeout=timeout, fileloc_hint=name, since=written_at)
        return path

    return deploy


def _literal_dag_ids(text: str) -> list[str]:
    pattern = r"""(?:dag_id\s*=\s*|DAG\(\s*)["']([A-Za-z0-9_.\-]+)["']"""
    return list(dict.fromkeys(re.findall(pattern, text)))


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    return SCREENSHOT_DIR


def skip_without_chromium() -> None:
    """Skip the calling test when the system Chromium is missing, as every browser test does."""
    from dev.browser import chromium_path

    if chromium_path() is None:
        pytest.skip("Chromium not installed (apt-get install -y chromium)")


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    from dev.browser import chromium

    skip_without_chromium()
    with chromium() as instance:
        yield instance


@pytest.fixture
def page(browser: Browser, airflow_server: AirflowHandle) -> Iterator[Page]:
    """A fresh browser context, logged in to the Airflow UI as the admin user."""
    from dev.browser import DEFAULT_TIMEOUT_MS, login

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    pg = context.new_page()
    login(pg, airflow_server.base_url, airflow_server.username, airflow_server.password)
    yield pg
    context.close()
