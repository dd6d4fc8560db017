"""Cost of the barrier log and of the checks against Delta at barrier generation (issue 12 item 4).

A SQLite metastore, topology ``cost``: root table ``tsb.raw.words`` and ``--sinks`` intermediate
tables (default 3), each a real Delta table with one tagged commit per barrier. Generates
``--barriers`` barriers (default 50) three ways and prints the median and p95 wall time of
``store.barriers.create``:

* ``plain``: without the barrier log, the tables not yet created (the checks find nothing);
* ``checked``: the tables exist and are tagged (the tag check reads each table's newest commit);
* ``logged``: as ``checked``, plus the barrier log commit (what the hooks do).

Last line: ``plain_ms=<x> checked_ms=<y> logged_ms=<z> load=<1-min load>`` (medians).

    .venv/bin/python -m benchmarks.barrier_log_cost [--barriers 50] [--sinks 3]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from airflow_provider_tsb.delta.barrier_log import barrier_log_location
from airflow_provider_tsb.delta.conventions import BarrierTag, barrier_commit_properties
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology
from benchmarks.harness import median, parser, percentile, report

ROOT = "tsb.raw.words"


def run(folder: Path, mode: str, barriers: int, sinks: int) -> list[float]:
    topo = Topology("cost", warehouse=str(folder / mode))
    topo.root_table(ROOT)
    names = [f"tsb.mart.t{i}" for i in range(sinks)]
    source = ROOT
    for i, name in enumerate(names):
        topo.job(f"job{i}", "app.py", sources=[source], sinks=[name])
        source = name
    store = MetaStore(f"sqlite:///{folder / mode}.db")
    store.migrate()
    store.registry.register_topology(topo)
    log = barrier_log_location(topo.warehouse, "cost") if mode == "logged" else None
    times = []
    for b in range(1, barriers + 1):
        start = time.perf_counter()
        store.barriers.create("cost", {ROOT: b}, barrier_log=log)
        times.append((time.perf_counter() - start) * 1000)
        if mode != "plain":  # the jobs commit the barrier before the next one is generated
            for i, name in enumerate(names):
                props = barrier_commit_properties(BarrierTag(b, f"job{i}", {ROOT: b}), 0)
                write_deltalake(topo.location(name), pa.table({"n": [b]}), mode="append", commit_properties=props)
    store.dispose()
    return times


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--barriers", type=int, default=50)
    options.add_argument("--sinks", type=int, default=3)
    args = options.parse_args()
    medians = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("plain", "checked", "logged"):
            times = run(Path(tmp), mode, args.barriers, args.sinks)
            medians[mode] = median(times)
            print(f"{mode}: median {medians[mode]:.1f} ms, p95 {percentile(times, 95):.1f} ms over {len(times)} "
                  f"barriers, {args.sinks} intermediate tables")
    report("barrier_log_cost", **{f"{mode}_ms": round(value, 1) for mode, value in medians.items()})


if __name__ == "__main__":
    main()
