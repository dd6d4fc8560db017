"""Generated topologies of N streaming jobs on this machine (issue 21 item 6).

Two shapes of ``N`` jobs, every job ``benchmarks/apps/scale_stage.py`` (it appends the rows its
sources gained in the epoch to its sink):

    chain:  scale.root -> stage_1 -> scale.t1 -> stage_2 -> scale.t2 -> ... -> scale.tN
    fan:    scale.root -> stage_1 -> scale.t1 -> stage_2 .. stage_{N-1} (each scale.t1 -> scale.tk)
            -> stage_N (scale.t2 .. scale.t{N-1} -> scale.tN)

Each job runs as the streaming process the operator starts (``FlightsBench.launch``: the
operator's own command, metastore catalog on SQLite): a Spark Connect client of one local
server (``connect``) or its own ``spark-submit`` (``submit``). The first barrier (the jobs
starting) is a warm-up; then ``--barriers`` barriers, each after ``--rows`` rows appended to
``scale.root``, at most 2 not yet COMMIT. While it runs, the resident memory and the number of
processes of the job processes and the Connect server, with all their descendants, are sampled
every second; the peak is reported. At every barrier the FLIP-276 invariant is checked at
REPEATABLE_READ: each sink holds the root's rows times the paths from the root to it (chain:
1; fan: 1 for a middle table, N-2 for the last).

One result per run, reported at the end in the order of the runs (the last run's last):
``shape=<chain|fan> engine=<e> jobs=<N> e2e_median_s=<s> e2e_p95_s=<s> rss_gb=<peak GB>
pss_gb=<peak GB> server_rss_gb=<GB> processes=<peak> invariants=<ok|FAILED> load=<1-min load
average, mean over the run>``. ``rss_gb`` sums each process's resident set, so a page that k
processes share (pyspark's, pandas' and delta-rs' libraries in every job process) counts k
times; ``pss_gb`` sums proportional set sizes, each page once: the memory the topology holds.

    .venv/bin/python -m benchmarks.topology_scale [--jobs 3,6,12] [--shapes chain,fan]
        [--engines connect,submit] [--barriers 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa

from benchmarks.flights_bench import FlightsBench, check_alive, engine_server, wait_committed
from benchmarks.harness import LoadWatch, line, median, parser, percentile, report

HERE = Path(__file__).resolve().parent
STAGE = HERE / "apps" / "scale_stage.py"
ROOT = "scale.root"
EPOCH = dt.datetime(2013, 1, 1, tzinfo=dt.UTC)


def shape_edges(shape: str, n: int) -> dict[str, tuple[list[str], str]]:
    """``{job id: (source tables, sink table)}`` of a generated topology of ``n`` jobs.

    Raises:
        ValueError: an unknown shape, or a fan of fewer than 3 jobs.
    """
    t = [ROOT, *(f"scale.t{k}" for k in range(1, n + 1))]
    if shape == "chain":
        return {f"stage_{k}": ([t[k - 1]], t[k]) for k in range(1, n + 1)}
    if shape == "fan":
        if n < 3:
            raise ValueError("a fan needs at least 3 jobs (one out, one or more across, one in)")
        edges = {"stage_1": ([ROOT], t[1])}
        edges.update({f"stage_{k}": ([t[1]], t[k]) for k in range(2, n)})
        edges[f"stage_{n}"] = ([t[k] for k in range(2, n)], t[n])
        return edges
    raise ValueError(f"unknown shape {shape!r}: chain or fan")


def multiplier(shape: str, n: int, table: str) -> int:
    """How many copies of each root row ``table`` holds (the paths from the root to it)."""
    return n - 2 if shape == "fan" and table == f"scale.t{n}" else 1


def build_topology(name: str, shape: str, n: int, warehouse: Path):
    """The generated topology (``Topology``) and each job's ``env_vars``."""
    from airflow_provider_tsb.topology import Topology
    from tsb_examples.spark_conf import LOCAL_SPARK_CONF

    topology = Topology(name, warehouse=str(warehouse))
    topology.root_table(ROOT, event_time_column="ts")
    env: dict[str, dict[str, str]] = {}
    for job_id, (sources, sink) in shape_edges(shape, n).items():
        topology.job(job_id, str(STAGE), sources=sources, sinks=[sink], conf=LOCAL_SPARK_CONF)
        env[job_id] = {"TSB_SCALE_SOURCES": ",".join(sources), "TSB_SCALE_SINK": sink}
    return topology, env


