"""The baseline of the overhead benchmarks: a job's ``process()`` without barrier bookkeeping.

``plain`` runs an app's own ``process()`` over the same epochs (the same root-table versions)
and writes with the same write path (tsb's own staging, ``stage_output``: the executors write
Parquet, the driver reads the footers, a merge rewrites only the files holding one of its keys;
then delta-rs commits the files), but with no txn / epoch / alignment checks, no
barrier look-ups, no orphan cleanup and no PROCESSED/WRITTEN records: what the jobs would cost
without tsb. An intermediate table's version for barrier ``b`` is ``b - 1`` (one commit per
barrier, created at version 0), so no look-up is needed. Each barrier logs the same
``tsb-timing`` line as a tsb job (phases ``delta_log``, ``spark``, ``footers``, ``commit``,
``other``), so the two arms compare phase by phase.

Used in-process by ``barrier_overhead`` (``from benchmarks.plain import ...``) and as a
``spark-submit`` application by ``full_year``:

    spark-submit benchmarks/plain.py --script spark_apps/flights/enrich_flights.py \\
        --epochs epochs.json --table raw.flights=/path ... (one --table per source and sink)

As an application it runs as a file, not as part of the ``benchmarks`` package: it imports
only the provider (installed in the environment), never ``benchmarks.*``, and keeps its own
argument parser; it reports no figures (``full_year`` times it).

``epochs.json``: ``{"barriers": [{"barrier": 1, "ts": <epoch ms>, "roots": {table: version}}]}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from deltalake.transaction import create_table_with_add_actions

from airflow_provider_tsb.delta.log import normalize_location
from airflow_provider_tsb.delta.snapshots import latest_table_or_none
from airflow_provider_tsb.spark.app import BarrierContext, Sink, TsbApp
from airflow_provider_tsb.spark.catalog import BarrierPlan
from airflow_provider_tsb.spark.inputs import read_snapshot
from airflow_provider_tsb.spark.outputs import stage_output
from airflow_provider_tsb.spark.timing import barrier_timer, phase
from airflow_provider_tsb.spark.write_options import WriteTarget


def load_app(script: str | Path) -> TsbApp:
    """The ``APP`` of an app script."""
    spec = importlib.util.spec_from_file_location(Path(script).stem, script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.APP


class PlainContext(BarrierContext):
    """``previous(sink)`` = the sink's latest version (no barrier look-up), from the same
    per-process snapshot cache as tsb's reads."""

    def previous(self, sink):
        loc = self.locations[sink]
        with phase("delta_log"):
            latest = latest_table_or_none(loc)
        if latest is None:
            ddl = self.app.sinks[sink].schema
            return self.spark.createDataFrame([], ddl) if ddl else None
        return read_snapshot(self.spark, loc, latest.version())


def plain_write(spark, df, sink: str, spec: Sink, location: str, job_id: str, barrier: int) -> None:
    """tsb's staging (``stage_output``: the executors' write, the footers, schema alignment, a
    merge's affected files, compaction), then a plain delta-rs commit: no txn, no tags, no
    PROCESSED/WRITTEN, no fencing, no orphan cleanup.

    The sink's latest snapshot comes from the same per-process cache as tsb's write path
    (``delta.snapshots.latest_table``), so the baseline does not pay a full log load that tsb
    does not pay.
    """
    with phase("delta_log"):
        existing = latest_table_or_none(location)
    log = SimpleNamespace(location=normalize_location(location), table=existing,  # what stage_output reads
                          version=existing.version() if existing is not None else None,
                          snapshot=None)  # the merge and compaction load their snapshot (spark.outputs.sink_snapshot)
    options = spec.options
    staged = stage_output(spark, df, WriteTarget(sink, location, job_id, barrier), options, log,
                          f"plain/{barrier}/{time.time_ns()}")
    adds = [f.to_add_action() for f in staged.files]
    with phase("commit"):
        if existing is None:
            create_table_with_add_actions(location, staged.delta_schema, adds, mode="error",
                                          partition_by=list(options.partition_by) or None)
        else:
            removes = [r.to_remove_action(int(time.time() * 1000)) for r in staged.removed]
            existing.create_write_transaction([*adds, *removes], options.commit_mode, staged.delta_schema)


def plain_plan(app: TsbApp, barrier: int, entries: Sequence[Mapping[str, Any]], roots: Sequence[str]) -> BarrierPlan:
    """Barrier ``barrier`` (1-based into ``entries``) as a plan, without any look-up."""

    from airflow_provider_tsb.names import normalize_table_name as canonical

    root_names = {canonical(r) for r in roots}

    def version(name: str, b: int) -> int:
        if canonical(name) not in root_names:
            return b - 1
        return {canonical(k): v for k, v in entries[b - 1]["roots"].items()}[canonical(name)]

    return BarrierPlan(
        barrier=barrier,
        ts_ms=entries[barrier - 1]["ts"],
        inputs={n: version(n, barrier) for n in app.sources},
        previous_barrier=barrier - 1 if barrier > 1 else None,
        previous_inputs={n: version(n, barrier - 1) for n in app.sources} if barrier > 1 else {},
    )


def run_plain_barrier(spark, app: TsbApp, barrier: int, entries, roots, locations: Mapping[str, str]) -> None:
    """``process()`` and the plain write of one barrier."""
    plan = plain_plan(app, barrier, entries, roots)
    outputs = app.process(PlainContext(spark, app, plan, locations))
    for sink, spec in app.sinks.items():
        plain_write(spark, outputs[sink], sink, spec, locations[sink], app.job_id, barrier)


def main(argv: Sequence[str] | None = None) -> int:
    from airflow_provider_tsb.spark.session import get_spark

    p = argparse.ArgumentParser(description="a job's process() over every epoch, without tsb")
    p.add_argument("--script", required=True)
    p.add_argument("--epochs", required=True)
    p.add_argument("--roots", default="raw.flights,raw.weather")
    p.add_argument("--table", action="append", default=[], metavar="NAME=LOCATION")
    p.add_argument("--barriers", metavar="FIRST:LAST", help="only these barriers (default: every epoch)")
    args = p.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("airflow_provider_tsb.spark").setLevel(logging.INFO)
    app = load_app(args.script)
    entries = json.loads(Path(args.epochs).read_text())["barriers"]
    locations = app.resolve_locations(None, dict(t.split("=", 1) for t in args.table))
    spark = get_spark(f"plain-{app.job_id}")
    roots = args.roots.split(",")
    first, last = (int(b) for b in args.barriers.split(":")) if args.barriers else (1, len(entries))
    for barrier in range(first, min(last, len(entries)) + 1):
        with barrier_timer(app.job_id, barrier):  # the same tsb-timing lines as tsb's jobs
            run_plain_barrier(spark, app, barrier, entries, roots, locations)
    print(f"plain {app.job_id}: barriers {first}..{min(last, len(entries))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
