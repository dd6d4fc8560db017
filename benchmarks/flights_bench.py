"""The flights topology as the benchmarks run it: the production path without the scheduler.

Shared by ``e2e_latency``, ``full_year`` and the other benchmarks of the flights topology and of
the generated ones (``topology_scale``). :class:`FlightsBench` holds a throwaway warehouse and a
SQLite metastore, registers ``dags/common/flights.py``'s topology, ingests
nycflights13 days into the root tables, generates barriers with the emitter's own code
(:class:`~airflow_provider_tsb.hooks.barrier.TsbBarrierHook`), and launches each job as the
``spark-submit`` command that :class:`~airflow_provider_tsb.operators.spark_job.TsbSparkJobOperator`
builds (its :class:`~airflow_provider_tsb.hooks.spark_job.TsbSparkJobHook` and Airflow's
``SparkSubmitHook``): same arguments, same environment, ``--metastore-url``, and the Spark
conf the topology's jobs declare (``LOCAL_SPARK_CONF`` of the examples). With
``engine="connect"`` each job is instead the Spark Connect client process the operator's
:class:`~airflow_provider_tsb.hooks.spark_engine.ConnectClient` starts, against one Connect
server (``remote``: its URL).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO, median

JOBS = ("enrich_flights", "carrier_daily_delay", "carrier_ranking")
SINKS = ("flights.flights_enriched", "flights.carrier_daily_delay", "flights.carrier_ranking")


@contextlib.contextmanager
def engine_server(engine: str, remote: str | None, root: Path, driver_memory: str | None = None
                  ) -> Iterator[str | None]:
    """The Connect server URL of a benchmark: ``remote``, or a local server started in
    ``root/spark`` for the run and stopped after it (``None`` for the submit engine);
    ``driver_memory``: its heap (``tsb spark start --driver-memory``), default the server's own."""
    if engine != "connect" or remote:
        yield remote
        return
    from airflow_provider_tsb.spark.connect_server import ConnectServer, ConnectServerOptions

    options = ConnectServerOptions(port=free_port())
    if driver_memory:
        options = dataclasses.replace(options, driver_memory=driver_memory)
    server = ConnectServer(root / "spark", options)
    status = server.start()
    print(f"Spark Connect server {status.url} (pid {status.pid}, log {status.log})", flush=True)
    try:
        yield status.url
    finally:
        server.stop()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class JobProcess:
    """A running ``spark-submit`` of one job and the file its output goes to."""

    job_id: str
    process: subprocess.Popen
    log_path: Path

    def wait(self, timeout_s: float) -> int:
        """Exit code; raises ``RuntimeError`` with the log's tail when it is not 0."""
        try:
            rc = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise RuntimeError(f"job {self.job_id} did not end within {timeout_s:g} s; log {self.log_path}") from None
        if rc != 0:
            tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])
            raise RuntimeError(f"job {self.job_id} exited with {rc}; last lines of {self.log_path}:\n{tail}")
        return rc