def pss_bytes(pid: int) -> int:
    """The proportional set size of a process (``Pss`` of ``/proc/PID/smaps_rollup``, Linux 4.14+):
    its private pages plus its share of the pages it maps with other processes (shared libraries,
    a fork's copy-on-write pages), so a sum over processes counts each page once."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def launching(process: psutil.Process) -> bool:
    """Whether ``process`` is a JVM's child between its ``vfork`` and its ``exec`` (Java starts a
    process, e.g. Hadoop's ``chmod`` of a written file, through ``posix_spawn``): it shares its
    parent's address space, so its RSS is the JVM's own, for a few milliseconds. Counting it
    doubled the server's peak (2.0-2.9 GB sampled against a JVM of 0.97 GB at most)."""
    try:
        parent = process.parent()
        return parent is not None and process.cmdline() == parent.cmdline() and "java" in parent.name()
    except psutil.Error:
        return False


class Sampler(threading.Thread):
    """Samples, every second, the memory and process count of some processes and all their
    descendants; keeps the peaks: of the summed RSS (a page mapped by k processes counted k
    times) and of the summed PSS (each page once: what the machine holds for them)."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.peak_rss = 0
        self.peak_pss = 0
        #: ``{pid: RSS of its tree, bytes}`` at the RSS peak
        self.peak_split: dict[int, int] = {}
        #: ``{pid: PSS of its tree, bytes}`` at the PSS peak
        self.peak_pss_split: dict[int, int] = {}
        self.peak_processes = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(1.0):
            rss_of: dict[int, int] = {}
            pss_of: dict[int, int] = {}
            procs: dict[int, psutil.Process] = {}
            for pid in self.pids:
                try:
                    top = psutil.Process(pid)
                    tree = [top, *top.children(recursive=True)]
                except psutil.NoSuchProcess:
                    continue
                rss_of[pid] = pss_of[pid] = 0
                for p in tree:
                    if p.pid in procs or launching(p):
                        continue
                    procs[p.pid] = p
                    try:
                        rss_of[pid] += p.memory_info().rss
                    except psutil.NoSuchProcess:
                        pass
                    pss_of[pid] += pss_bytes(p.pid)
            rss, pss = sum(rss_of.values()), sum(pss_of.values())
            if rss > self.peak_rss:
                self.peak_rss = rss
                self.peak_split = {pid: rss_of.get(pid, 0) for pid in self.pids}
            if pss > self.peak_pss:
                self.peak_pss = pss
                self.peak_pss_split = {pid: pss_of.get(pid, 0) for pid in self.pids}
            self.peak_processes = max(self.peak_processes, len(procs))

    def stop(self) -> None:
        self._done.set()
        self.join()


def append_root(bench: FlightsBench, start: int, rows: int, hour: int, compaction: Any = None) -> int:
    """Append ``rows`` rows (ids ``start..``) with event time ``hour`` hours after 2013-01-01;
    the root's new Delta version. ``compaction``: the root's auto compaction (a
    :class:`~airflow_provider_tsb.delta.compaction.Compaction`, ``append_rows``)."""
    from airflow_provider_tsb.delta.roots import append_rows

    ids = list(range(start, start + rows))
    ts = EPOCH + dt.timedelta(hours=hour)
    table = pa.table({
        "id": pa.array(ids, pa.int64()),
        "v": pa.array([i * 0.5 for i in ids], pa.float64()),
        "hop": pa.array([0] * rows, pa.int32()),
        "ts": pa.array([ts] * rows, pa.timestamp("us", tz="UTC")),
    })
    return append_rows(bench.location(ROOT), table, compaction=compaction)


def row_count(location: str, version: int) -> int:
    """Rows of a Delta table at ``version`` (from the add actions' statistics)."""
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(location, version=version).get_add_actions(flatten=True))  # arro3 -> pyarrow
    return int(sum(n or 0 for n in actions.column("num_records").to_pylist()))


