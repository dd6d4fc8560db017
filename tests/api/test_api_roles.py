"""Roles on the running api-server: every TSB endpoint x Airflow's viewer, user, op and admin.

One real Airflow deployment for the module (dag-processor + api-server, the TSB plugin loaded),
with two topologies declared by two DAG files -- ``sales`` (DAG ``team_a_sales``) and
``payroll`` (DAG ``team_b_payroll``) -- and a metastore holding both with a barrier each (real
Delta tables). The auth manager is SimpleAuthManager's subclass
``tests/api/roles_auth_manager.py``: users viewer/user/op/admin keep SimpleAuthManager's
roles; ``alice`` (viewer) and ``bob`` (user) may access only the ``team_a_*`` DAGs, as a per-DAG
auth manager (FAB, Keycloak) grants them. Checked: status codes, state unchanged after a 403,
nothing of ``payroll`` in a 403 or a list, the link topology -> DAGs, and the input limits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from airflow_provider_tsb.api.access import EDIT_DENIED, READ_DENIED
from airflow_provider_tsb.exceptions import UnknownJobError
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology
from dev.airflow_harness import AirflowHandle, start_airflow
from tests.support.metaservice import write

pytestmark = pytest.mark.airflow

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
API = "/tsb/api/v1"
#: ``[tsb] max_leased_versions`` of the api-server under test
MAX_LEASED = 40
ROLES = ["viewer", "user", "op", "admin"]
USERS = [*ROLES, "alice", "bob"]
SCHEMA = pa.schema([("id", pa.int64())])
APP = "/opt/tsb-apps/job.py"

DAG_FILE = '''
import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_tsb.task_group import TsbTopologyTaskGroup
from airflow_provider_tsb.topology import Topology

topology = Topology("{name}", warehouse=os.environ["TSB_WAREHOUSE"])
topology.root_table("raw_{name}.events")
topology.job("{name}_job", "{app}", sources=["raw_{name}.events"], sinks=["{name}.out"])
{extra}
with DAG(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    TsbTopologyTaskGroup(topology, spark_conn_id="spark_local")
'''
# payroll's DAG file declares a second job whose sink is not registered yet
LATER = 'topology.job("payroll_later", "{app}", sources=["payroll.out"], sinks=["payroll.later"])'


def topology(name: str, warehouse: Path) -> Topology:
    topo = Topology(name, warehouse=str(warehouse))
    topo.root_table(f"raw_{name}.events")
    topo.job(f"{name}_job", APP, sources=[f"raw_{name}.events"], sinks=[f"{name}.out"])
    return topo


def populate(url: str, warehouse: Path) -> None:
    """Both topologies, barrier 1 WRITTEN in real Delta tables, a victim job per user."""
    store = MetaStore(url)
    store.migrate()
    for name in ("sales", "payroll"):
        store.registry.register_topology(topology(name, warehouse))
        root, sink = f"tsb.raw_{name}.events", f"tsb.{name}.out"
        write(store.registry.table(root).location, SCHEMA, [(1,), (2,)], "append", None, None)
        store.barriers.create(name, {root: 0}, run_key="r1")
        write(store.registry.table(sink).location, SCHEMA, [(2,)], "overwrite", 1, f"{name}_job")
        store.table_states.record_written(sink, 1, 0, f"{name}_job")
    for user in (*USERS, "anonymous"):
        store.registry.create_job("sales", f"{user}_victim")
    store.registry.create_job("payroll", "payroll_victim")
    store.dispose()


@dataclass
class Deployment:
    af: AirflowHandle
    store: MetaStore
    tokens: dict[str, str]
    warehouse: Path

    def call(self, user: str | None, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[user]}"} if user else {}
        headers.update(kw.pop("headers", {}))
        url = path if path.startswith("/tsb/ui") else API + path
        return self.af.client.request(method, url, headers=headers, json=body, **kw)


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    if os.environ.get("TSB_SKIP_AIRFLOW") == "1":
        pytest.skip("TSB_SKIP_AIRFLOW=1")
    tmp = tmp_path_factory.mktemp("tsb_roles")
    warehouse = tmp / "warehouse"
    url = f"sqlite:///{tmp / 'tsb.db'}"
    populate(url, warehouse)
    dags = tmp / "dags"
    dags.mkdir()
    for name, dag_id, extra in (("sales", "team_a_sales", ""), ("payroll", "team_b_payroll", LATER.format(app=APP))):
        (dags / f"{dag_id}.py").write_text(DAG_FILE.format(name=name, dag_id=dag_id, app=APP, extra=extra))
    passwords = tmp / "passwords.json"
    passwords.write_text(json.dumps({u: u for u in USERS}))
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != REPO_ROOT]
    env = {
        "TSB_METASTORE_URL": url,
        "TSB_WAREHOUSE": str(warehouse),
        "AIRFLOW__CORE__AUTH_MANAGER": "roles_auth_manager.DagPrefixAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
            f"{u}:{ {'alice': 'viewer', 'bob': 'user'}.get(u, u)}" for u in USERS
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__TSB__MAX_LEASE_SECONDS": "3600",
        "AIRFLOW__TSB__MAX_LEASED_VERSIONS": str(MAX_LEASED),
        "PYTHONPATH": os.pathsep.join([str(HERE), *inherited]),
    }
    af = start_airflow(dags, env_extra=env, components=("dag-processor", "api-server"))
    store = MetaStore(url)
    try:
        af.wait_for_dag("team_a_sales", timeout=90, fileloc_hint="team_a_sales")
        af.wait_for_dag("team_b_payroll", timeout=90, fileloc_hint="team_b_payroll")
        d = Deployment(af, store, {u: af.get_token(u, u) for u in USERS}, warehouse)
        yield d
    finally:
        store.dispose()
        af.stop()


# ------------------------------------------------------------------ the matrix
READS: dict[str, tuple[str, str, Any]] = {
    "health": ("GET", "/health", None),
    "topologies": ("GET", "/topologies", None),
    "topology": ("GET", "/topology?name=sales", None),
    "barriers": ("GET", "/barriers?topology=sales", None),
    "table_barriers": ("GET", "/tables/tsb/sales/out/barriers", None),
    "delays": ("GET", "/delays?topology=sales", None),
    "freshness": ("GET", "/freshness?topology=sales", None),
    "version": ("GET", "/version/REPEATABLE_READ/tsb/sales/out", None),
    "versions": ("POST", "/versions", {"tables": ["tsb.sales.out", "tsb.raw_sales.events"]}),
    "ui_lineage": ("GET", "/tsb/ui/lineage?topology=sales", None),
    "ui_delays": ("GET", "/tsb/ui/delays?topology=sales", None),
}
WRITES: dict[str, tuple[str, str, Any]] = {
    "register_sink": ("POST", "/register/sink/{user}_sink_job/tsb/sales/{user}_out", {"topology": "sales"}),
    "register_source": ("POST", "/register/source/{user}_source_job/tsb/raw_sales/events", {"topology": "sales"}),
    "unregister": ("POST", "/unregister/{user}_victim", None),
    "lease": ("POST", "/versions", {"tables": ["tsb.sales.out"], "lease_seconds": 60, "lease_holder": "{user}"}),
}


def _fill(value: Any, user: str) -> Any:
    return json.loads(json.dumps(value).replace("{user}", user)) if value is not None else None


@pytest.mark.parametrize("user", [None, *ROLES])
@pytest.mark.parametrize("endpoint", sorted(READS))
def test_reads(dep: Deployment, endpoint: str, user: str | None) -> None:
    method, path, body = READS[endpoint]
    r = dep.call(user, method, path, body)
    assert r.status_code == (401 if user is None else 200), r.text[:500]
    if user is None:  # (a login page links back to the page asked for: its URL, no data)
        assert "tsb.sales.out" not in r.text and "newest_barrier" not in r.text


@pytest.mark.parametrize("user", [None, *ROLES])
@pytest.mark.parametrize("endpoint", sorted(WRITES))
def test_changes(dep: Deployment, endpoint: str, user: str | None) -> None:
    method, path, body = WRITES[endpoint]
    who = user or "anonymous"
    r = dep.call(user, method, path.replace("{user}", who), _fill(body, who))
    expected = 401 if user is None else 403 if user == "viewer" else 200
    assert r.status_code == expected, r.text[:500]
    if expected == 403:
        assert r.json() == {"detail": EDIT_DENIED, "error": "AccessDeniedError"}
    changed = {
        "register_sink": lambda: _job(dep, f"{who}_sink_job") == ((), (f"tsb.sales.{who}_out",)),
        "register_source": lambda: _job(dep, f"{who}_source_job") == (("tsb.raw_sales.events",), ()),
        "unregister": lambda: _job(dep, f"{who}_victim") is None,
        "lease": lambda: "lease" in r.text and r.json().get("lease", {}).get("id") is not None,
    }[endpoint]()
    assert changed == (expected == 200)


def _job(dep: Deployment, job_id: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    try:
        info = dep.store.registry.job(job_id)
    except UnknownJobError:
        return None
    return info.sources, info.sinks


# ------------------------------------------------------------------ per-DAG access: nothing leaks
PAYROLL_WORDS = ("payroll", "team_b", "tsb.payroll.out", "raw_payroll")


def _no_payroll(r: httpx.Response) -> None:
    for word in PAYROLL_WORDS:
        assert word not in r.text, (word, r.text[:500])


def test_topologies_link_to_the_dags_that_run_them(dep: Deployment) -> None:
    r = dep.call("viewer", "GET", "/topologies")
    assert [(t["name"], t["dags"], t["newest_barrier"]) for t in r.json()] == [
        ("payroll", ["team_b_payroll"], 1), ("sales", ["team_a_sales"], 1)]
    r = dep.call("alice", "GET", "/topologies")
    assert [(t["name"], t["dags"]) for t in r.json()] == [("sales", ["team_a_sales"])]
    _no_payroll(r)
    # the DAG page tab finds the topology its DAG runs (no name heuristics: 'team_a_sales' is not 'sales_...')
    r = dep.call("alice", "GET", "/tsb/ui/lineage?dag_id=team_a_sales")
    assert r.status_code == 200 and '"topology": "sales"' in r.text and '"topologies": ["sales"]' in r.text
    _no_payroll(r)
    r = dep.call("viewer", "GET", "/tsb/ui/delays")
    assert '"topologies": ["payroll", "sales"]' in r.text


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/topology?name=payroll", None),
        ("GET", "/topology?name=no_such_topology", None),
        ("GET", "/barriers?topology=payroll", None),
        ("GET", "/delays?topology=payroll", None),
        ("GET", "/freshness?topology=payroll", None),
        ("GET", "/tables/tsb/payroll/out/barriers", None),
        ("GET", "/tables/tsb/no_such/table/barriers", None),
        ("GET", "/version/READ_COMMITTED/tsb/payroll/out", None),
        ("POST", "/versions", {"tables": ["tsb.payroll.out"]}),
        ("POST", "/versions", {"tables": ["tsb.sales.out", "tsb.payroll.out"]}),
    ],
)
def test_restricted_reader_gets_403_naming_nothing(dep: Deployment, method: str, path: str, body: Any) -> None:
    r = dep.call("alice", method, path, body)
    assert r.status_code == 403 and r.json() == {"detail": READ_DENIED, "error": "AccessDeniedError"}
    _no_payroll(r)
    assert dep.call("viewer", method, path, body).status_code in (200, 404, 409)  # not a 403


def test_restricted_reader_lists_only_its_topology(dep: Deployment) -> None:
    for path in ("/topology", "/barriers", "/delays"):  # no name: the only topology alice may read
        r = dep.call("alice", "GET", path)
        assert r.status_code == 200 and r.json().get("name", r.json().get("topology")) == "sales", r.text[:300]
        _no_payroll(r)
        r = dep.call("viewer", "GET", path)
        assert r.status_code == 422 and "payroll" in r.text and "sales" in r.text
    r = dep.call("alice", "GET", "/topology?name=sales")
    assert {"tsb.raw_sales.events", "tsb.sales.out"} <= set(r.json()["tables"])
    _no_payroll(r)
    r = dep.call("alice", "GET", "/tsb/ui/lineage?topology=payroll")
    assert r.status_code == 200 and "may not read it" in r.text and '"topology": null' in r.text
    assert "tsb.payroll" not in r.text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/register/sink/bob_job/tsb/payroll/x", {"topology": "payroll"}),
        ("/register/source/bob_reader/tsb/payroll/out", {"topology": "sales"}),  # a reader of payroll's table
        ("/register/source/sales_job/tsb/payroll/out", None),
        ("/register/sink/bob_job/tsb/new/table", {"topology": "brand_new"}),  # a new topology: all DAGs
        ("/unregister/payroll_victim", None),
        ("/unregister/no_such_job", None),
        ("/versions", {"tables": ["tsb.payroll.out"], "lease_seconds": 60}),
        ("/versions", {"tables": ["tsb.sales.out"], "lease_seconds": 60}),  # a lease is a change: bob may
    ],
)
def test_restricted_editor_changes_only_its_topology(dep: Deployment, path: str, body: Any) -> None:
    before = dep.store.registry.jobs()
    r = dep.call("bob", "POST", path, body)
    if path == "/versions" and body["tables"] == ["tsb.sales.out"]:
        assert r.status_code == 200 and r.json()["lease"]["id"]
        return
    assert r.status_code == 403 and r.json() == {"detail": EDIT_DENIED, "error": "AccessDeniedError"}
    _no_payroll(r)
    assert dep.store.registry.jobs() == before
    r = dep.call("alice", "POST", path, body)
    assert r.status_code == 403


def test_bob_registers_in_his_topology(dep: Deployment) -> None:
    r = dep.call("bob", "POST", "/register/sink/bob_sales_job/tsb/sales/bob_daily", {"topology": "sales"})
    assert r.status_code == 200 and r.json()["sinks"] == ["tsb.sales.bob_daily"]
    assert dep.call("bob", "POST", "/unregister/bob_sales_job").status_code == 200


# ------------------------------------------------------------------ what no role may do
def test_a_job_cannot_read_or_write_another_topologys_tables(dep: Deployment) -> None:
    r = dep.call("admin", "POST", "/register/source/sales_job/tsb/payroll/out")
    assert r.status_code == 409 and "belongs to topology 'payroll'" in r.json()["detail"]
    r = dep.call("admin", "POST", "/register/sink/sales_job/tsb/payroll/out")
    assert r.status_code == 409
    assert dep.store.registry.job("sales_job").sources == ("tsb.raw_sales.events",)
    assert dep.store.registry.table("tsb.payroll.out").readers == ()
    # a table another topology's DAG declares (not registered yet) is that DAG's to register
    r = dep.call("admin", "POST", "/register/sink/squatter/tsb/payroll/later", {"topology": "sales"})
    assert r.status_code == 409 and "declared by a DAG file that does not run topology 'sales'" in r.text
    assert dep.store.registry.table("tsb.payroll.later", required=False) is None


def test_no_root_table_through_the_api(dep: Deployment) -> None:
    r = dep.call("admin", "POST", "/register/source/sales_job/tsb/raw_sales/extra",
                 {"root": True, "location": str(dep.warehouse / "extra")})
    assert r.status_code == 409 and "does not create root tables" in r.json()["detail"]
    assert dep.store.registry.table("tsb.raw_sales.extra", required=False) is None
    assert dep.store.barriers.create("sales", {"tsb.raw_sales.events": 0}, run_key="after").barrier == 2


@pytest.mark.parametrize("location", ["/etc", "/etc/tsb_evil", "{wh}/../../etc", "relative/x", "file:///etc"])
def test_sink_locations_outside_the_warehouse(dep: Deployment, location: str) -> None:
    r = dep.call("admin", "POST", "/register/sink/loc_job/tsb/sales/loc_out",
                 {"topology": "sales", "location": location.format(wh=dep.warehouse)})
    assert r.status_code == 422 and r.json()["error"] == "LocationNotAllowedError", r.text
    assert "allowed_location_roots" in r.json()["detail"]
    assert dep.store.registry.table("tsb.sales.loc_out", required=False) is None


def test_lease_duration_is_bounded(dep: Deployment) -> None:
    r = dep.call("admin", "POST", "/versions", {"tables": ["tsb.sales.out"], "lease_seconds": 366 * 86400})
    assert r.status_code == 422 and "longest lease, 3600 s ([tsb] max_lease_seconds)" in r.json()["detail"]
    r = dep.call("admin", "POST", "/versions", {"tables": ["tsb.sales.out"], "lease_seconds": 3601})
    assert r.status_code == 422
    r = dep.call("admin", "POST", "/versions", {"tables": ["tsb.sales.out"], "lease_seconds": 3600})
    assert r.status_code == 200 and r.json()["lease"]["id"]


# ------------------------------------------------------------------ input limits on the real server
@pytest.mark.parametrize(
    ("raw", "loc"),
    [
        ('{"tables": ["tsb.sales.out"], "lease_seconds": NaN}', ["body", "lease_seconds"]),
        ('{"tables": ["tsb.sales.out"], "as_of": 1e999}', ["body", "as_of"]),
        ('{"tables": ["tsb.sales.out"], "min_barrier": Infinity}', ["body", "min_barrier"]),
        ('{"tables": ["tsb.sales.out"], "lease_seconds": -Infinity}', ["body", "lease_seconds"]),
    ],
)
def test_non_finite_numbers(dep: Deployment, raw: str, loc: list[str]) -> None:
    r = dep.call("admin", "POST", "/versions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, r.text


def test_body_size_limit_and_short_422(dep: Deployment) -> None:
    auth = {"Authorization": f"Bearer {dep.tokens['admin']}", "content-type": "application/json"}
    big = '{"tables": ["' + "x" * (2 * 1024 * 1024) + '"]}'
    r = dep.af.client.post(f"{API}/versions", content=big, headers=auth)
    assert r.status_code == 413 and "larger than 1048576 bytes" in r.json()["detail"] and len(r.content) < 500

    def chunks() -> Iterator[bytes]:
        yield b'{"tables": ["'
        for _ in range(40):
            yield b"y" * 65536
        yield b'"]}'

    r = dep.af.client.post(f"{API}/register/sink/j/c/d/t", content=chunks(), headers=auth)
    assert r.status_code == 413 and len(r.content) < 500
    r = dep.call("admin", "POST", "/versions", {"tables": ["t" * 500_000]})
    assert r.status_code == 422 and len(r.content) < 1000 and r.json()["detail"][0]["loc"] == ["body", "tables", 0]
    assert dep.call("admin", "GET", "/health").status_code == 200  # the server is still there


# ------------------------------------------------------------------ freshness targets (issue 13 item 6)
def _tsb_versions(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TSB_API_", "TSB_METASTORE"))}
    return subprocess.run([sys.executable, "-m", "airflow_provider_tsb", "versions", *args], capture_output=True,
                          text=True, env={**clean, **(env or {})}, timeout=120)


def test_cli_versions_through_the_api(dep: Deployment) -> None:
    """``tsb versions --api-url`` as a user runs it (issue 23 item 1): Airflow's base URL or the API
    URL, a token or a login; each wrong URL, credential or role is named in the error."""
    base = str(dep.af.client.base_url).rstrip("/")
    tables = ["tsb.sales.out", "tsb.raw_sales.events"]
    login = _tsb_versions(*tables, "--api-url", base, "--user", "viewer", env={"TSB_API_PASSWORD": "viewer"})
    assert login.returncode == 0, login.stderr
    answer = json.loads(login.stdout)
    assert answer["barrier"] == 1 and answer["tables"]["tsb.sales.out"]["version"] == 0
    token = _tsb_versions(*tables, env={"TSB_API_URL": base + API + "/", "TSB_API_TOKEN": dep.tokens["alice"]})
    assert token.returncode == 0, token.stderr
    assert json.loads(token.stdout)["tables"] == answer["tables"]

    wrong_password = _tsb_versions(*tables, "--api-url", base, "--user", "viewer", "--password", "nope")
    assert wrong_password.returncode == 1
    assert "refused the login of user 'viewer'" in wrong_password.stderr and "Traceback" not in wrong_password.stderr
    anonymous = _tsb_versions(*tables, "--api-url", base)
    assert anonymous.returncode == 1 and "not authenticated" in anonymous.stderr and "--token" in anonymous.stderr
    forbidden = _tsb_versions("tsb.payroll.out", "--api-url", base, "--token", dep.tokens["alice"])
    assert forbidden.returncode == 1 and "forbidden" in forbidden.stderr and "role" in forbidden.stderr
    nowhere = _tsb_versions(*tables, "--api-url", base + "/elsewhere", "--token", dep.tokens["viewer"])
    assert nowhere.returncode == 1 and "no tsb API there" in nowhere.stderr, nowhere.stderr
    no_login_there = _tsb_versions(*tables, "--api-url", base + "/elsewhere", "--user", "viewer", "--password", "v")
    assert no_login_there.returncode == 1 and "no Airflow token endpoint" in no_login_there.stderr
    unreachable = _tsb_versions(*tables, "--api-url", "http://127.0.0.1:9", "--token", "x")
    assert unreachable.returncode == 1 and "unreachable" in unreachable.stderr
    misplaced = _tsb_versions(*tables, "--token", "x")
    assert misplaced.returncode == 2 and "add --api-url" in misplaced.stderr


def test_delta_sharing_on_the_running_server(dep: Deployment, tmp_path: Path) -> None:
    """The official delta-sharing client with Airflow tokens (issue 24): alice reads sales at its
    barrier, sees no payroll share and gets the protocol's 403 for it; no token gets 401."""
    import delta_sharing
    from requests.exceptions import HTTPError

    endpoint = str(dep.af.client.base_url).rstrip("/") + "/tsb/sharing"

    def profile(user: str) -> str:
        path = tmp_path / f"{user}.share"
        path.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint,
                                    "bearerToken": dep.tokens[user]}))
        return str(path)

    alice, admin = profile("alice"), profile("admin")
    assert [s.name for s in delta_sharing.SharingClient(alice).list_shares()] == ["sales"]
    assert {s.name for s in delta_sharing.SharingClient(admin).list_shares()} == {"sales", "payroll"}
    frame = delta_sharing.load_as_pandas(f"{alice}#sales.sales.out", version=1)
    assert frame["id"].tolist() == [2]
    assert delta_sharing.get_table_version(f"{alice}#sales.raw_sales.events") == 1
    with pytest.raises(HTTPError) as err:
        delta_sharing.load_as_pandas(f"{alice}#payroll.payroll.out", version=1)
    assert err.value.response.status_code == 403
    assert err.value.response.json()["errorCode"] == "PERMISSION_DENIED"
    _no_payroll(err.value.response)
    anonymous = dep.af.client.get("/tsb/sharing/shares")
    assert anonymous.status_code == 401 and anonymous.json()["errorCode"] == "UNAUTHENTICATED"


