"""Request limits and table-location rules of the REST API, in process (the standalone app).

The same rules on the running api-server, with Airflow roles: ``tests/api/test_api_roles.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from airflow_provider_tsb.api.access import AllowAll
from airflow_provider_tsb.api.limits import non_finite_number_error
from airflow_provider_tsb.api.routes import create_metaservice_app
from airflow_provider_tsb.exceptions import LocationNotAllowedError
from airflow_provider_tsb.metastore.locations import check_location
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology
from tests.support.metaservice import PRICE, build_shop

PREFIX = "/tsb/api/v1"


@pytest.fixture
def shop_http(sqlite_store: MetaStore, tmp_path: Path) -> TestClient:
    build_shop(sqlite_store, str(tmp_path))
    app = create_metaservice_app(sqlite_store, prefix=PREFIX, access=AllowAll([str(tmp_path / "wh")]),
                                 max_body_bytes=64 * 1024)
    return TestClient(app)


@pytest.mark.parametrize(
    "location",
    ["/etc", "/etc/passwd", "{wh}/../../etc", "{wh}", "relative/path", "file:///etc", "s3://bucket/wh/t",
     "{wh}/link/x"],
)
def test_locations_outside_the_roots_are_refused(tmp_path: Path, location: str) -> None:
    wh = tmp_path / "wh"
    wh.mkdir()
    os.symlink("/etc", wh / "link")  # a symbolic link inside the warehouse pointing out of it
    with pytest.raises(LocationNotAllowedError) as err:
        check_location(location.format(wh=wh), [str(wh)])
    assert "is not allowed" in str(err.value) and "allowed_location_roots" in str(err.value)


@pytest.mark.parametrize("location", ["{wh}/tsb/a/b", "file://{wh}/x", "{wh}/sub/../y"])
def test_locations_under_a_root_are_accepted(tmp_path: Path, location: str) -> None:
    check_location(location.format(wh=tmp_path / "wh"), [str(tmp_path / "wh")])
    check_location("s3://bucket/wh/t", ["s3://bucket/wh"])
    with pytest.raises(LocationNotAllowedError):
        check_location("s3://bucket/wh/../other", ["s3://bucket/wh"])


@pytest.mark.parametrize(
    ("body", "loc", "token"),
    [
        (b'{"tables": ["a.b.c"], "lease_seconds": NaN}', ["body", "lease_seconds"], "NaN"),
        (b'{"tables": ["a.b.c"], "as_of": 1e999}', ["body", "as_of"], "1e999"),
        (b'{"tables": ["a.b.c"], "min_barrier": -Infinity}', ["body", "min_barrier"], "-Infinity"),
        (b'{"tables": [1, Infinity]}', ["body", "tables", 1], "Infinity"),
    ],
)
def test_non_finite_numbers_are_422_naming_the_field(shop_http: TestClient, body: bytes, loc: list, token: str) -> None:
    problem = non_finite_number_error(body)
    assert problem is not None and list(problem.errors()[0]["loc"]) == loc
    r = shop_http.post(f"{PREFIX}/versions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == loc and token in r.json()["detail"][0]["msg"]
    assert non_finite_number_error(b'{"tables": ["a.b.c"], "lease_seconds": 1.5e3}') is None


def test_bodies_over_the_limit_get_413_without_echo(shop_http: TestClient) -> None:
    big = b'{"tables": ["' + b"x" * 100_000 + b'"]}'
    r = shop_http.post(f"{PREFIX}/versions", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "larger than 65536 bytes" in r.json()["detail"] and len(r.content) < 500

    def chunks():  # no Content-Length: the limit applies while the body streams in
        yield b'{"tables": ["'
        for _ in range(20):
            yield b"y" * 10_000
        yield b'"]}'

    r = shop_http.post(f"{PREFIX}/versions", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "yyyy" not in r.text and len(r.content) < 500


def test_validation_errors_do_not_echo_huge_inputs(shop_http: TestClient) -> None:
    r = shop_http.post(f"{PREFIX}/versions", json={"tables": ["t" * 50_000]})
    assert r.status_code == 422 and len(r.content) < 1000, len(r.content)
    assert r.json()["detail"][0]["loc"] == ["body", "tables", 0] and "(50000 characters)" in r.text
    r = shop_http.post(f"{PREFIX}/register/sink/j/c/d/t", json={"topology": "z" * 40_000})
    assert r.status_code == 422 and len(r.content) < 1000


def test_standalone_app_rules(shop_http: TestClient, sqlite_store: MetaStore, tmp_path: Path) -> None:
    r = shop_http.post(f"{PREFIX}/register/sink/etc_job/c/d/t", json={"topology": "shop", "location": "/etc"})
    assert r.status_code == 422 and r.json()["error"] == "LocationNotAllowedError" and "'/etc'" in r.text
    # a reader of another topology's table
    r = shop_http.post(f"{PREFIX}/register/source/other_job/c/raw/x",
                       json={"topology": "other", "root": True, "location": str(tmp_path / "wh" / "x")})
    assert r.status_code == 200, r.text
    r = shop_http.post(f"{PREFIX}/register/source/other_job/{PRICE.replace('.', '/')}")
    assert r.status_code == 409 and "belongs to topology 'shop'" in r.json()["detail"]
    assert sqlite_store.registry.job("other_job").sources == ("c.raw.x",)
    # a root table added to a topology with barriers would break its barrier generation
    r = shop_http.post(f"{PREFIX}/register/source/price_job/c/raw/late",
                       json={"root": True, "location": str(tmp_path / "wh" / "late")})
    assert r.status_code == 409 and "has barriers already" in r.json()["detail"]
    assert sqlite_store.registry.table("c.raw.late", required=False) is None
    r = shop_http.post(f"{PREFIX}/versions", json={"tables": [PRICE], "lease_seconds": 366 * 86400})
    assert r.status_code == 422 and "max_lease_seconds" in r.text


def test_metastore_refuses_a_reader_of_another_topology(sqlite_store: MetaStore, tmp_path: Path) -> None:
    """The operators register through the MetaStore: the same rule holds there."""
    from airflow_provider_tsb.exceptions import TopologyError
    from airflow_provider_tsb.topology import Job

    build_shop(sqlite_store, str(tmp_path))
    other = Topology("other", warehouse=str(tmp_path / "wh"))
    other.root_table("c.raw.y")
    other.job("y_job", "y.py", sources=["c.raw.y"], sinks=["c.other.out"])
    sqlite_store.registry.register_topology(other)
    with pytest.raises(TopologyError, match="'tsb.shop.user_item_price' belongs to topology 'shop', not 'other'"):
        sqlite_store.registry.register_job("other", Job("y_job", "y.py", ("c.raw.y", PRICE), ("c.other.out",)))
    registry = sqlite_store.registry
    assert registry.job("y_job").sources == ("c.raw.y",) and registry.table(PRICE).readers == ("total_job",)


def test_a_setting_is_read_once_and_again_when_its_environment_variable_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.configuration import conf

    from airflow_provider_tsb.api.limits import config_seconds

    monkeypatch.setenv("AIRFLOW__TSB__SHARING_CHECK_SECONDS", "2.5")
    assert config_seconds("sharing_check_seconds", 1.0) == 2.5
    reads: list[str] = []
    real_get = conf.get

    def counting_get(section: str, key: str, *args: object, **kwargs: object) -> object:
        reads.append(key)
        return real_get(section, key, *args, **kwargs)

    monkeypatch.setattr(conf, "get", counting_get)
    assert config_seconds("sharing_check_seconds", 1.0) == 2.5
    assert reads == []  # kept: Airflow's config does not change under a running process
    monkeypatch.setenv("AIRFLOW__TSB__SHARING_CHECK_SECONDS", "0")
    assert config_seconds("sharing_check_seconds", 1.0) == 0.0
    assert reads == ["sharing_check_seconds"]
    monkeypatch.setenv("AIRFLOW__TSB__SHARING_CHECK_SECONDS", "61")
    with pytest.raises(ValueError, match=r"\[tsb\] sharing_check_seconds must be a number of seconds from 0 to 60"):
        config_seconds("sharing_check_seconds", 1.0, maximum=60.0)
