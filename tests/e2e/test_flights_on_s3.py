"""The flights topology with its warehouse on ``s3://`` under the REAL Airflow scheduler (issue 58
item 6), against moto's S3 server.

A user's DAG file (:data:`S3_DAG`) declares the example flights topology with its warehouse in a
bucket (``TSB_WAREHOUSE=s3://...``) and one Airflow connection for the bucket
(``storage_conn_id="aws_tables"`` of ``TsbTopologyTaskGroup``). Scheduler, dag-processor,
triggerer and api-server (LocalExecutor, metadata DB on PostgreSQL) run two DAG runs: the
ingest task appends a day to the roots through delta-rs, the barrier task reads their versions
and writes the barrier log in the bucket, and each job runs as the operator runs it on a
``spark_connect`` connection, a Spark Connect client whose session reads the inputs and writes
the sinks through Hadoop's S3A connector (:mod:`airflow_provider_tsb.spark.hadoop_fs`). Then
the FLIP-276 invariants hold at every barrier (read through delta-rs), Spark's Delta reader at
each barrier's version equals delta-rs's read of it, the official Delta Sharing client reads
every sink AS OF each barrier through presigned URLs of the bucket (the files Spark wrote
through S3A), equal to tsb's own read, and ``tsb db rebuild`` rebuilds a lost metastore from the
bucket alone with every answer the same.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import delta_sharing
import httpx
import pytest

from airflow_provider_tsb.delta import storage
from dev.airflow_harness import start_airflow
from dev.e2e import examples_deployment
from dev.pg import start_postgres
from tests.maintenance.test_rebuild import (
    DAILY,
    ENRICHED,
    RANKING,
    _check_flights,
    _differences,
    _topologies,
    answers,
)

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.spark, pytest.mark.delta_spark]

BUCKET = "tsb-flights"
FLIGHTS_DAG = Path(__file__).resolve().parents[2] / "dags" / "flights_topology.py"


#: a user's DAG file: the example flights topology (``dags/common/flights.py``, its warehouse
#: ``$TSB_WAREHOUSE``) with every tsb task opening the bucket through one Airflow connection (the
#: barrier task, the jobs, the snapshot expiry); the ingest is the user's own code, so it sets the
#: same connection's options itself
S3_DAG = """
import airflow.providers.apache.spark.operators.spark_submit  # noqa: F401
import pendulum
from airflow.sdk import DAG, BaseHook, task
from common.flights import topology

from airflow_provider_tsb.operators.maintenance import TsbSnapshotExpiryOperator
from airflow_provider_tsb.task_group import TsbTopologyTaskGroup

with DAG(dag_id="flights_on_s3", schedule=None, start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
         catchup=False, max_active_runs=1) as dag:

    @task
    def ingest_next_day(**context: object) -> dict:
        from airflow_provider_tsb.delta import storage
        from tsb_examples.ingest import ingest_next_flights_days

        storage.configure(storage.storage_options_from_connection(BaseHook.get_connection("aws_tables")))
        run = context["dag_run"]
        return ingest_next_flights_days(topology.location("raw.flights"), topology.location("raw.weather"),
                                        run_key=f"{run.dag_id}/{run.run_id}")

    flights = TsbTopologyTaskGroup(topology, ts_kind="event", spark_conn_id="spark_local", storage_conn_id="aws_tables")
    # every table's log read in the bucket; 10 barriers kept, so nothing goes yet
    expiry = TsbSnapshotExpiryOperator(task_id="expire_snapshots", topology=topology, keep_barriers=10,
                                       storage_conn_id="aws_tables")
    ingest_next_day() >> flights >> expiry
