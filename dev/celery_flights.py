"""The flights topology under Airflow's CeleryExecutor with one worker: a documented run.

Nothing of the provider assumes the scheduler, the workers and the Spark driver share a
machine; this run shows the tasks going through a Celery queue (Redis broker) to a separate
``airflow celery worker`` process, with the Airflow metadata database and the tsb metastore on
PostgreSQL (a throwaway server from ``dev/pg.py``), the metastore reached only
through the ``tsb_default`` connection. It runs ``flights_topology`` (batch, one barrier per
DAG run) for ``--runs`` days and checks the FLIP-276 invariants at REPEATABLE_READ.

Needs ``redis-server`` (Debian package) and ``apache-airflow-providers-celery``, which pins
``python-dateutil<3``: install it in a virtualenv of its own rather than the project's, e.g.

    uv venv /tmp/celery-venv -p .venv/bin/python
    uv pip install -p /tmp/celery-venv/bin/python apache-airflow==<yours> apache-airflow-providers-celery \
        <the project's dependencies: pyproject.toml [project] dependencies, postgres, data>
    /tmp/celery-venv/bin/python dev/celery_flights.py --runs 2

(the repository goes on ``PYTHONPATH``; the provider need not be installed there). Last line:
``celery_runs=<n> barriers=<n> invariants=ok``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def start_redis(root: Path) -> tuple[subprocess.Popen, int]:
    from dev.spark_cluster import free_port

    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: apt-get install -y redis-server")
    port = free_port()
    log = (root / "redis.log").open("ab")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(root)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    time.sleep(0.5)
    return proc, port


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="flights_topology DAG runs (one barrier, one day each)")
    args = parser.parse_args()
    from dev.e2e import examples_deployment
    from dev.local_airflow import start_airflow
    from dev.pg import start_postgres

    root = Path(tempfile.mkdtemp(prefix="tsb-celery-"))
    pg = start_postgres()
    redis, redis_port = start_redis(root)
    worker = None
    af = None
    try:
        airflow_db = pg.create_database("airflow")
        tsb_db = pg.create_database("tsb")
        store, env = examples_deployment(root, TSB_METASTORE_URL=tsb_db)
        env.pop("TSB_METASTORE_URL")  # the metastore only through its connection
        env["AIRFLOW_CONN_TSB_DEFAULT"] = json.dumps({"conn_type": "tsb", "extra": {"sqlalchemy_url": tsb_db}})
        from airflow_provider_tsb.metastore.store import MetaStore

        store = MetaStore(tsb_db)
        store.migrate()
        backend = "db+" + airflow_db  # postgresql+psycopg2://
        env.update({
            "PYTHONPATH": str(REPO),  # the provider is not installed in this virtualenv
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": backend,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "4",
        })
        af = start_airflow(REPO / "dags", home=root / "airflow", env_extra=env, sql_alchemy_conn=airflow_db,
                           components=("scheduler", "dag-processor", "api-server"))
        log = (root / "celery-worker.log").open("ab")
        worker = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "celery", "worker",
                                   "--concurrency", "4", "--skip-serve-logs"], env=af.env, cwd=root,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        af.wait_for_dag("flights_topology", timeout=300)
        started = time.monotonic()
        for _ in range(args.runs):
            af.run_dag("flights_topology", expect="success", timeout=900)
        seconds = time.monotonic() - started
        from tsb_examples.demo import check_barrier

        barriers = [b.barrier for b in store.barriers.list("flights")]
        ok = all(check_barrier(store, max(barriers))[1].values())
        worker_log = (root / "celery-worker.log").read_text(errors="replace")
        executed = worker_log.count("Executing workload")
        print(f"{args.runs} flights_topology runs under the CeleryExecutor in {seconds:.0f} s; celery worker "
              f"log lines 'Executing workload': {executed}; logs in {root}")
        print(f"celery_runs={args.runs} barriers={len(barriers)} invariants={'ok' if ok else 'FAIL'}")
        return 0 if ok and len(barriers) == args.runs else 1
    finally:
        if af is not None:
            af.stop()
        for proc in (worker, redis):
            if proc is not None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=20)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    os.killpg(proc.pid, signal.SIGKILL)
        pg.stop()


if __name__ == "__main__":
    raise SystemExit(main())
