"""Barrier generation as the history grows: is each generation's cost flat in the log's length?

One streaming-shaped topology (``topology_scale``'s chain of 2 jobs, an event-time root
table) on a SQLite metastore, no job running: ``--barriers`` times, a few rows are appended to
the root table and the next barrier generated as the emitter does
(:meth:`~airflow_provider_tsb.hooks.barrier.TsbBarrierHook.generate_at`: the root's newest
version, the event-time watermark, the checks against Delta, the barrier-log commit, the
metastore). The root table and the barrier log each gain a commit per barrier, so a step that
lists or replays a Delta log grows with the history. The baseline is the same generations at
the start of the run (the first ``--window``); the figure is the last ``--window``'s.

Last line::

    barriers=<n> first_median_ms=<a> last_median_ms=<b> growth=<b/a> last_p99_ms=<q> last_max_ms=<m> load=<1-min load>

``last_max_ms`` is the slowest of the last window: one generation in 100 starts the barrier log's
maintenance (compaction, checkpoint, cleanup: :func:`airflow_provider_tsb.delta.barrier_log._maintain`),
which runs on its own thread while the next generations go on beside it.

    .venv/bin/python -m benchmarks.generation_history [--barriers 2000] [--window 100]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from benchmarks.flights_bench import FlightsBench
from benchmarks.harness import median, parser, percentile, report
from benchmarks.topology_scale import append_root, build_topology, shape_edges


def main() -> int:
    options = parser(__doc__)
    options.add_argument("--barriers", type=int, default=2000)
    options.add_argument("--window", type=int, default=100, help="generations at each end compared")
    args = options.parse_args()
    with tempfile.TemporaryDirectory(prefix="tsb-generation-history-") as tmp:
        root = Path(tmp)
        topology, _env = build_topology("history", "chain", 2, root / "warehouse")
        sinks = tuple(sink for _, sink in shape_edges("chain", 2).values())
        bench = FlightsBench(root, topology=topology, sinks=sinks)
        times: list[float] = []
        for n in range(args.barriers):
            append_root(bench, n * 10, 10, n)
            tick = time.perf_counter()
            bench.generate()
            times.append((time.perf_counter() - tick) * 1000)
            if (n + 1) % 500 == 0:
                print(f"{n + 1} barriers: median of the last {args.window} "
                      f"{median(times[-args.window:]):.1f} ms", flush=True)
    first, last = times[: args.window], times[-args.window:]
    report("generation_history", barriers=args.barriers, first_median_ms=round(median(first), 1),
           last_median_ms=round(median(last), 1), growth=round(median(last) / median(first), 2),
           last_p99_ms=round(percentile(last, 99), 1), last_max_ms=round(max(last), 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
