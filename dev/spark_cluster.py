"""A real Spark standalone cluster for the tests, and the bare Python its executors run.

:func:`start_cluster` starts a master and ``workers`` workers from pyspark's own jars
(``spark-class org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker
spark://127.0.0.1:<port>``, Spark docs "Spark Standalone Mode", "Starting a Cluster Manually"),
each worker with its own work directory, cores and memory, on free ports, and waits until
every worker is registered (the master's ``/json`` status). :meth:`SparkCluster.stop` ends
each daemon by its process group id (SIGTERM, then SIGKILL), nothing else.

:func:`bare_python` is the executors' interpreter: a virtualenv with only what a Spark cluster
image carries for PySpark (pyarrow, pandas, numpy at the driver's versions): no Airflow, no
``deltalake``, no ``airflow_provider_tsb``. pyspark itself comes from the worker's Spark home
(``python/lib/pyspark.zip``), as on a cluster. Created with ``uv`` and cached under
``~/.cache/airflow-provider-tsb/`` keyed by the Python and package versions.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_tsb.spark.process_group import ProcessGroup

#: what a Spark cluster image carries for PySpark (pyspark's own dependencies)
BARE_PACKAGES = ("pyarrow", "pandas", "numpy")


def spark_home() -> Path:
    """pyspark's installation directory: a Spark home with ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bare_python(cache_root: Path | None = None) -> str:
    """Path of a bare interpreter: a virtualenv with only :data:`BARE_PACKAGES`, pinned to the
    driver's versions (see :func:`dev.venvs.cached_venv`)."""
    from importlib.metadata import version

    from dev.venvs import cached_venv

    pins = [f"{name}=={version(name)}" for name in BARE_PACKAGES]
    return str(cached_venv("bare-python", pins, cache_root) / "bin" / "python")


@dataclass
class SparkCluster:
    """A running standalone cluster (see module doc).

    Attributes:
        master_url: ``spark://127.0.0.1:<port>``.
        web_url: the master's web UI (``/json`` lists the workers).
        root: directory of the daemons' logs and the workers' work directories.
    """

    master_url: str
    web_url: str
    root: Path
    processes: list[subprocess.Popen] = field(default_factory=list)
    #: each daemon's process group, with its leader's start time (never signal a reused pid)
    groups: list[ProcessGroup] = field(default_factory=list)
    worker_cores: int = 1
    worker_memory: str = "1g"

    def status(self) -> dict:
        """The master's JSON status (workers, applications)."""
        with urllib.request.urlopen(self.web_url + "/json/", timeout=5) as resp:
            return json.load(resp)

    def alive_workers(self) -> int:
        return sum(1 for w in self.status().get("workers", []) if w.get("state") == "ALIVE")

    def stop(self) -> None:
        """End every daemon by its process group (SIGTERM, then SIGKILL after 10 s)."""
        for group in reversed(self.groups):
            group.signal(signal.SIGTERM)
        for proc, group in reversed(list(zip(self.processes, self.groups, strict=True))):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                group.signal(signal.SIGKILL)
                proc.wait(timeout=10)
        self.processes.clear()
        self.groups.clear()


def _daemon_env(root: Path) -> dict[str, str]:
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(root / "logs"), "SPARK_NO_DAEMONIZE": "1"}
    for var in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV"):
        env.pop(var, None)  # the workers know no Python of ours: the driver's conf names it
    from airflow_provider_tsb.spark.class_data import ClassDataArchive

    # the master and workers are JVMs of the same Java and jars: they map the class-data archive too
    archive = ClassDataArchive().java_options()
    env["SPARK_DAEMON_JAVA_OPTS"] = f"{env.get('SPARK_DAEMON_JAVA_OPTS', '')} {archive}".strip()
    return env


def start_cluster(root: Path, workers: int = 2, *, cores: int = 1, memory: str = "1g",
                  timeout_s: float = 90.0) -> SparkCluster:
    """Start a master and ``workers`` workers (``cores`` cores, ``memory`` each) under ``root``.

    Raises:
        RuntimeError: the cluster was not up within ``timeout_s`` (names the logs to read).
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / "logs").mkdir(exist_ok=True)
    spark_class = str(spark_home() / "bin" / "spark-class")
    port, web = free_port(), free_port()
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}", root,
                           worker_cores=cores, worker_memory=memory)
    env = _daemon_env(root)

    def spawn(name: str, argv: list[str]) -> None:
        log = (root / "logs" / f"{name}.log").open("ab")
        cluster.processes.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                  start_new_session=True))
        cluster.groups.append(ProcessGroup.of(cluster.processes[-1].pid))

    try:
        spawn("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", str(port), "--webui-port", str(web)])
        for i in range(workers):
            work = root / f"worker-{i}"
            work.mkdir(exist_ok=True)
            spawn(f"worker-{i}", [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                  "--port", str(free_port()), "--webui-port", str(free_port()),
                                  "--cores", str(cores), "--memory", memory, "--work-dir", str(work),
                                  cluster.master_url])
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(OSError, ValueError):
                if cluster.alive_workers() == workers:
                    return cluster
            dead = [p for p in cluster.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"Spark standalone cluster not up ({len(dead)} daemons exited); "
                                   f"see the logs in {root / 'logs'}")
            time.sleep(0.5)
    except BaseException:
        cluster.stop()
        raise
