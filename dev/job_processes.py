"""Wordcount jobs as real ``spark-submit`` processes on a metastore, as the operator starts them.

Used by the staged-read (issue 12 item 3) and fencing (item 5) tests and by
``benchmarks/fencing_race.py``: :func:`wordcount_deployment` registers the wordcount topology in
a metastore, ingests words and generates barriers; :func:`job_command` is the command line
:class:`~airflow_provider_tsb.hooks.spark_job.TsbSparkJobHook` builds (``spark-submit <app>
--mode batch --metastore-url env:TSB_METASTORE_URL --until-barrier N --table NAME=LOCATION``),
and :func:`job_env` its environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_tsb.maintenance.checker import wordcount_topology
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology

REPO = Path(__file__).resolve().parents[1]
SPARK_SUBMIT = str(Path(sys.executable).parent / "spark-submit")
WORDS, WORD_COUNT, COUNT_OF_COUNTS = "tsb.raw.words", "tsb.wordcount.word_count", "tsb.wordcount.count_of_counts"


@dataclass
class Deployment:
    """A registered wordcount topology: its metastore URL, store and topology."""

    url: str
    store: MetaStore
    topology: Topology
    root: Path

    def location(self, table: str) -> str:
        return self.topology.location(table)


def wordcount_deployment(root: Path, url: str, barriers: int, lines: int = 20) -> Deployment:
    """Register the wordcount topology (warehouse under ``root``), ingest and generate barriers."""
    from airflow_provider_tsb.hooks.barrier import read_root_versions
    from tsb_examples.ingest import ingest_next_words

    store = MetaStore(url)
    store.migrate()
    topo = wordcount_topology(str(root / "warehouse"))
    store.registry.register_topology(topo)
    for n in range(barriers):
        ingest_next_words(topo.location("raw.words"), f"t/{n}", lines=lines)
        store.barriers.create(topo.name, read_root_versions(topo), run_key=f"t/{n}")
    return Deployment(url, store, topo, root)


def job_command(dep: Deployment, job_id: str, barrier: int, remote: str | None = None) -> list[str]:
    """The operator's command of ``job_id`` for ``barrier``: ``spark-submit``, or with ``remote``
    (a Spark Connect URL) the Spark Connect client process (``$SPARK_REMOTE`` is :func:`job_env`'s)."""
    job = dep.topology.jobs[job_id]
    if remote:
        args = [sys.executable, job.application, "--conf", "spark.sql.shuffle.partitions=2"]
    else:
        from airflow_provider_tsb.spark.class_data import ClassDataArchive

        # the examples' small-machine JIT setting (tsb_examples.spark_conf) and the class-data
        # archive in the driver's Java options, as configure_submit gives it
        java = f"-XX:TieredStopAtLevel=1 {ClassDataArchive(spark_submit=SPARK_SUBMIT).ensure()}".strip()
        from airflow_provider_tsb.spark.delta_jars import delta_conf

        args = [SPARK_SUBMIT, "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                "--conf", "spark.sql.shuffle.partitions=2", "--driver-java-options", java]
        for key, value in delta_conf().items():
            args += ["--conf", f"{key}={value}"]
        args.append(job.application)
    args += ["--mode", "batch", "--metastore-url", "env:TSB_METASTORE_URL", "--until-barrier", str(barrier)]
    for name in sorted({*job.sources, *job.sinks}):
        args += ["--table", f"{name}={dep.location(name)}"]
    return args


def job_env(url: str, remote: str | None = None, **extra: str) -> dict[str, str]:
    """The job's environment: the metastore URL (never on the command line), the interpreter, and
    the Spark Connect server (``$SPARK_REMOTE``) for a client."""
    from airflow_provider_tsb.spark.installation import CONNECT_MARKERS

    env = {k: v for k, v in os.environ.items() if k not in ("TSB_KILL_AT", "TSB_KILL_ONCE_DIR", *CONNECT_MARKERS)}
    if remote:
        env["SPARK_REMOTE"] = remote
    env.update(
        TSB_METASTORE_URL=url, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""), TSB_SPARK_LOG_LEVEL="ERROR",
    )
    env.update(extra)
    return env


#: exit status of a job process SIGKILLed at a kill point (spark-submit's shell reports 128 + 9)
KILLED = (-9, 137)


def run_job(
    dep: Deployment, job_id: str, barrier: int, timeout: float = 300, remote: str | None = None, **env: str
) -> subprocess.CompletedProcess:
    """Run the job for ``barrier`` to its end (``env``: extra variables, e.g. ``TSB_KILL_AT``;
    ``remote``: as a client of this Spark Connect server, else with spark-submit)."""
    return subprocess.run(job_command(dep, job_id, barrier, remote), env=job_env(dep.url, remote, **env),
                          capture_output=True, text=True, timeout=timeout, cwd=dep.root)


def start_job(
    dep: Deployment, job_id: str, barrier: int, log: Path, remote: str | None = None, **env: str
) -> subprocess.Popen:
    """Start the job for ``barrier`` in the background; stdout and stderr go to ``log``."""
    handle = open(log, "w")  # noqa: SIM115 - closed with the process by the caller's wait()
    return subprocess.Popen(job_command(dep, job_id, barrier, remote), env=job_env(dep.url, remote, **env),
                            stdout=handle, stderr=subprocess.STDOUT, text=True, cwd=dep.root)


@dataclass
class SupervisedServer:
    """A Spark Connect server run as users run it: ``tsb spark start --supervise``."""

    url: str
    home: Path
    supervisor_log: Path

    def record(self) -> dict:
        """The server's state record (``home/server.json``: ``pid``, ``port``...); ``{}`` between two."""
        import json

        try:
            return dict(json.loads((self.home / "server.json").read_text()))
        except (OSError, ValueError):
            return {}

    def restarted(self, old_pid: int) -> bool:
        """Whether the supervisor brought the server back under another pid."""
        return (self.record().get("pid") not in (None, old_pid)
                and "restarted the Spark Connect server" in self.supervisor_log.read_text())


@contextmanager
def supervised_server(
    root: Path, master: str = "local[2]", *, options: Sequence[str] = (), timeout_s: float = 240.0,
) -> Iterator[SupervisedServer]:
    """``tsb spark start --supervise`` with its state under ``root/spark`` on a free port, in a
    process of its own; yields once the server answers; SIGTERM (the supervisor stops its server)
    on exit. ``options``: more of ``tsb spark start``'s options (``--driver-memory 512m``).

    Raises:
        TimeoutError: the server did not answer within ``timeout_s`` (the supervisor's log attached).
    """
    import signal
    import time

    from dev.local_airflow import free_port

    home, port = root / "spark", free_port()
    home.mkdir(parents=True, exist_ok=True)
    log = root / "supervisor.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "airflow_provider_tsb", "spark", "start", "--supervise", "--home", str(home),
             "--port", str(port), "--master", master, *options],
            stdout=out, stderr=subprocess.STDOUT, cwd=root, env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    try:
        deadline = time.monotonic() + timeout_s
        while "supervising:" not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise TimeoutError(f"the supervised Spark Connect server did not answer within {timeout_s} s:\n"
                                   f"{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield SupervisedServer(f"sc://127.0.0.1:{port}", home, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
