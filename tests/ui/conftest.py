"""One real Airflow for the UI tests (api-server, scheduler, dag-processor) reading our metastore."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dev.airflow_harness import AirflowHandle, start_airflow
from tests.ui.flights_ui import FAILING_DAG, FAILING_DAG_ID, populate


@pytest.fixture(scope="package")
def airflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowHandle]:
    """Overrides the shared instance: Airflow reading our own populated metastore, with one failed
    run of :data:`FAILING_DAG` (its run id in ``handle.failed_run_id``)."""
    tmp = tmp_path_factory.mktemp("tsb_ui")
    url = f"sqlite:///{tmp / 'tsb_ui.db'}"
    populate(url, tmp / "warehouse").dispose()
    handle = start_airflow(env_extra={"TSB_METASTORE_URL": url},
                           components=("scheduler", "dag-processor", "api-server"))
    try:
        handle.add_dag_file("flights_ui_jobs.py", FAILING_DAG)
        handle.wait_for_dag(FAILING_DAG_ID, timeout=120, fileloc_hint="flights_ui_jobs")
        run = handle.run_dag(FAILING_DAG_ID, expect="failed", timeout=240)
        handle.failed_run_id = run["dag_run_id"]  # type: ignore[attr-defined]
        handle.metastore_url = url  # type: ignore[attr-defined]
        yield handle
    finally:
        handle.stop()