class FlightsBench:
    """A flights topology in ``root`` (warehouse + ``tsb.db``), registered and ready to run.

    Args:
        root: an empty directory.
        spark_master: the ``spark_default`` connection's master.
        engine: ``submit`` (a ``spark-submit`` per job) or ``connect`` (clients of ``remote``).
        topology: another topology to run the same way (``topology_scale``'s generated
            ones); default the flights topology. ``ingest_day`` and ``delays`` are the
            flights topology's.
        sinks: the tables a barrier must be WRITTEN in to be COMMIT (default the flights sinks).
        url: the metastore's SQLAlchemy URL (default SQLite in ``root/tsb.db``).
    """

    def __init__(
        self, root: Path, spark_master: str = "local[2]", *, engine: str = "submit", remote: str | None = None,
        topology: Any = None, sinks: tuple[str, ...] = SINKS, url: str | None = None,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.engine = engine
        os.environ["TSB_WAREHOUSE"] = str(root / "warehouse")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
        if engine == "connect":
            if not remote:
                raise ValueError("the connect engine needs the server's URL (remote='sc://host:port')")
            host, port = remote[len("sc://"):].split("/")[0].rsplit(":", 1)
            os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = (
                f'{{"conn_type": "spark_connect", "host": "sc://{host}", "port": {int(port)}}}'
            )
        else:
            os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = f'{{"conn_type": "spark", "host": "{spark_master}"}}'
        self.url = url or f"sqlite:///{root / 'tsb.db'}"
        from airflow_provider_tsb.metastore.store import MetaStore

        self.topology = topology if topology is not None else _load_topology(root / "warehouse")
        self.sinks = tuple(sinks)
        self.store = MetaStore(self.url)
        self.store.migrate()
        self.store.registry.register_topology(self.topology)
        for job in self.topology.jobs.values():
            tables = {n: self.topology.tables[n] for n in (*job.sources, *job.sinks)}
            self.store.registry.register_job(self.topology.name, job, tables, warehouse=self.topology.warehouse)
        from airflow_provider_tsb.hooks.barrier import TsbBarrierHook

        self.barriers = TsbBarrierHook(self.topology, ts_kind="event")
        self._seq = 0

    def location(self, table: str) -> str:
        return self.topology.location(table)

    # ------------------------------------------------------------------ input and barriers
    def ingest_day(self, day: dt.date) -> dict[str, int]:
        """Append one day of flights and weather to the root tables (one commit each)."""
        from tsb_examples.datasets import nycflights13 as nyc

        return nyc.ingest_day(self.location(nyc.FLIGHTS), self.location(nyc.WEATHER), day)

    def end_input(self) -> None:
        """Mark the end of input (FLIP-147) on both root tables."""
        from airflow_provider_tsb.delta.roots import mark_end_of_input

        for table in ("raw.weather", "raw.flights"):
            mark_end_of_input(self.location(table))

    def generate(self, *, final: bool = False) -> Any:
        """The next event-time barrier at the root tables' current versions (the emitter's code)."""
        from airflow_provider_tsb.hooks.barrier import read_root_versions

        self._seq += 1
        key = f"bench/{self.root.name}#{'final' if final else self._seq}"
        return self.barriers.generate_at(self.store, read_root_versions(self.topology), key, final=final)

    def in_flight(self) -> int:
        """Barriers generated but not yet WRITTEN in every sink (not COMMIT)."""
        last = self.store.barriers.latest(self.topology.name)
        if last is None:
            return 0
        heads = [self.store.table_states.newest_written(s) for s in self.sinks]
        return last.barrier - min(h.barrier if h is not None else 0 for h in heads)

    def committed(self, barrier: int) -> bool:
        newest = self.store.table_states.newest_written
        return all((h := newest(s)) is not None and h.barrier >= barrier for s in self.sinks)

    # ------------------------------------------------------------------ jobs
    def command(self, job_id: str, mode: str, *, final_since_ms: int | None = None, until_barrier: int | None = None,
                **operator_kwargs: Any) -> tuple[list[str], dict[str, str]]:
        """(argv, environment) of the job's process, built by the operator (its defaults unless
        ``operator_kwargs`` say otherwise): Airflow's ``SparkSubmitHook`` command, or the
        :class:`ConnectClient`'s with ``$SPARK_REMOTE`` (the ``connect`` engine)."""
        from airflow_provider_tsb.hooks.spark_engine import ConnectClient, SparkEngine, without_connect_markers
        from airflow_provider_tsb.operators.spark_job import TsbSparkJobOperator

        op = TsbSparkJobOperator(task_id=job_id, topology=self.topology, job_id=job_id, mode=mode,
                                 **operator_kwargs)
        args = op.job_hook.build_application_args(until_barrier, None, final_since_ms)
        env = op.job_hook.build_env(self.url, None, None, op.env_vars)
        engine = SparkEngine.from_connection("spark_default")
        base = without_connect_markers(os.environ)
        if engine.kind == "connect":
            client = ConnectClient(op.application, engine, conf=op.conf or {}, job_id=job_id)
            return client.command(args), {**base, **env, "SPARK_REMOTE": str(engine.remote),
                                          "TSB_WAREHOUSE": str(self.root / "warehouse")}
        op.application_args, op.env_vars = args, {**env, "TSB_WAREHOUSE": str(self.root / "warehouse")}
        hook = op._get_hook()
        return hook._build_spark_submit_command(op.application), {**base, **op.env_vars}

    def launch(self, job_id: str, mode: str, log_dir: Path, **kwargs: Any) -> JobProcess:
        """Start the job's process (stdout and stderr to ``log_dir/<job>.log``)."""
        argv, env = self.command(job_id, mode, **kwargs)
        log_dir.mkdir(parents=True, exist_ok=True)
        path = log_dir / f"{job_id}.log"
        out = path.open("ab")
        return JobProcess(job_id, subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT), path)

    # ------------------------------------------------------------------ figures
    def delays(self, barriers: list[int]) -> dict[str, list[float]]:
        """Seconds per barrier: ``e2e`` (generated -> WRITTEN in every sink) and, per job, its
        own delay (its sink WRITTEN - its inputs WRITTEN; root tables are WRITTEN at generation).
        """
        out: dict[str, list[float]] = {"e2e": [], **{j: [] for j in JOBS}}
        jobs = {j: self.topology.jobs[j] for j in JOBS}
        tables = sorted({t for job in jobs.values() for t in (*job.sources, *job.sinks)})
        sinks = [s for job in jobs.values() for s in job.sinks]
        for b in barriers:
            info = self.store.barriers.get(self.topology.name, b)
            states = {t: self.store.table_states.get(t, b) for t in tables}
            if not all(s is not None and s.written_at_ms for s in states.values()):
                continue
            out["e2e"].append((max(states[s].written_at_ms for s in sinks) - info.created_at_ms) / 1000)
            for job_id, job in jobs.items():
                ready = max(states[s].written_at_ms for s in job.sources)
                out[job_id].append((states[job.sinks[0]].written_at_ms - ready) / 1000)
        return out