def invariants_hold(bench: FlightsBench, shape: str, n: int, barrier: int) -> bool:
    """Every sink holds ``multiplier`` times the root's rows at ``barrier`` (REPEATABLE_READ)."""
    tables = [ROOT, *bench.sinks]
    res = bench.store.resolution.resolve(tables, as_of=barrier)
    counts = {t.split(".", 1)[1]: row_count(tv.location, tv.version) for t, tv in res.tables.items()}
    return all(counts[s] == counts[ROOT] * multiplier(shape, n, s) for s in bench.sinks)


def e2e_delays(bench: FlightsBench, barriers: list[int]) -> list[float]:
    """Seconds from each barrier's generation to WRITTEN in every sink."""
    out = []
    for b in barriers:
        created = bench.store.barriers.get(bench.topology.name, b).created_at_ms
        states = [bench.store.table_states.get(s, b) for s in bench.sinks]
        if all(s is not None and s.written_at_ms for s in states):
            out.append((max(s.written_at_ms for s in states) - created) / 1000)
    return out


def stream(bench: FlightsBench, procs: list[Any], args: argparse.Namespace, warm_up: int, n: int,
           cursor: tuple[int, int]) -> tuple[list[int], int]:
    """The measured part of a run: the warm-up barrier's COMMIT, then ``args.barriers`` barriers
    (each after ``args.rows`` rows appended from ``cursor``, ``(next id, next hour)``), at most 2
    not yet COMMIT, then the end of input; ``(measured barriers, the final barrier)``."""
    next_id, hour = cursor
    started = time.monotonic()
    wait_committed(bench, procs, warm_up, timeout_s=args.timeout)
    print(f"  warm-up barrier {warm_up} COMMIT {time.monotonic() - started:.1f} s after {n} job processes "
          "started", flush=True)
    measured: list[int] = []
    for _ in range(args.barriers):
        tick = time.monotonic()
        while bench.in_flight() >= 2:
            check_alive(procs)
            time.sleep(0.05)
        append_root(bench, next_id, args.rows, hour)
        next_id, hour = next_id + args.rows, hour + 1
        measured.append(bench.generate().barrier)
        time.sleep(max(0.0, tick + args.interval - time.monotonic()))
    wait_committed(bench, procs, measured[-1], timeout_s=args.timeout)
    from airflow_provider_tsb.delta.roots import mark_end_of_input

    mark_end_of_input(bench.location(ROOT))
    final = bench.generate(final=True).barrier
    for p in procs:
        p.wait(timeout_s=args.timeout)
    return measured, final


