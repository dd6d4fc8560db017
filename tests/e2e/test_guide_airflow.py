"""The user guide's topology under the REAL Airflow scheduler (docs/guide.md section 6): the
guide's own DAG folder served by a real Airflow, one DAG run = one barrier through both jobs,
then read at REPEATABLE_READ (issue 11: "running under their own Airflow")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_tsb.consistency import ReadOptions
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.resolutions import to_arrow
from tests.support.guide import stop_guide_spark
from tsb_dev.airflow_harness import start_airflow

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.spark]


def test_the_guides_dag_runs_under_the_scheduler(followed_guide: tuple[Path, subprocess.CompletedProcess]) -> None:
    # the guide as written (metastore, Spark Connect server, topology, root table, jobs, two
    # barriers by hand, reads, `tsb spark stop`), then its Spark Connect server started again as
    # its section 1 does, for the DAG run
    tmp_path, proc = followed_guide
    assert proc.returncode == 0, proc.stderr[-4000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TSB_", "AIRFLOW_CONN_"))}
    started = subprocess.run([sys.executable, "-m", "airflow_provider_tsb", "spark", "start"], cwd=tmp_path,
                             env={**env, "AIRFLOW_HOME": str(tmp_path / "airflow")}, capture_output=True, text=True,
                             timeout=300)
    assert started.returncode == 0, started.stderr[-4000:]
    try:
        _run_under_airflow(tmp_path)
    finally:
        stop_guide_spark(tmp_path)


def _run_under_airflow(tmp_path: Path) -> None:
    (tmp_path / "day3.csv").write_text("sensor,ts,celsius\ns2,2026-06-03T10:00:00,18.0\ns4,2026-06-03T10:00:00,25.0\n")
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    env = {"TSB_METASTORE_URL": url, "TSB_WAREHOUSE": str(tmp_path / "warehouse"),
           "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": 15002}',
           "PYSPARK_PYTHON": sys.executable, "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120"}
    af = start_airflow(tmp_path / "dags", home=tmp_path / "airflow-scheduler", env_extra=env)
    try:
        af.wait_for_dag("readings", timeout=180)
        assert not af.import_errors(), af.import_errors()
        af.run_dag("readings", conf={"file": str(tmp_path / "day3.csv")}, timeout=600)
    finally:
        af.stop()
    store = MetaStore(url)
    q = ["tsb.iot.clean_readings", "tsb.iot.sensor_stats"]
    res = store.resolution.resolve(q, ReadOptions())
    assert res.barrier == 3  # two barriers by hand, the third from the DAG run
    tables = to_arrow(res)
    stats = dict(zip(*tables["tsb.iot.sensor_stats"].select(["sensor", "readings"]).to_pydict().values(),
                     strict=True))
    assert stats == {"s1": 2, "s2": 3, "s3": 1, "s4": 1}
    assert sum(stats.values()) == tables["tsb.iot.clean_readings"].num_rows == 7
