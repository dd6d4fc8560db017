"""Where a barrier generation's slow tail falls: generations alone, each timed with its barrier id.

Builds the sustained-rate benchmark's chain (``benchmarks/barrier_rate.py``: one root, 2 sinks,
no job running) on a throwaway PostgreSQL, appends 100 rows to the root and generates a barrier,
``--barriers`` times, and prints the median and p99 of the generations after the first 100 (ms)
and the slowest ones with their barrier ids. ``after_maintenance`` counts the slowest that come
within 3 barriers after the barrier log's maintenance (every
:data:`~airflow_provider_tsb.delta.barrier_log.COMPACT_EVERY` barriers, on a thread beside the
generations)::

    PYTHONPATH=. .venv/bin/python dev/generation_tail.py [--barriers 700]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WARM_UP = 100
SLOWEST = 12


def main(argv: list[str] | None = None) -> int:
    from airflow_provider_tsb.delta.barrier_log import COMPACT_EVERY
    from benchmarks.flights_bench import FlightsBench
    from benchmarks.topology_scale import append_root, build_topology, shape_edges
    from dev.pg import start_postgres

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--barriers", type=int, default=700)
    args = p.parse_args(argv)
    pg = start_postgres()
    try:
        root = Path(tempfile.mkdtemp(prefix="tsb-generation-tail-"))
        topology, _ = build_topology("rate_chain", "chain", 2, root / "warehouse")
        sinks = tuple(sink for _, sink in shape_edges("chain", 2).values())
        bench = FlightsBench(root, engine="connect", remote="sc://localhost:1", topology=topology, sinks=sinks,
                             url=str(pg.create_database("tail")))
        timed: list[tuple[float, int]] = []
        for n in range(args.barriers):
            append_root(bench, n * 100, 100, n)
            tick = time.perf_counter()
            barrier = bench.generate().barrier
            timed.append(((time.perf_counter() - tick) * 1000, barrier))
        timed = timed[WARM_UP:]
        ms = sorted(t for t, _ in timed)
        slowest = sorted(timed, reverse=True)[:SLOWEST]
        after = sum(1 for _, b in slowest if 0 < b % COMPACT_EVERY <= 3 or b % COMPACT_EVERY == 0)
        print("slowest: " + " ".join(f"{b}:{t:.1f}" for t, b in slowest))
        print(f"generations={len(ms)} median_ms={statistics.median(ms):.1f} p99_ms={ms[int(len(ms) * 0.99)]:.1f} "
              f"slowest={SLOWEST} after_maintenance={after} compact_every={COMPACT_EVERY}")
    finally:
        pg.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
