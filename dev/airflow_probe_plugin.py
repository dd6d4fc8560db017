"""Test-only Airflow plugin (copied into the harness's plugins folder): exercises the TSB auth helpers.

Mounted at ``/tsb-probe`` next to the real TSB app, so the tests can check that
``requires_dag_access`` / ``requires_asset_access`` apply the auth manager's roles.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI

from airflow_provider_tsb.api.app import requires_asset_access, requires_dag_access

probe_app = FastAPI(title="tsb auth probe")


@probe_app.get("/dags/{dag_id}/read", dependencies=[Depends(requires_dag_access("GET"))])
async def dag_read(dag_id: str) -> dict[str, str]:
    return {"dag_id": dag_id, "access": "GET"}


@probe_app.get("/dags/{dag_id}/edit", dependencies=[Depends(requires_dag_access("PUT"))])
async def dag_edit(dag_id: str) -> dict[str, str]:
    return {"dag_id": dag_id, "access": "PUT"}


@probe_app.get("/assets/read", dependencies=[Depends(requires_asset_access("GET"))])
async def assets_read() -> dict[str, str]:
    return {"access": "GET"}


class TsbAuthProbePlugin(AirflowPlugin):
    name = "tsb_auth_probe"
    fastapi_apps = [{"app": probe_app, "url_prefix": "/tsb-probe", "name": "TSB auth probe"}]
