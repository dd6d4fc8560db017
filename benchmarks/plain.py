"""The baseline of the overhead benchmarks: a job's ``process()`` without barrier bookkeeping.

``plain`` runs an app's own ``process()`` over the same epochs (the same root-table versions)
and writes with the same write path (Spark executors write Parquet, delta-rs commits it, merge
sinks rewritten with the same ``merge_rows``), but with no txn / epoch / alignment checks, no
barrier look-ups, no orphan cleanup and no PROCESSED/WRITTEN records: what the jobs would cost
without tsb. An intermediate table's version for barrier ``b`` is ``b - 1`` (one commit per
barrier, created at version 0), so no look-up is needed. Each barrier logs the same
``tsb-timing`` line as a tsb job (phases ``delta_log``, ``spark``, ``footers``, ``commit``,
``other``), so the two arms compare phase by phase.

Used in-process by ``barrier_overhead.py`` and as a ``spark-submit`` application by
``full_year.py``:

    spark-submit benchmarks/plain.py --script spark_apps/flights/enrich_flights.py \\
        --epochs epochs.json --table raw.flights=/path ... (one --table per source and sink)

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
from typing import Any

from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import create_table_with_add_actions

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_provider_tsb.delta.log import table_exists  # noqa: E402
from airflow_provider_tsb.delta.snapshots import latest_table_or_none  # noqa: E402
from airflow_provider_tsb.spark.app import BarrierContext, TsbApp  # noqa: E402
from airflow_provider_tsb.spark.catalog import BarrierPlan  # noqa: E402
from airflow_provider_tsb.spark.inputs import read_snapshot, spark_schema  # noqa: E402
from airflow_provider_tsb.spark.outputs import merge_rows, staged_files  # noqa: E402
from airflow_provider_tsb.spark.timing import barrier_timer, phase  # noqa: E402


def load_app(script: str | Path) -> TsbApp:
    """The ``APP`` of an app script."""
    spec = importlib.util.spec_from_file_location(Path(script).stem, script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.APP


class PlainContext(BarrierContext):
    """``previous(sink)`` = the sink's latest version (no barrier look-up)."""

    def previous(self, sink):
        loc = self.locations[sink]
        if not table_exists(loc):
            ddl = self.app.sinks[sink].schema
            return self.spark.createDataFrame([], ddl) if ddl else None
        return read_snapshot(self.spark, loc, DeltaTable(loc).version())


def plain_write(spark, df, location, mode, keys, max_files, barrier) -> None:
    """Spark writes Parquet, delta-rs commits: no txn, no tags, no reports, no cleanup.

    The sink's latest snapshot comes from the same per-process cache as tsb's write path
    (``delta.snapshots.latest_table``), so the baseline does not pay a full log load that tsb
    does not pay.
    """
    with phase("delta_log"):
        existing = latest_table_or_none(location)
    if existing is not None:
        schema = spark_schema(existing)
        if mode == "merge":
            df = merge_rows(read_snapshot(spark, location, existing.version()), df, keys)
    else:
        schema = df.schema
    if max_files:
        df = df.coalesce(max_files)
    rel = f"plain/{barrier}/{time.time_ns()}"
    with phase("spark"):
        df.write.parquet(f"{location}/{rel}")
    with phase("footers"):
        adds = [f.to_add_action() for f in staged_files(location, rel)]
    delta_schema = DeltaSchema.from_json(json.dumps(schema.jsonValue()))
    with phase("commit"):
        if existing is None:
            create_table_with_add_actions(location, delta_schema, adds, mode="error")
        else:
            existing.create_write_transaction(adds, "append" if mode == "append" else "overwrite", delta_schema)


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
        plain_write(spark, outputs[sink], locations[sink], spec.mode, spec.keys, spec.max_files, barrier)


def main(argv: Sequence[str] | None = None) -> int:
    from airflow_provider_tsb.spark.session import get_spark

    p = argparse.ArgumentParser(description="a job's process() over every epoch, without tsb")
    p.add_argument("--script", required=True)
    p.add_argument("--epochs", required=True)
    p.add_argument("--roots", default="raw.flights,raw.weather")
    p.add_argument("--table", action="append", default=[], metavar="NAME=LOCATION")
    args = p.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("airflow_provider_tsb.spark").setLevel(logging.INFO)
    app = load_app(args.script)
    entries = json.loads(Path(args.epochs).read_text())["barriers"]
    locations = app.resolve_locations(None, dict(t.split("=", 1) for t in args.table))
    spark = get_spark(f"plain-{app.job_id}")
    roots = args.roots.split(",")
    for barrier in range(1, len(entries) + 1):
        with barrier_timer(app.job_id, barrier):  # the same tsb-timing lines as tsb's jobs
            run_plain_barrier(spark, app, barrier, entries, roots, locations)
    print(f"plain {app.job_id}: {len(entries)} barriers", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
