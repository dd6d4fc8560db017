"""The TSB app's OpenAPI document and Swagger UI: behind the login, assets from the package.

In-process (FastAPI's TestClient on :func:`create_app`, Airflow's own authentication dependency);
the browser check with external requests blocked is ``tests/ui/test_ui_readable.py``.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from airflow_provider_tsb.api.app import create_app


def test_openapi_needs_a_login_and_redoc_is_gone() -> None:
    """(``/docs`` without a login answers a login page, which needs the api-server's auth manager:
    checked on a real api-server in ``tests/ui/test_ui_readable.py``.)"""
    client = TestClient(create_app())
    r = client.get("/openapi.json")
    assert r.status_code == 401 and "/api/v1/topology" not in r.text
    assert client.get("/redoc").status_code == 404


def test_swagger_ui_assets_are_served_from_the_package() -> None:
    client = TestClient(create_app())
    js = client.get("/static/vendor/swagger-ui/swagger-ui-bundle.js")
    assert js.status_code == 200 and "SwaggerUIBundle" in js.text[:5000] + js.text[-5000:]
    css = client.get("/static/vendor/swagger-ui/swagger-ui.css")
    assert css.status_code == 200 and ".swagger-ui" in css.text[:2000]
    pan_zoom = client.get("/static/vendor/svg-pan-zoom/svg-pan-zoom.min.js")
    assert pan_zoom.status_code == 200 and pan_zoom.text.startswith("// svg-pan-zoom v3.6.2")
    assert client.get("/static/vendor/../templates/lineage.html").status_code == 404