"""


def _run_under_airflow(root: Path, env: dict[str, str], barriers: int) -> None:
    """``barriers`` runs of :data:`S3_DAG` under a real Airflow (PostgreSQL metadata DB), each a
    success; nothing in the environment gives the tasks the bucket's credentials but the
    ``aws_tables`` connection. The DAG folder holds the DAG file and a copy of the example's
    ``common/`` package, as ``dags/flights_topology.py`` tells a user to copy them."""
    dags = root / "dags"
    shutil.copytree(FLIGHTS_DAG.parent / "common", dags / "common", ignore=shutil.ignore_patterns("__pycache__"))
    (dags / "flights_on_s3.py").write_text(S3_DAG)
    pg = start_postgres()
    try:
        af = start_airflow(dags, home=root / "airflow", env_extra=env,
                           sql_alchemy_conn=str(pg.create_database("airflow")))
        try:
            af.wait_for_dag("flights_on_s3", timeout=180)
            assert not af.import_errors(), af.import_errors()
            for _ in range(barriers):
                af.run_dag("flights_on_s3", expect="success", timeout=600)
        finally:
            af.stop()
    finally:
        pg.stop()


class _Profile(str):
    """A Delta Sharing profile's path, with its server's endpoint as ``url``."""

    url: str


@contextmanager
def _sharing_server(store: Any, tmp_path: Path) -> Iterator[_Profile]:
    """The sharing routes over ``store`` on a real HTTP server (uvicorn), and a profile for it."""
    import socket
    import threading
    import time

    import uvicorn

    from airflow_provider_tsb.api.sharing.routes import create_sharing_app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(create_sharing_app(store, seconds=300), host="127.0.0.1", port=port,
                                        log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    path = tmp_path / "flights.share"
    endpoint = f"http://127.0.0.1:{port}/tsb/sharing"
    path.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": "unused"}))
    profile = _Profile(path)
    profile.url = endpoint
    try:
        yield profile
    finally:
        srv.should_exit = True
        thread.join(10)


def _plain(row: dict[str, Any]) -> tuple:
    import datetime as dt

    def one(v: Any) -> Any:
        return v.astimezone(dt.UTC).replace(tzinfo=None) if isinstance(v, dt.datetime) and v.tzinfo else v

    return tuple(one(v) for v in row.values())


def test_the_flights_topology_runs_under_the_scheduler_with_its_warehouse_on_s3_and_is_rebuilt_from_it(
    spark_remote: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyarrow.fs as pafs

    from airflow_provider_tsb.consistency import ReadOptions
    from airflow_provider_tsb.delta import version_of_barrier
    from airflow_provider_tsb.metastore.store import MetaStore
    from airflow_provider_tsb.read.resolutions import to_arrow
    from airflow_provider_tsb.spark.inputs import delta_version
    from airflow_provider_tsb.spark.session import get_spark
    from tests.support.s3_server import start_s3_server

    (tmp_path / "s3").mkdir()
    server = start_s3_server(tmp_path / "s3")
    try:
        pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1",
                          endpoint_override=server.endpoint.split("://")[1], scheme="http",
                          allow_bucket_creation=True).create_dir(BUCKET)
        connection = json.dumps({"conn_type": "aws", "login": "testing", "password": "testing",
                                 "extra": {"region_name": "us-east-1", "endpoint_url": server.endpoint}})
        warehouse = f"s3://{BUCKET}/warehouse"
        store, env = examples_deployment(tmp_path, spark_remote, TSB_WAREHOUSE=warehouse,
                                         AIRFLOW_CONN_AWS_TABLES=connection)
        assert storage.ENV_VAR not in env
        _run_under_airflow(tmp_path, env, barriers=2)

        # this process reads the bucket as the tasks did: through the same connection
        monkeypatch.setenv("AIRFLOW_CONN_AWS_TABLES", connection)
        monkeypatch.setenv("TSB_WAREHOUSE", warehouse)
        from airflow.sdk import BaseHook

        storage.configure(storage.storage_options_from_connection(BaseHook.get_connection("aws_tables")))
        flights = _topologies()["flights"]
        assert flights.location("raw.flights").startswith(f"{warehouse}/")
        assert [b.barrier for b in store.barriers.list("flights", ascending=True)] == [1, 2]
        assert store.registry.table("tsb.raw.flights").location.startswith(f"{warehouse}/")
        assert _check_flights(store) == 2

        # Spark's own Delta reader, through S3A, at each barrier's version equals delta-rs's read
        spark = get_spark("tsb-s3-reader", remote=spark_remote)
        try:
            for name in (ENRICHED, DAILY, RANKING):
                location = flights.location(name.removeprefix("tsb."))
                assert location.startswith("s3://")
                history = {r["version"]: json.loads(r["userMetadata"]) for r in spark.sql(
                    f"DESCRIBE HISTORY delta.`{location}`").select("version", "userMetadata").collect()
                    if r["userMetadata"]}
                for b in (1, 2):
                    version = version_of_barrier(location, b)
                    ours = to_arrow(store.resolution.resolve([name], ReadOptions(as_of=b)))[name]
                    by_spark = delta_version(spark, location, version).select(*ours.column_names).collect()
                    assert sorted(map(_plain, (r.asDict() for r in by_spark)), key=repr) == sorted(
                        map(_plain, ours.to_pylist()), key=repr) != [], (name, b)
                    assert history[version]["tsb.barrier"] == b, (name, b)
        finally:
            spark.stop()

        # Delta Sharing: the official client reads each sink AS OF each barrier through presigned
        # URLs of the bucket, equal to tsb's own read
        with _sharing_server(store, tmp_path) as profile:
            for name in (ENRICHED, DAILY, RANKING):
                _catalog, schema, table = name.split(".")
                for b in (1, 2):
                    ours = to_arrow(store.resolution.resolve([name], ReadOptions(as_of=b)))[name]
                    shared = delta_sharing.load_as_pandas(f"{profile}#flights.{schema}.{table}", version=b)
                    assert sorted(map(repr, shared[ours.column_names].itertuples(index=False, name=None))) == sorted(
                        map(repr, ours.to_pandas().itertuples(index=False, name=None))), (name, b)
            query = httpx.post(f"{profile.url}/shares/flights/schemas/flights/tables/carrier_ranking/query",
                               json={"version": 2}, timeout=60)
            file_url = json.loads(query.text.splitlines()[2])["file"]["url"]
            assert file_url.startswith(f"{server.endpoint}/{BUCKET}/warehouse/") and "X-Amz-Signature=" in file_url

        # the metastore is lost: rebuilt from the barrier log and the sinks' commits in the bucket
        before = answers(store, flights)
        rebuilt_url = f"sqlite:///{tmp_path / 'rebuilt.db'}"
        env = {**os.environ, "TSB_METASTORE_URL": rebuilt_url,
               storage.ENV_VAR: json.dumps(storage.configured_options())}
        proc = subprocess.run([sys.executable, "-m", "airflow_provider_tsb", "db", "rebuild", "--dags",
                               str(FLIGHTS_DAG)], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert [(r["topology"], r["newest_barrier"]) for r in json.loads(proc.stdout)] == [("flights", 2)]
        rebuilt = MetaStore(rebuilt_url)
        assert _differences({"flights": before}, {"flights": answers(rebuilt, flights)}) == []
        assert not any(p.name.startswith("s3") for p in Path.cwd().iterdir())  # nothing went to a local "s3:" dir
        store.dispose()
        rebuilt.dispose()
    finally:
        storage.configure(None)
        server.stop()
