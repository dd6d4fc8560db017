"""Catch-up of a lagging streaming topology: several barriers per micro-batch against one each.

The chain of ``barrier_rate`` (``--jobs`` wordcount-sized ``scale_stage.py`` jobs, Spark
Connect clients of one local server, or with ``--engine submit`` a ``spark-submit`` driver each
running a Structured Streaming query, ``--rows`` rows appended to the root per barrier) with a
backlog: barrier 1 is committed first (the sinks exist), then ``--barriers`` barriers and a final
one are generated with no job running, and the jobs are started in streaming mode; the figure is
the time from their start to the final barrier's COMMIT. Each arm gets a fresh topology on the
same server, the arms alternate ``--rounds`` times: ``--max-barriers-per-trigger`` (default 16:
the operator's default) and the baseline ``1`` (a micro-batch per barrier: the same work, one
Spark job per barrier). Both pay the same client start-up. The FLIP-276 invariant (every sink
holds the root's rows at REPEATABLE_READ) is checked at the final barrier of every run.

    .venv/bin/python -m benchmarks.catch_up [--barriers 120] [--jobs 2] [--rows 100] [--rounds 2]
        [--max-barriers-per-trigger 16] [--sqlite] [--engine connect|submit]

Last line: ``barriers= grouped_s= single_s= speedup= grouped_barriers_per_s= single_barriers_per_s=
load=<1-min load average, lowest-highest over the runs>``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.barrier_rate import chain_parser, metastore_url
from benchmarks.flights_bench import FlightsBench, engine_server
from benchmarks.harness import LoadWatch, load, median, report
from benchmarks.topology_scale import ROOT, append_root, build_topology, invariants_hold, shape_edges


def one_run(args: argparse.Namespace, root: Path, remote: str | None, per_trigger: int) -> float:
    """Seconds from the jobs' start to the COMMIT of a backlog of ``args.barriers`` barriers."""
    url, server = metastore_url(args, root)
    try:
        topology, env = build_topology("catch_up", "chain", args.jobs, root / "warehouse")
        sinks = tuple(sink for _, sink in shape_edges("chain", args.jobs).values())
        bench = FlightsBench(root, engine=args.engine, remote=remote, topology=topology, sinks=sinks, url=url)
        append_root(bench, 0, args.rows, 0)
        bench.generate()
        for j in env:  # in chain order: each job's barrier 1 after its source's
            bench.launch(j, "batch", root / "logs", until_barrier=1, env_vars=env[j]).wait(timeout_s=600)
        for n in range(1, args.barriers + 1):
            append_root(bench, n * args.rows, args.rows, n)
            bench.generate()
        from airflow_provider_tsb.delta.roots import mark_end_of_input

        mark_end_of_input(bench.location(ROOT))
        since = int(time.time() * 1000)
        final = bench.generate(final=True).barrier
        started = time.monotonic()
        procs = [bench.launch(j, "streaming", root / "logs", final_since_ms=since, env_vars=env[j],
                              trigger_interval_s=0.05, max_barriers_per_trigger=per_trigger) for j in env]
        try:
            while not bench.committed(final):  # a job ends by itself once its sink holds the final barrier
                if any(p.process.poll() not in (None, 0) for p in procs) or time.monotonic() - started > 1800:
                    for p in procs:
                        p.wait(timeout_s=60)  # raises with the failed job's log tail
                    raise TimeoutError(f"barrier {final} not COMMIT within 1800 s; logs in {root / 'logs'}")
                time.sleep(0.05)
            seconds = time.monotonic() - started
            for p in procs:
                p.wait(timeout_s=300)
        finally:
            for p in procs:
                if p.process.poll() is None:
                    p.process.kill()
        if not invariants_hold(bench, "chain", args.jobs, final):
            raise RuntimeError(f"invariants broken at barrier {final} (max_barriers_per_trigger={per_trigger})")
        bench.store.dispose()
        return seconds
    finally:
        if server is not None:
            server.stop()


def main() -> int:
    options = chain_parser(__doc__)  # --max-barriers-per-trigger: the grouped arm's setting
    options.add_argument("--barriers", type=int, default=120, help="barriers in the backlog (and a final one)")
    options.add_argument("--rounds", type=int, default=2, help="runs of each arm, alternating")
    args = options.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    base = Path(tempfile.mkdtemp(prefix="tsb-catch-up-"))
    times: dict[int, list[float]] = {args.max_barriers_per_trigger: [], 1: []}
    with engine_server(args.engine, None, base / args.engine) as remote, LoadWatch() as loads:
        for r in range(args.rounds):
            for per_trigger in times:
                seconds = one_run(args, base / f"run{r}-{per_trigger}", remote, per_trigger)
                times[per_trigger].append(seconds)
                print(f"round {r + 1}: max_barriers_per_trigger={per_trigger} seconds={seconds:.1f} "
                      f"load={load()}", flush=True)
    grouped, single = median(times[args.max_barriers_per_trigger]), median(times[1])
    n = args.barriers + 1
    print(f"(tables and logs in {base}; engine {args.engine}, metastore {'sqlite' if args.sqlite else 'postgresql'})")
    report("catch_up", barriers=n, grouped_s=round(grouped, 1), single_s=round(single, 1),
           speedup=round(single / grouped, 2), grouped_barriers_per_s=round(n / grouped, 2),
           single_barriers_per_s=round(n / single, 2), load=loads.range)
    return 0


if __name__ == "__main__":
    sys.exit(main())
