"""The modules that run on executors import in a bare interpreter (pyarrow, pandas, numpy and
pyspark from the Spark home, as on a cluster node) from the ``--py-files`` zip alone."""

from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path

import pytest

from airflow_provider_tsb.spark.packaging import EXECUTOR_MODULES, package_zip
from dev.spark_cluster import spark_home

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PROBE = """
import importlib, json, sys
mods = json.loads(sys.argv[1])
for m in mods:
    importlib.import_module(m)
heavy = sorted(m for m in ("deltalake", "sqlalchemy", "airflow", "alembic", "networkx", "fastapi")
               if m in sys.modules)
reader = sys.modules["airflow_provider_tsb.spark.barrier_source"].TsbStreamReader
print(json.dumps({"heavy": heavy, "reader": reader.__module__,
                  "package": sys.modules["airflow_provider_tsb"].__file__}))
"""


def executor_env(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH as an executor's Python worker has it: the shipped zip and the Spark home's
    pyspark and py4j zips; nothing of the driver's virtualenv."""
    lib = spark_home() / "python" / "lib"
    zips = [package_zip(tmp_path), *sorted(glob.glob(str(lib / "*.zip")))]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, "PYTHONPATH": os.pathsep.join(zips)}


def test_executor_modules_import_in_a_bare_interpreter(bare_python: str, tmp_path) -> None:
    env = executor_env(tmp_path)
    proc = subprocess.run([bare_python, "-c", PROBE, json.dumps(list(EXECUTOR_MODULES))], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["heavy"] == []
    assert out["reader"] == "airflow_provider_tsb.spark.barrier_source"
    assert ".zip" in out["package"]  # from the shipped zip, not an installation


def test_the_interpreter_is_bare(bare_python: str, tmp_path) -> None:
    """Control: the driver-side modules do not import there (no delta-rs, no Airflow)."""
    env = executor_env(tmp_path)
    for module, missing in (("airflow_provider_tsb.spark.streaming", "deltalake"),
                            ("airflow_provider_tsb.hooks.spark_job", "airflow")):
        proc = subprocess.run([bare_python, "-c", f"import {module}"], env=env, capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
        assert proc.returncode != 0 and f"No module named '{missing}" in proc.stderr, (module, proc.stderr[-1500:])


def test_a_bare_python_on_the_driver_side_is_named(bare_python: str, tmp_path) -> None:
    """``spark.pyspark.python`` set to the bare Python: the source's offset planning says which
    setting to change instead of a bare ``No module named`` from deep inside."""
    probe = (
        "from airflow_provider_tsb.spark.barrier_source import TsbStreamReader\n"
        "r = TsbStreamReader({'catalog': '{\"kind\": \"metastore\", \"url\": \"sqlite://\"}', "
        "'job_id': 'enrich_flights', 'sources': '{}'})\n"
        "r.latestOffset({'barrier': -1})\n"
    )
    proc = subprocess.run([bare_python, "-c", probe], env=executor_env(tmp_path), capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode != 0
    assert "job 'enrich_flights'" in proc.stderr and "spark.pyspark.python" in proc.stderr, proc.stderr[-2000:]
    assert "spark.sql.execution.pyspark.python" in proc.stderr
