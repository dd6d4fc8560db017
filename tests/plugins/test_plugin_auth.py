"""The TSB plugin inside the real api-server: Airflow auth protects its API and pages."""

from __future__ import annotations

import pytest

from dev.airflow_harness import VIEWER_PASSWORD, VIEWER_USER, AirflowHandle

pytestmark = pytest.mark.airflow

HEALTH = "/tsb/api/v1/health"
LINEAGE = "/tsb/ui/lineage"


def test_health_requires_authentication(airflow_server: AirflowHandle) -> None:
    resp = airflow_server.client.get(HEALTH)
    assert resp.status_code == 401
    assert "status" not in resp.text


def test_health_rejects_invalid_token(airflow_server: AirflowHandle) -> None:
    resp = airflow_server.client.get(HEALTH, headers={"Authorization": "Bearer not-a-jwt"})
    assert resp.status_code in (401, 403)
    assert "status" not in resp.text


def test_health_rejects_token_signed_with_another_secret(airflow_server: AirflowHandle) -> None:
    import jwt

    forged = jwt.encode({"sub": "admin", "role": "admin", "aud": "apache-airflow"}, "x" * 64, "HS512")
    resp = airflow_server.client.get(HEALTH, headers={"Authorization": f"Bearer {forged}"})
    assert resp.status_code in (401, 403)


def test_health_accepts_airflow_jwt(airflow_server: AirflowHandle, airflow_token: str) -> None:
    resp = airflow_server.client.get(HEALTH, headers={"Authorization": f"Bearer {airflow_token}"})
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


def test_health_accepts_viewer_jwt(airflow_server: AirflowHandle) -> None:
    token = airflow_server.get_token(VIEWER_USER, VIEWER_PASSWORD)
    resp = airflow_server.client.get(HEALTH, headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200


def test_health_accepts_session_cookie(airflow_server: AirflowHandle, airflow_token: str) -> None:
    import httpx

    with httpx.Client(base_url=airflow_server.base_url, cookies={"_token": airflow_token}) as client:
        resp = client.get(HEALTH)
    assert resp.status_code == 200


def test_lineage_page_requires_authentication(airflow_server: AirflowHandle) -> None:
    resp = airflow_server.client.get(LINEAGE, params={"dag_id": "x"})
    assert resp.status_code == 401
    assert "tsb-lineage-title" not in resp.text
    assert "/auth/login" in resp.text  # a login link, no data


def test_lineage_page_with_token(airflow_server: AirflowHandle) -> None:
    resp = airflow_server.request("GET", LINEAGE, params={"dag_id": "some_dag"})
    assert resp.status_code == 200
    assert "text/html" in resp.headers["content-type"]
    assert 'id="tsb-lineage"' in resp.text and "some_dag" in resp.text


def test_plugin_registered_with_views(airflow_server: AirflowHandle) -> None:
    tsb = [p for p in airflow_server.plugins() if p["name"] == "tsb"]
    assert len(tsb) == 1, airflow_server.plugins()
    plugin = tsb[0]
    assert [(a["url_prefix"], a["name"]) for a in plugin["fastapi_apps"]] == [("/tsb", "TSB API")]
    views = {v["url_route"]: v for v in plugin["external_views"]}
    nav = views["tsb-lineage"]
    assert (nav["destination"], nav["category"], nav["href"]) == ("nav", "browse", LINEAGE)
    dag_tab = views["tsb-dag-lineage"]
    assert dag_tab["destination"] == "dag"
    assert dag_tab["href"] == LINEAGE + "?dag_id={DAG_ID}"


def test_no_plugin_import_errors(airflow_server: AirflowHandle) -> None:
    errors = airflow_server.api("GET", "/plugins/importErrors")["import_errors"]
    assert errors == [], errors


# --- authorization helpers (requires_dag_access / requires_asset_access), via the probe plugin ---


@pytest.mark.parametrize(
    ("user", "path", "expected"),
    [
        (None, "/tsb-probe/dags/any_dag/read", 401),
        ("admin", "/tsb-probe/dags/any_dag/read", 200),
        ("viewer", "/tsb-probe/dags/any_dag/read", 200),
        ("admin", "/tsb-probe/dags/any_dag/edit", 200),
        ("viewer", "/tsb-probe/dags/any_dag/edit", 403),
        ("viewer", "/tsb-probe/assets/read", 200),
        (None, "/tsb-probe/assets/read", 401),
    ],
)
def test_authorization_helpers_apply_roles(
    airflow_server: AirflowHandle, user: str | None, path: str, expected: int
) -> None:
    headers = {}
    if user is not None:
        token = airflow_server.get_token(user, user)  # harness users: password == name
        headers = {"Authorization": f"Bearer {token}"}
    resp = airflow_server.client.get(path, headers=headers)
    assert resp.status_code == expected, resp.text
