"""The flights topology with its warehouse on ``s3://`` (issue 58 item 6), against moto's S3 server.

Everything a user's deployment does goes to the bucket: the roots are ingested and the barriers
generated (the barrier log) by this process through delta-rs; each job runs as the operator runs
it on a ``spark_connect`` connection, a Spark Connect client process of
:class:`~airflow_provider_tsb.hooks.spark_job.TsbSparkJobHook` with ``storage_conn_id``, whose
session reads the inputs and writes the sinks through Hadoop's S3A connector
(:mod:`airflow_provider_tsb.spark.hadoop_fs`) and commits through delta-rs. Then the FLIP-276
invariants hold at every barrier (read through delta-rs), Spark's Delta reader at each barrier's
version equals delta-rs's read of it, the official Delta Sharing client reads every sink AS OF
each barrier through presigned URLs of the bucket (the files Spark wrote through S3A), equal to
tsb's own read, and ``tsb db rebuild`` rebuilds a lost metastore from the bucket alone with every
answer the same.
"""

from __future__ import annotations

import json
import os
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
from dev.e2e import spark_connection
from tests.maintenance.test_rebuild import (
    DAILY,
    ENRICHED,
    RANKING,
    _check_flights,
    _differences,
    _generate,
    _ingest,
    _topologies,
    answers,
)

pytestmark = [pytest.mark.spark, pytest.mark.delta_spark, pytest.mark.slow]

BUCKET = "tsb-flights"
FLIGHTS_DAG = Path(__file__).resolve().parents[2] / "dags" / "flights_topology.py"


def _run_jobs(topology: Any, barrier: int) -> None:
    """Every job up to ``barrier`` as the operator runs it: a Spark Connect client process per job,
    the bucket's credentials from the ``aws_tables`` connection."""
    from airflow_provider_tsb.hooks.spark_engine import ConnectClient, SparkEngine
    from airflow_provider_tsb.hooks.spark_job import TsbSparkJobHook

    engine = SparkEngine.from_connection("spark_default")
    for job in topology.jobs_in_order():
        client = ConnectClient(job.application, engine, conf=dict(job.conf), job_id=job.id)
        TsbSparkJobHook(topology, job.id, tsb_conn_id="tsb_lite", storage_conn_id="aws_tables").run(barrier, client)


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


def test_the_flights_topology_runs_with_its_warehouse_on_s3_and_is_rebuilt_from_it(
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
        connection = {"conn_type": "aws", "login": "testing", "password": "testing",
                      "extra": {"region_name": "us-east-1", "endpoint_url": server.endpoint}}
        monkeypatch.setenv("AIRFLOW_CONN_AWS_TABLES", json.dumps(connection))
        url = f"sqlite:///{tmp_path / 'tsb.db'}"
        monkeypatch.setenv("AIRFLOW_CONN_TSB_LITE", json.dumps({"conn_type": "tsb", "extra": {"sqlalchemy_url": url}}))
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", spark_connection(spark_remote))
        monkeypatch.setenv("TSB_WAREHOUSE", f"s3://{BUCKET}/warehouse")
        monkeypatch.delenv("TSB_METASTORE_URL", raising=False)
        from airflow.sdk import BaseHook

        storage.configure(storage.storage_options_from_connection(BaseHook.get_connection("aws_tables")))
        flights = _topologies()["flights"]
        assert flights.location("raw.flights").startswith(f"s3://{BUCKET}/warehouse/")
        store = MetaStore(url)
        store.migrate()
        for i in range(2):
            _ingest(flights, f"f{i}")
            assert _generate(flights, "tsb_lite", f"f{i}") == i + 1
        _run_jobs(flights, 2)
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