def _tsb(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow_provider_tsb", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def _file_urls(r: httpx.Response) -> list[str]:
    assert r.status_code == 200, r.text
    return [json.loads(line)["file"]["url"] for line in r.text.splitlines() if '"file"' in line]


def test_a_share_profile_holds_a_recipient_scoped_to_its_share(dep: Deployment, tmp_path: Path) -> None:
    """Issue 57 item 1 on the real api-server: ``tsb share profile`` creates a recipient whose
    token opens its one share, read-only, and nothing of Airflow; a viewer may not create one;
    file URLs disclose no path and die with the recipient's revocation."""
    import delta_sharing
    from requests.exceptions import HTTPError

    base = str(dep.af.client.base_url).rstrip("/")
    viewer = _tsb("share", "profile", "sales", "--api-url", base, "--token", dep.tokens["alice"])
    assert viewer.returncode == 1 and "forbidden" in viewer.stderr and "Traceback" not in viewer.stderr
    other = _tsb("share", "profile", "payroll", "--api-url", base, "--token", dep.tokens["bob"])
    assert other.returncode == 1 and "forbidden" in other.stderr
    path = tmp_path / "sales.share"
    made = _tsb("share", "profile", "sales", "--api-url", base, "--user", "bob", "--expires-in", "2d",
                "-o", str(path), env={"TSB_API_PASSWORD": "bob"})
    assert made.returncode == 0, made.stderr
    assert path.stat().st_mode & 0o777 == 0o600
    profile = json.loads(path.read_text())
    token = profile["bearerToken"]
    assert token.startswith("tsbshare_") and token not in dep.tokens.values()
    assert profile["endpoint"] == base + "/tsb/sharing" and profile["expirationTime"].endswith("Z")
    rows = dep.store.recipients.list("sales")
    mine = next(r for r in rows if r.created_by == "bob")
    assert 2 * 86400_000 - 120_000 < mine.expires_at_ms - mine.created_at_ms <= 2 * 86400_000
    assert token not in json.dumps([r.__dict__ for r in rows])  # only the digest is stored

    # the share, and only it
    assert [s.name for s in delta_sharing.SharingClient(str(path)).list_shares()] == ["sales"]
    assert delta_sharing.load_as_pandas(f"{path}#sales.sales.out", version=1)["id"].tolist() == [2]
    with pytest.raises(HTTPError) as err:
        delta_sharing.load_as_pandas(f"{path}#payroll.payroll.out", version=1)
    assert err.value.response.status_code == 403
    bearer = {"Authorization": f"Bearer {token}"}
    for route in ("/tsb/sharing/shares/payroll/all-tables", "/tsb/sharing/shares/sales--read-committed"):
        r = dep.af.client.get(route, headers=bearer)
        assert r.status_code == 403 and r.json()["errorCode"] == "PERMISSION_DENIED", (route, r.text)
        _no_payroll(r)
    # nothing of Airflow's API, nor of the tsb REST API: not even minting another recipient
    for method, route in (("GET", "/api/v2/dags"), ("GET", "/api/v2/connections"), ("GET", "/api/v2/variables"),
                          ("GET", API + "/topologies"), ("GET", API + "/recipients"),
                          ("POST", API + "/versions"), ("POST", API + "/recipients"), ("GET", "/tsb/ui/lineage")):
        r = dep.af.client.request(method, route, headers=bearer, json={"share": "sales", "tables": ["tsb.sales.out"]})
        assert r.status_code in (401, 403), (method, route, r.status_code, r.text[:200])

    # an opaque file URL: no server path in it
    files = _file_urls(dep.af.client.post("/tsb/sharing/shares/sales/schemas/sales/tables/out/query",
                                          headers=bearer, json={"version": 1}))
    assert files and all(str(dep.warehouse) not in u and "warehouse" not in u for u in files)
    import base64
    for u in files:
        opaque = u.rsplit("/", 1)[1]
        assert b"warehouse" not in base64.urlsafe_b64decode(opaque + "=" * (-len(opaque) % 4))
    assert httpx.get(files[0], timeout=60).status_code == 200

    # bob lists and revokes it; alice (a viewer) sees none; then the token and its URLs stop
    listed = _tsb("share", "list", "sales", "--json", "--api-url", base, "--token", dep.tokens["bob"])
    assert listed.returncode == 0 and mine.id in [r["id"] for r in json.loads(listed.stdout)], listed.stderr
    assert "token" not in listed.stdout.lower().replace("tokens", "")
    assert dep.call("alice", "GET", "/recipients").json() == []
    assert dep.call("alice", "DELETE", f"/recipients/{mine.id}").status_code == 403
    revoked = _tsb("share", "revoke", mine.id, "--api-url", base, "--token", dep.tokens["bob"])
    assert revoked.returncode == 0 and "revoked recipient" in revoked.stdout, revoked.stderr
    gone = httpx.get(files[0], timeout=60)
    assert gone.status_code == 403 and "revoked" in gone.json()["message"]
    r = dep.af.client.get("/tsb/sharing/shares", headers=bearer)
    assert r.status_code == 401 and r.json()["errorCode"] == "UNAUTHENTICATED" and "revoked" in r.json()["message"]
    forged = dep.af.client.get("/tsb/sharing/shares", headers={"Authorization": "Bearer tsbshare_nope"})
    assert forged.status_code == 401 and "not known" in forged.json()["message"]


def test_a_recipient_expires_and_a_logged_out_users_urls_die(dep: Deployment) -> None:
    """A recipient's token stops at its expiry; a file URL issued to an Airflow token stops when
    that token is logged out (it used to answer until its own 900 s expiry)."""
    made = dep.call("bob", "POST", "/recipients", {"share": "sales", "expires_in": 2})
    assert made.status_code == 201, made.text
    bearer = {"Authorization": f"Bearer {made.json()['token']}"}
    assert dep.af.client.get("/tsb/sharing/shares", headers=bearer).status_code == 200
    time.sleep(2.2)
    late = dep.af.client.get("/tsb/sharing/shares", headers=bearer)
    assert late.status_code == 401 and "expired" in late.json()["message"]
    assert dep.call("bob", "POST", "/recipients", {"share": "sales", "expires_in": 0}).status_code == 422
    assert dep.call("bob", "POST", "/recipients", {"share": "nope"}).status_code == 403  # names nothing
    assert dep.call("admin", "POST", "/recipients", {"share": "nope"}).status_code == 404

    token = dep.af.get_token("viewer", "viewer")
    user = {"Authorization": f"Bearer {token}"}
    files = _file_urls(dep.af.client.post("/tsb/sharing/shares/sales/schemas/sales/tables/out/query",
                                          headers=user, json={"version": 1}))
    assert httpx.get(files[0], timeout=60).status_code == 200
    dep.af.client.get("/api/v2/auth/logout", headers=user)
    gone = httpx.get(files[0], timeout=60)
    assert gone.status_code == 403 and "logged out" in gone.json()["message"]


def _sharing_leases(dep: Deployment) -> int:
    from sqlalchemy import text

    with dep.store.engine.connect() as c:
        return c.execute(text("SELECT count(*) FROM tsb_lease WHERE holder LIKE '%delta-sharing%'")).scalar_one()


def test_reading_leases_only_with_the_lease_right_on_every_path(dep: Deployment) -> None:
    """Issue 57 item 2: a Viewer's and a recipient's Delta Sharing queries and changes write no
    lease, as the Viewer's ``POST /versions`` with ``lease_seconds`` is refused; a user with edit
    access leases exactly the versions served, for as long as the URLs live."""
    route = "/tsb/sharing/shares/sales/schemas/sales/tables/out"
    recipient = dep.call("bob", "POST", "/recipients", {"share": "sales"}).json()["token"]
    before = _sharing_leases(dep)
    for token in (dep.tokens["viewer"], dep.tokens["alice"], recipient):
        bearer = {"Authorization": f"Bearer {token}"}
        assert _file_urls(dep.af.client.post(f"{route}/query", headers=bearer, json={"version": 1}))
        changes = dep.af.client.get(f"{route}/changes?startingVersion=1&endingVersion=1", headers=bearer)
        assert changes.status_code == 200, changes.text
    assert _sharing_leases(dep) == before
    assert dep.call("viewer", "POST", "/versions", {"tables": ["tsb.sales.out"], "lease_seconds": 60}
                    ).status_code == 403
    bearer = {"Authorization": f"Bearer {dep.tokens['bob']}"}
    assert _file_urls(dep.af.client.post(f"{route}/query", headers=bearer, json={"version": 1}))
    assert dep.af.client.get(f"{route}/changes?startingVersion=1&endingVersion=1", headers=bearer).status_code == 200
    assert _sharing_leases(dep) == before + 2  # the query's version, and the one version changes served
    assert 0 in dep.store.leases.leased_versions("tsb.sales.out")


def test_a_users_leases_are_bounded_in_versions_on_every_path(dep: Deployment) -> None:
    """Issue 57 item 2: a user with the lease right kept versions from expiry by repeating reads.
    Every lease the api-server takes is held by its user (``user:NAME/ ...``) and all of them
    together pin at most ``[tsb] max_leased_versions`` versions (``MAX_LEASED`` here): past it,
    ``POST /versions``, a sharing ``query`` and ``changes`` answer 429 naming the limit, and
    another user still leases."""
    route = "/tsb/sharing/shares/sales/schemas/sales/tables/out"
    bearer = {"Authorization": f"Bearer {dep.tokens['bob']}"}
    held = dep.store.leases.held_versions("user:bob/ ")
    for _ in range(MAX_LEASED - held):
        r = dep.call("bob", "POST", "/versions", {"tables": ["tsb.sales.out"], "lease_seconds": 600})
        assert r.status_code == 200, r.text
    assert dep.store.leases.held_versions("user:bob/ ") == MAX_LEASED
    over = dep.call("bob", "POST", "/versions", {"tables": ["tsb.sales.out"], "lease_seconds": 600})
    assert over.status_code == 429, over.text
    body = over.json()
    assert body["error"] == "LeaseLimitError" and f"over the limit of {MAX_LEASED} per user" in body["detail"]
    query = dep.af.client.post(f"{route}/query", headers=bearer, json={"version": 1})
    changes = dep.af.client.get(f"{route}/changes?startingVersion=1&endingVersion=1", headers=bearer)
    # a query reuses the lease an earlier query of that version took (200, nothing new), else 429
    assert query.status_code in (200, 429) and changes.status_code == 429, (query.text, changes.text)
    refused = changes.json()
    assert refused["errorCode"] == "RESOURCE_LIMIT_EXCEEDED" and "max_leased_versions" in refused["message"]
    assert dep.store.leases.held_versions("user:bob/ ") == MAX_LEASED  # nothing pinned past the limit
    other = dep.call("alice", "POST", "/versions", {"tables": ["tsb.sales.out"], "lease_seconds": 60})
    assert other.status_code in (200, 403), other.text  # alice's own budget (403: no lease right on sales)


def test_freshness_on_the_running_server(dep: Deployment) -> None:
    """sales.out declares a 0.5 s target; a new barrier it has not committed makes it miss, with
    sales_job as the bottleneck, for a reader of sales (TsbClient with alice's token); after
    sales_job commits every barrier nothing misses. Runs last: it adds barriers to sales."""
    from deltalake import DeltaTable

    from airflow_provider_tsb.lineage import Table
    from airflow_provider_tsb.read.client import TsbClient

    sink = "tsb.sales.out"
    dep.store.registry.register_table("sales", Table(sink, "intermediate", freshness_s=0.5))
    newest = dep.store.barriers.create("sales", {"tsb.raw_sales.events": 0}, run_key="freshness").barrier
    committed = dep.store.table_states.newest_written(sink).barrier
    time.sleep(0.6)
    client = TsbClient(str(dep.af.client.base_url) + API, token=dep.tokens["alice"])
    answer = client.freshness("sales")
    out = answer["tables"][sink]
    assert answer["missed"] == [sink] and answer["newest_barrier"] == newest
    assert (out["target_s"], out["missed"], out["committed_barrier"], out["bottleneck"]) == (0.5, True, committed,
                                                                                           "sales_job")
    assert out["lag_s"] >= 0.6 and answer["jobs"]["sales_job"]["lag_s"] >= 0.6
    assert client.topology("sales")["tables"][sink]["freshness_missed"] is True
    r = dep.call("alice", "GET", "/freshness?topology=payroll")
    assert r.status_code == 403
    _no_payroll(r)
    location = dep.store.registry.table(sink).location
    for barrier in range(committed + 1, newest + 1):  # sales_job catches up
        write(location, SCHEMA, [(barrier,)], "overwrite", barrier, "sales_job")
        dep.store.table_states.record_written(sink, barrier, DeltaTable(location).version(), "sales_job")
    answer = client.freshness("sales")
    assert answer["missed"] == [] and answer["tables"][sink]["lag_s"] == 0.0
    assert answer["tables"][sink]["bottleneck"] is None and answer["tables"][sink]["committed_barrier"] == newest
