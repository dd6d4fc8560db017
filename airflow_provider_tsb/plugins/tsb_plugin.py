"""The TSB Airflow plugin: the TSB FastAPI app (REST API + UI pages) and its UI entries.

Registered through the ``airflow.plugins`` entry point::

    [project.entry-points."airflow.plugins"]
    tsb = "airflow_provider_tsb.plugins.tsb_plugin:TsbPlugin"

* ``fastapi_apps``: :func:`airflow_provider_tsb.api.app.create_app` mounted at ``/tsb`` in the
  api-server (REST under ``/tsb/api/v1``, HTML pages under ``/tsb/ui``, Swagger UI at ``/tsb/docs``),
  protected by Airflow's auth.
* ``external_views``: the barrier-delays and freshness pages in the *Browse* menu (``TSB Delays``,
  ``TSB Freshness``); the lineage
  page shown in the *Browse* menu (``destination="nav"``,
  ``category="browse"``) and as a *TSB lineage* tab on every DAG page (``destination="dag"``;
  the UI substitutes ``{DAG_ID}`` in ``href``). With ``url_route`` set, the UI embeds ``href`` in an
  iframe at ``/plugin/<url_route>`` (same origin, so the ``_token`` cookie authenticates it).
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_tsb.api.app import URL_PREFIX, create_app
from airflow_provider_tsb.ui.pages import UI_PREFIX

LINEAGE_PATH = f"{URL_PREFIX}{UI_PREFIX}/lineage"
DELAYS_PATH = f"{URL_PREFIX}{UI_PREFIX}/delays"
FRESHNESS_PATH = f"{URL_PREFIX}{UI_PREFIX}/freshness"

tsb_fastapi_app: dict[str, Any] = {
    "app": create_app(),
    "url_prefix": URL_PREFIX,
    "name": "TSB API",
}

lineage_nav_view: dict[str, Any] = {
    "name": "TSB Lineage",
    "href": LINEAGE_PATH,
    "destination": "nav",
    "category": "browse",
    "url_route": "tsb-lineage",
}

lineage_dag_view: dict[str, Any] = {
    "name": "TSB lineage",
    "href": f"{LINEAGE_PATH}?dag_id={{DAG_ID}}",
    "destination": "dag",
    "url_route": "tsb-dag-lineage",
}

delays_nav_view: dict[str, Any] = {
    "name": "TSB Delays",
    "href": DELAYS_PATH,
    "destination": "nav",
    "category": "browse",
    "url_route": "tsb-delays",
}

freshness_nav_view: dict[str, Any] = {
    "name": "TSB Freshness",
    "href": FRESHNESS_PATH,
    "destination": "nav",
    "category": "browse",
    "url_route": "tsb-freshness",
}


class TsbPlugin(AirflowPlugin):
    """Timestamp-barrier (FLIP-276) API and UI inside the Airflow api-server."""

    name = "tsb"
    fastapi_apps = [tsb_fastapi_app]
    external_views = [lineage_nav_view, freshness_nav_view, delays_nav_view, lineage_dag_view]