def timing_records(paths: list[Path]) -> list[dict[str, Any]]:
    """The ``tsb-timing`` records in the jobs' logs."""
    from airflow_provider_tsb.spark.timing import parse_timing_line

    records = []
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            rec = parse_timing_line(line)
            if rec is not None:
                records.append(rec)
    return records


def phase_table(records: list[dict[str, Any]], barriers: set[int]) -> list[str]:
    """Lines: per job, the median seconds of each phase over ``barriers``."""
    from airflow_provider_tsb.spark.timing import PHASES

    lines = [f"{'job':<22}" + "".join(f"{p:>10}" for p in (*PHASES, "total"))]
    for job_id in JOBS:
        mine = [r for r in records if r["job"] == job_id and r["barrier"] in barriers]
        if not mine:
            continue
        cells = [median([r["phases"].get(p, 0.0) for r in mine]) for p in PHASES]
        cells.append(median([r["total_s"] for r in mine]))
        lines.append(f"{job_id:<22}" + "".join(f"{c:>10.3f}" for c in cells))
    return lines


def check_invariants(bench: FlightsBench, barrier: int) -> dict[str, bool]:
    """FLIP-276 invariants of the flights topology at ``barrier``, read at REPEATABLE_READ."""
    from tsb_examples.demo import check_barrier

    return check_barrier(bench.store, barrier)[1]


def _load_topology(warehouse: Path) -> Any:
    """The flights topology of ``dags/common/flights.py`` with its tables under ``warehouse`` (not
    ``$TSB_WAREHOUSE`` read when a location is asked: benches of one process each keep theirs)."""
    path = REPO / "dags" / "common" / "flights.py"
    spec = importlib.util.spec_from_file_location("tsb_bench_flights_topology", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.flights_topology(warehouse=str(warehouse))


def wait_until(predicate: Any, timeout_s: float, what: str, poll_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


def check_alive(procs: list[JobProcess]) -> None:
    """Raise ``RuntimeError`` (with the log's tail when it failed) if a job process has ended."""
    for p in procs:
        if p.process.poll() is not None:
            p.wait(timeout_s=1)  # raises with the log's tail if it failed
            raise RuntimeError(f"job {p.job_id} stopped before the final barrier; log {p.log_path}")


def wait_committed(bench: FlightsBench, procs: list[JobProcess], barrier: int, timeout_s: float) -> None:
    """Wait until ``barrier`` is COMMIT (WRITTEN in every sink of ``bench``).

    Raises:
        RuntimeError: a job process ended first (see :func:`check_alive`).
        TimeoutError: not COMMIT within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while not bench.committed(barrier):
        check_alive(procs)
        if time.monotonic() > deadline:
            where = procs[0].log_path.parent
            raise TimeoutError(f"barrier {barrier} not COMMIT within {timeout_s:g} s; logs in {where}")
        time.sleep(0.05)