def run_one(shape: str, n: int, engine: str, remote: str | None, root: Path, args: argparse.Namespace,
            server_pid: int | None) -> dict[str, Any]:
    """One run (module doc); the figures of its result line."""
    topology, env = build_topology(f"scale_{shape}_{n}", shape, n, root / "warehouse")
    sinks = tuple(sink for _, sink in shape_edges(shape, n).values())
    bench = FlightsBench(root, engine=engine, remote=remote, topology=topology, sinks=sinks)
    next_id, hour = 0, 0
    append_root(bench, next_id, args.rows, hour)
    next_id, hour = next_id + args.rows, hour + 1
    warm_up = bench.generate().barrier
    since_ms = int(time.time() * 1000)
    procs = [bench.launch(j, "streaming", root / "logs", final_since_ms=since_ms, env_vars=env[j]) for j in env]
    sampler = Sampler([p.process.pid for p in procs] + ([server_pid] if server_pid else []))
    sampler.start()
    try:
        with LoadWatch(every=1.0) as loads:
            measured, final = stream(bench, procs, args, warm_up, n, (next_id, hour))
    finally:
        sampler.stop()
        for p in procs:
            if p.process.poll() is None:
                p.process.kill()
    delays = e2e_delays(bench, measured)
    ok = len(delays) == len(measured) and all(invariants_hold(bench, shape, n, b) for b in [*measured, final])
    server_rss = sampler.peak_split.get(server_pid, 0) if server_pid else 0
    clients = [v for pid, v in sampler.peak_split.items() if pid != server_pid]
    print(f"  at the RSS peak: server {server_rss / 1e9:.2f} GB, {len(clients)} job processes "
          f"{sum(clients) / 1e9:.2f} GB (largest {max(clients, default=0) / 1e6:.0f} MB)", flush=True)
    server_pss = sampler.peak_pss_split.get(server_pid, 0) if server_pid else 0
    client_pss = [v for pid, v in sampler.peak_pss_split.items() if pid != server_pid]
    print(f"  at the PSS peak: server {server_pss / 1e9:.2f} GB, {len(client_pss)} job processes "
          f"{sum(client_pss) / 1e9:.2f} GB (largest {max(client_pss, default=0) / 1e6:.0f} MB)", flush=True)
    return {"shape": shape, "engine": engine, "jobs": n, "e2e_median_s": round(median(delays), 2),
            "e2e_p95_s": round(percentile(delays, 95), 2), "rss_gb": round(sampler.peak_rss / 1e9, 2),
            "pss_gb": round(sampler.peak_pss / 1e9, 2), "server_rss_gb": round(server_rss / 1e9, 2),
            "processes": sampler.peak_processes, "invariants": "ok" if ok else "FAILED", "load": loads.mean}


def main() -> int:
    options = parser(__doc__, keep=True)
    options.add_argument("--jobs", default="3,6,12", help="comma-separated job counts")
    options.add_argument("--shapes", default="chain,fan")
    options.add_argument("--engines", default="connect", help="connect, submit or both (submit: 1 JVM per job)")
    options.add_argument("--barriers", type=int, default=20, help="barriers after the warm-up one")
    options.add_argument("--rows", type=int, default=1000, help="rows appended to the root per barrier")
    options.add_argument("--interval", type=float, default=2.0, help="seconds between barriers (at least)")
    options.add_argument("--timeout", type=float, default=900.0, help="seconds a barrier may take")
    options.add_argument("--server-memory", default=None,
                         help="the Connect server's heap (spark.driver.memory, e.g. 1g; default tsb spark start's)")
    args = options.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tsb-scale-"))
    runs: list[dict[str, Any]] = []
    for engine in args.engines.split(","):
        with engine_server(engine, None, base / engine, args.server_memory) as remote:
            server_pid = None
            if remote:
                from airflow_provider_tsb.spark.connect_server import ConnectServer

                server_pid = ConnectServer(base / engine / "spark").status().pid
            for shape in args.shapes.split(","):
                for n in (int(x) for x in args.jobs.split(",")):
                    print(f"{engine} {shape} {n} jobs ...", flush=True)
                    try:
                        figures = run_one(shape, n, engine, remote, base / engine / f"{shape}-{n}", args, server_pid)
                    except (RuntimeError, TimeoutError) as exc:
                        figures = {"shape": shape, "engine": engine, "jobs": n,
                                   "error": repr(str(exc).splitlines()[0])}
                    print(line(**figures), flush=True)
                    runs.append(figures)
    print(f"(tables and logs in {base})")
    for figures in runs:
        report("topology_scale", **figures)
    return 0 if all(figures.get("invariants") == "ok" for figures in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
