"""The user guide's topology under the REAL Airflow scheduler (docs/guide.md section 6): the
guide's own DAG folder served by a real Airflow, one DAG run = one barrier through both jobs,
then read at REPEATABLE_READ (issue 11: "running under their own Airflow"); then the guide's
streaming DAG ("Stream it") over two arriving files, ending at its final barrier (issue 23)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_tsb.consistency import ReadOptions
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.resolutions import to_arrow
from dev.airflow_harness import start_airflow
from tests.support.guide import stop_guide_spark

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
        _check_batch_run(MetaStore(url))
        af.wait_for_dag("readings_streaming", timeout=60)
        arriving = tmp_path / "arriving"
        arriving.mkdir()
        header = "sensor,ts,celsius\n"
        (arriving / "day4.csv").write_text(header + "s1,2026-06-04T10:00:00,20.0\ns5,2026-06-04T10:00:00,30.0\n")
        (arriving / "day5.csv").write_text(header + "s5,2026-06-05T10:00:00,31.0\ns2,2026-06-05T10:00:00,500.0\n")
        run = af.run_dag("readings_streaming", conf={"folder": str(arriving), "pace_s": 1}, timeout=600)
        states = af.task_states("readings_streaming", run["dag_run_id"])
        assert set(states.values()) == {"success"}, states
    finally:
        af.stop()
    _check_streaming_run(MetaStore(url))


def _check_batch_run(store: MetaStore) -> None:
    q = ["tsb.iot.clean_readings", "tsb.iot.sensor_stats"]
    res = store.resolution.resolve(q, ReadOptions())
    assert res.barrier == 3  # two barriers by hand, the third from the DAG run
    tables = to_arrow(res)
    stats = dict(zip(*tables["tsb.iot.sensor_stats"].select(["sensor", "readings"]).to_pydict().values(),
                     strict=True))
    assert stats == {"s1": 2, "s2": 3, "s3": 1, "s4": 1}
    assert sum(stats.values()) == tables["tsb.iot.clean_readings"].num_rows == 7


def _check_streaming_run(store: MetaStore) -> None:
    """The streaming run ended at a final barrier holding both files (day5's 500 C cleaned out)."""
    q = ["tsb.iot.clean_readings", "tsb.iot.sensor_stats"]
    res = store.resolution.resolve(q, ReadOptions())
    latest = store.barriers.latest("readings")
    assert latest is not None and latest.final and res.barrier == latest.barrier > 3, (latest, res.barrier)
    tables = to_arrow(res)
    stats = dict(zip(*tables["tsb.iot.sensor_stats"].select(["sensor", "readings"]).to_pydict().values(),
                     strict=True))
    assert stats == {"s1": 3, "s2": 3, "s3": 1, "s4": 1, "s5": 2}
    assert sum(stats.values()) == tables["tsb.iot.clean_readings"].num_rows == 10
