"""End-to-end delay of the streaming flights topology: from a barrier's generation to its COMMIT.

The three flights jobs run as long-running streaming queries, each its own ``spark-submit``
process built by ``TsbSparkJobOperator`` (metastore catalog on SQLite, ``--metastore-url``), as
the ``flights_streaming`` DAG runs them minus the scheduler. Every ``--interval`` seconds the
benchmark appends one day of nycflights13 flights and weather and generates an event-time
barrier with the emitter's code; like the emitter's ``max_in_flight``, it waits while
``--max-in-flight`` barriers are not yet COMMIT, so barriers come every ``--interval`` seconds
or as fast as the topology sustains, whichever is slower. The first barrier (the Spark drivers
starting) is a warm-up and not counted. At the end the input is marked ended, a final barrier
(FLIP-147) is generated and the jobs stop on their own.

Prints per-job delay (the job's sink WRITTEN minus its inputs WRITTEN) and end-to-end delay
(generation -> WRITTEN in every table) median and p95, barriers per minute, each phase's
median seconds per job (``tsb-timing`` records, see ``airflow_provider_tsb/spark/timing.py``),
checks the FLIP-276 invariants at REPEATABLE_READ on every barrier, and ends with

    engine=<e> e2e_median_s=<x> e2e_p95_s=<y> barriers=<n> load=<1-min load>

    .venv/bin/python -m benchmarks.e2e_latency [--barriers 60] [--interval 2] [--engine connect|submit]

``--writer delta`` runs every sink on Delta's own Spark writer (``TSB_SINK_WRITER`` of the
jobs), ``--writer staged`` on the staged delta-rs commit.

``--engine connect`` (the default) runs each job as a Spark Connect client of one server:
``--remote sc://HOST:PORT``, or a local server this script starts (``tsb spark start``'s) and
stops. ``--engine submit`` runs each job as its own ``spark-submit``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.flights_bench import (
    JOBS,
    FlightsBench,
    check_alive,
    check_invariants,
    engine_server,
    phase_table,
    timing_records,
    wait_committed,
)
from benchmarks.harness import median, parser, percentile, report


def main() -> int:
    options = parser(__doc__, keep=True, remote=True, engine="connect")
    options.add_argument("--barriers", type=int, default=60, help="barriers after the warm-up one (one day each)")
    options.add_argument("--interval", type=float, default=2.0, help="seconds between barriers (at least)")
    options.add_argument("--max-in-flight", type=int, default=2, help="barriers not yet COMMIT before waiting")
    options.add_argument("--poll-interval", type=float, default=None,
                         help="the jobs' poll_interval_s (default: the operator's)")
    options.add_argument("--writer", choices=("staged", "delta"), default=None,
                         help="the sinks' writer ($TSB_SINK_WRITER of the jobs; default: the sinks' own)")
    args = options.parse_args()
    if args.writer:
        os.environ["TSB_SINK_WRITER"] = args.writer
    if args.barriers < 1 or args.barriers > 363:
        options.error("--barriers must be 1..363 (one 2013 day each after the warm-up day)")

    from tsb_examples.datasets import nycflights13 as nyc

    nyc.flights(), nyc.weather()  # parse the CSVs before any timing
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tsb-e2e-"))
    with engine_server(args.engine, args.remote, root) as remote:
        return run(args, root, FlightsBench(root, engine=args.engine, remote=remote))


def run(args: argparse.Namespace, root: Path, bench: FlightsBench) -> int:
    """The measurement (module doc) on ``bench``; the exit code."""
    from tsb_examples.datasets import nycflights13 as nyc

    days = nyc.days(dt.date(2013, 1, 1), args.barriers + 1)

    bench.ingest_day(days[0])
    warm_up = bench.generate().barrier
    started = time.monotonic()
    since_ms = int(time.time() * 1000)
    extra = {"poll_interval_s": args.poll_interval} if args.poll_interval is not None else {}
    procs = [bench.launch(j, "streaming", root / "logs", final_since_ms=since_ms, **extra) for j in JOBS]
    wait_committed(bench, procs, warm_up, timeout_s=600)
    print(f"warm-up barrier {warm_up} committed {time.monotonic() - started:.1f} s after the 3 job processes "
          f"started ({args.engine} engine: start-up, first Spark jobs)", flush=True)

    measured: list[int] = []
    waited = 0.0
    stretch = time.monotonic()
    for day in days[1:]:
        tick = time.monotonic()
        while bench.in_flight() >= args.max_in_flight:
            check_alive(procs)
            time.sleep(0.05)
        waited += time.monotonic() - tick
        bench.ingest_day(day)
        measured.append(bench.generate().barrier)
        time.sleep(max(0.0, tick + args.interval - time.monotonic()))
    wait_committed(bench, procs, measured[-1], timeout_s=600)
    stretch_s = time.monotonic() - stretch
    bench.end_input()
    final = bench.generate(final=True).barrier
    for p in procs:
        p.wait(timeout_s=300)
    print(f"final barrier {final} committed; every job stopped on its own", flush=True)

    delays = bench.delays(measured)
    if len(delays["e2e"]) != len(measured):
        print(f"error: {len(measured) - len(delays['e2e'])} barrier(s) not COMMIT", file=sys.stderr)
        return 1
    bad = {b: c for b in [warm_up, *measured, final] if not all((c := check_invariants(bench, b)).values())}
    records = timing_records([p.log_path for p in procs])

    print(f"\n{len(measured)} barriers (one 2013 day each, every >= {args.interval:g} s, at most "
          f"{args.max_in_flight} in flight) in {stretch_s:.1f} s: {len(measured) / stretch_s * 60:.1f} barriers/min; "
          f"{waited:.1f} s spent waiting for room (backpressure)")
    print(f"{'delay (s)':<22}{'median':>8}{'p95':>8}{'max':>8}")
    for name in (*JOBS, "e2e"):
        values = delays[name]
        print(f"{name:<22}{median(values):>8.2f}{percentile(values, 95):>8.2f}{max(values):>8.2f}")
    print("\nmedian seconds per barrier and phase (tsb-timing):")
    for line in phase_table(records, set(measured)):
        print(line)
    print(f"\ninvariants at REPEATABLE_READ: {len(measured) + 2 - len(bad)}/{len(measured) + 2} barriers hold"
          + (f"; FAILED at {bad}" if bad else ""))
    print(f"logs and tables: {root}" if args.keep else f"(run with --keep DIR to keep the logs; tmp {root})")
    report("e2e_latency", engine=args.engine, e2e_median_s=round(median(delays["e2e"]), 2),
           e2e_p95_s=round(percentile(delays["e2e"], 95), 2), barriers=len(measured))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
