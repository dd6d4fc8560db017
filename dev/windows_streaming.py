"""Batch and streaming mode give the same event-time windows (issue 13 item 4).

Builds the same history twice (SQLite metastore, the flights topology with ``windows=True``):
2013-01-01 .. ``--days`` days of flights and weather, one event-time barrier per day, each day
after the first also bringing 4 late rows (a window emitted by the previous barrier) and 3
on-time rows (the window the previous barrier left open). Runs ``origin_hourly_delay`` in batch
mode on one and in streaming mode (``--mode streaming --until-barrier N``) on the other, through
the app's command line with ``--metastore-url``, and compares the three sinks at every barrier.

    PYSPARK_PYTHON=.venv/bin/python /work/bin/heavy .venv/bin/python dev/windows_streaming.py --days 4

Prints the barriers, the emitted windows and late rows per barrier, and ``same: True`` when every
sink is equal at every barrier in both modes (exit 1 otherwise).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
SINKS = ("tsb.flights.origin_hourly_delay", "tsb.flights.origin_hourly_open", "tsb.flights.origin_hourly_late")


def _topology(warehouse: Path) -> Any:
    spec = importlib.util.spec_from_file_location("tsb_dev_common_flights", REPO / "dags" / "common" / "flights.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.flights_topology(windows=True, warehouse=str(warehouse))


def _retimed(day: dt.date, hour: dt.datetime, n: int, dep_delay: float) -> pa.Table:
    from tsb_examples.datasets import nycflights13 as nyc

    rows = nyc.flights_of_day(day).slice(0, n)
    rows = rows.set_column(rows.schema.get_field_index("time_hour"), "time_hour",
                           pa.array([hour] * n, pa.timestamp("us", tz="UTC")))
    return rows.set_column(rows.schema.get_field_index("dep_delay"), "dep_delay", pa.array([dep_delay] * n))


def build(root: Path, days: int) -> tuple[str, Any]:
    """Ingest and generate the barriers; returns (metastore URL, topology)."""
    from airflow_provider_tsb.delta.roots import append_rows
    from airflow_provider_tsb.hooks.barrier import TsbBarrierHook, read_root_versions
    from airflow_provider_tsb.metastore.store import MetaStore
    from tsb_examples.datasets import nycflights13 as nyc

    url = f"sqlite:///{root}/tsb.db"
    store = MetaStore(url)
    store.migrate()
    topology = _topology(root / "warehouse")
    store.registry.register_topology(topology)
    flights, weather = topology.location("raw.flights"), topology.location("raw.weather")
    hook = TsbBarrierHook(topology, ts_kind="event")
    for i, day in enumerate(nyc.days(dt.date(2013, 1, 1), days)):
        if i:
            prev = day - dt.timedelta(days=1)
            late = dt.datetime(prev.year, prev.month, prev.day, 15, tzinfo=dt.UTC)  # emitted by the last barrier
            open_ = dt.datetime(day.year, day.month, day.day, 4, tzinfo=dt.UTC)  # left open by it
            append_rows(flights, pa.concat_tables([_retimed(prev, late, 4, 999.0), _retimed(prev, open_, 3, 60.0)]))
        nyc.ingest_day(flights, weather, day)
        versions = read_root_versions(topology)
        store.barriers.create(topology.name, versions, ts_ms=hook.watermark(versions), ts_kind="event")
    return url, topology


def tables_at(topology: Any, barrier: int) -> dict[str, list[tuple]]:
    from deltalake import DeltaTable

    from airflow_provider_tsb.delta import version_of_barrier

    out = {}
    for sink in SINKS:
        location = topology.location(sink)
        rows = DeltaTable(location, version=version_of_barrier(location, barrier)).to_pyarrow_table().to_pylist()
        out[sink] = sorted(tuple(sorted(r.items())) for r in rows)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=4, help="days = barriers (default 4)")
    args = parser.parse_args(argv)
    from airflow_provider_tsb.spark.cli import run_app
    from airflow_provider_tsb.spark.session import get_spark

    sys.path.insert(0, str(REPO))
    from dev.dataplane import load_app_module

    app = load_app_module("flights/origin_hourly_delay.py").APP
    spark = get_spark("tsb-windows-streaming", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("batch", "streaming"):
            url, topology = build(Path(tmp) / mode, args.days)
            argv_ = ["--mode", mode, "--metastore-url", url, "--until-barrier", str(args.days),
                     *(f"--table={t}={topology.location(t)}" for t in ("tsb.raw.flights", *SINKS))]
            assert run_app(app, argv_, spark=spark) == 0
            results[mode] = {b: tables_at(topology, b) for b in range(1, args.days + 1)}
    same = results["batch"] == results["streaming"]
    for b, tables in results["batch"].items():
        late = [dict(r) for r in tables[SINKS[2]] if dict(r)["barrier"] == b][0]["late_rows"]
        print(f"barrier {b}: windows emitted {len(tables[SINKS[0]])}, open {len(tables[SINKS[1]])}, late rows {late}")
    print(f"same: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
