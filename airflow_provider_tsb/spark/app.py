"""The tsb app framework: one Spark ETL job processing timestamp barriers in order.

An app declares its job id, its source tables, its sink tables (mode, keys) and a
``process(ctx) -> {sink: DataFrame}`` function. The framework, per barrier ``n``:

1. asserts *alignment*: every input is read at the version of barrier ``n`` (an intermediate
   input's version must be tagged with ``n``; :class:`MisalignedInputError` otherwise);
2. skips the barrier if every sink already has it committed (re-reporting WRITTEN);
3. calls ``process`` with a :class:`BarrierContext` (snapshots at ``n``, changes of the
   epoch ``(n-1, n]``, the sinks' previous state);
4. commits each sink with :func:`airflow_provider_tsb.spark.outputs.write_barrier`.

Batch mode processes the pending barriers (optionally up to ``--until-barrier``) and stops;
streaming mode (:mod:`airflow_provider_tsb.spark.streaming`) runs a Structured Streaming
query whose micro-batches are barriers. Both produce identical tables.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_provider_tsb.delta.barriers import (
    barrier_of_version,
    is_barrier_committed,
    latest_written_barrier,
    version_of_barrier,
)
from airflow_provider_tsb.delta.errors import MisalignedInputError
from airflow_provider_tsb.delta.log import table_exists
from airflow_provider_tsb.spark.catalog import BarrierCatalog, BarrierPlan, PlanFileCatalog, open_catalog
from airflow_provider_tsb.spark.inputs import Ranges, change_ranges, read_changes, read_snapshot
from airflow_provider_tsb.spark.outputs import SinkMode, WriteResult, write_barrier
from airflow_provider_tsb.spark.timing import barrier_timer, phase

log = logging.getLogger("airflow_provider_tsb.spark")


@dataclass(frozen=True)
class Sink:
    """A sink table of an app.

    Attributes:
        mode: ``append`` | ``overwrite`` | ``merge`` (upsert by ``keys``).
        keys: key columns for ``merge``.
        schema: Spark DDL of the table, used by ``ctx.previous`` before the table exists
            (without it ``previous`` returns ``None`` then).
        max_files: coalesce each barrier's output to at most this many files.
        location: default location (overridden by the plan's tables or ``--table``).
    """

    mode: SinkMode = "append"
    keys: tuple[str, ...] = ()
    schema: str | None = None
    max_files: int | None = None
    location: str | None = None


ProcessFn = Callable[["BarrierContext"], Mapping[str, DataFrame]]


@dataclass
class TsbApp:
    """An ETL job of the topology.

    Attributes:
        job_id: the job id (also the Delta txn app id stem).
        sources: ``{input table name: default location or None}``.
        sinks: ``{sink table name: Sink}``.
        process: builds each sink's output DataFrame for one barrier (lazy; no actions
            needed). For ``merge`` sinks return only the upserted rows.
    """

    job_id: str
    sources: Mapping[str, str | None]
    sinks: Mapping[str, Sink]
    process: ProcessFn
    description: str = ""
    _locations: dict[str, str] = field(default_factory=dict, repr=False)

    def resolve_locations(
        self,
        plan_tables: Mapping[str, str] | None = None,
        overrides: Mapping[str, str] | None = None,
        warehouse: str | None = None,
    ) -> dict[str, str]:
        """Return ``{table: location}`` for every source and sink.

        Precedence: ``overrides`` (``--table``) > the plan's tables > the declared default >
        ``<warehouse>/<table name>``.

        Raises:
            ValueError: a table has no location (the message names it).
        """
        from airflow_provider_tsb.names import normalize_table_name

        declared = {**dict(self.sources), **{n: s.location for n, s in self.sinks.items()}}
        # ``raw.words`` and ``tsb.raw.words`` name the same table (default catalog ``tsb``)
        canonical_overrides = {normalize_table_name(k): v for k, v in (overrides or {}).items()}
        canonical_plan = {normalize_table_name(k): v for k, v in (plan_tables or {}).items()}
        out: dict[str, str] = {}
        for name, default in declared.items():
            key = normalize_table_name(name)
            loc = (
                (overrides or {}).get(name)
                or canonical_overrides.get(key)
                or (plan_tables or {}).get(name)
                or canonical_plan.get(key)
                or default
            )
            if not loc and warehouse:
                loc = os.path.join(warehouse, name)
            if not loc:
                raise ValueError(f"job {self.job_id}: no location for table {name!r} (use --table or --plan)")
            out[name] = loc
        return out


class BarrierContext:
    """What ``process`` sees for one barrier. All reads are lazy DataFrames."""

    def __init__(
        self,
        spark: SparkSession,
        app: TsbApp,
        plan: BarrierPlan,
        locations: Mapping[str, str],
    ) -> None:
        self.spark = spark
        self.app = app
        self.plan = plan
        self.locations = dict(locations)

    @property
    def barrier(self) -> int:
        """The barrier being processed."""
        return self.plan.barrier

    @property
    def ts_ms(self) -> int:
        """The barrier timestamp (epoch ms)."""
        return self.plan.ts_ms

    @property
    def watermark(self) -> int | None:
        """The event-time watermark (epoch ms) of the barrier, or ``None``."""
        return self.plan.watermark_ms

    @property
    def previous_barrier(self) -> int | None:
        """The barrier the sinks are at before this one (``None``: first barrier)."""
        return self.plan.previous_barrier

    def _source(self, name: str) -> str:
        if name not in self.plan.inputs:
            raise KeyError(f"job {self.app.job_id}: {name!r} is not a source (sources: {sorted(self.plan.inputs)})")
        return self.locations[name]

    def snapshot(self, source: str, *, within: Ranges | None = None) -> DataFrame:
        """The source table as of this barrier (its version in ``plan.inputs``).

        ``within``: data skipping, ``{column: (min, max)}`` (e.g. from :meth:`change_ranges`):
        only files whose statistics overlap are read; the result may hold rows outside the
        ranges, so join or filter for exactness. See
        :func:`airflow_provider_tsb.spark.inputs.read_snapshot`.
        """
        return read_snapshot(self.spark, self._source(source), self.plan.inputs[source], within=within)

    def change_ranges(self, source: str, columns: Sequence[str]) -> dict[str, tuple[Any, Any]]:
        """``{column: (min, max)}`` of the rows added to ``source`` in this barrier's epoch, from
        the Delta statistics of the added files (no data read); ``{}`` when nothing was added.
        """
        start = self.plan.previous_inputs.get(source) if self.plan.previous_barrier is not None else None
        return change_ranges(self._source(source), start, self.plan.inputs[source], columns)

    def changes(self, source: str) -> DataFrame:
        """The source's changes in the epoch ``(previous barrier, this barrier]``.

        Columns: the table's + ``_change_type`` + ``_commit_version`` (see
        :func:`airflow_provider_tsb.spark.inputs.read_changes`). For the job's first barrier:
        everything up to this barrier.
        """
        location = self._source(source)
        start = self.plan.previous_inputs.get(source) if self.plan.previous_barrier is not None else None
        return read_changes(self.spark, location, start, self.plan.inputs[source])

    def previous(self, sink: str) -> DataFrame | None:
        """The sink's state after the previous barrier (base for incremental computation).

        Empty (with ``Sink.schema``) or ``None`` (no schema) when there is no previous state.

        Raises:
            MisalignedInputError: the sink has no version for the previous barrier.
        """
        if sink not in self.app.sinks:
            raise KeyError(f"job {self.app.job_id}: {sink!r} is not a sink (sinks: {sorted(self.app.sinks)})")
        location = self.locations[sink]
        prev = self.plan.previous_barrier
        version = version_of_barrier(location, prev) if prev is not None else None
        if version is None:
            if prev is not None and table_exists(location) and latest_written_barrier(location) is not None:
                raise MisalignedInputError(
                    f"job {self.app.job_id}: sink {sink} has no version for previous barrier {prev} "
                    f"while processing barrier {self.barrier}"
                )
            ddl = self.app.sinks[sink].schema
            return self.spark.createDataFrame([], ddl) if ddl else None
        return read_snapshot(self.spark, location, version)


def check_alignment(app: TsbApp, plan: BarrierPlan, locations: Mapping[str, str]) -> None:
    """Assert every input of ``plan`` is read at the version of ``plan.barrier``.

    For a tagged (intermediate) input the version's ``tsb.barrier`` must equal the barrier
    (and the previous version's the previous barrier); root inputs carry no tags and their
    versions come from the barrier's recorded offsets. Cost: one log-file read per input.

    Raises:
        MisalignedInputError: naming the input, the version, and both barriers.
    """
    missing = sorted(set(app.sources) - set(plan.inputs))
    if missing:
        raise MisalignedInputError(f"job {app.job_id}: barrier {plan.barrier} has no version for inputs {missing}")
    checks = [(plan.barrier, plan.inputs)]
    if plan.previous_barrier is not None:
        checks.append((plan.previous_barrier, plan.previous_inputs))
    for barrier, versions in checks:
        for name in sorted(app.sources):
            version = versions[name]
            tagged = barrier_of_version(locations[name], version)
            if tagged is None:
                continue  # root table (no tags) or a non-barrier commit of a root
            if tagged != barrier:
                raise MisalignedInputError(
                    f"job {app.job_id}: input {name} would be read at version {version}, which holds "
                    f"barrier {tagged}, while processing barrier {barrier}"
                )


def sinks_base_barrier(app: TsbApp, locations: Mapping[str, str]) -> int | None:
    """The barrier all sinks have reached (min over sinks); ``None`` if any sink is empty."""
    barriers = []
    for name in app.sinks:
        latest = latest_written_barrier(locations[name])
        if latest is None:
            return None
        barriers.append(latest[0])
    return min(barriers) if barriers else None


def report_written_heads(app: TsbApp, locations: Mapping[str, str], catalog: BarrierCatalog) -> None:
    """Re-report WRITTEN for each sink's newest barrier (idempotent).

    Repairs a run killed after its Delta commit but before its WRITTEN report: the Delta log
    is the truth, the catalog only indexes it. Cost: one short log walk per sink.
    """
    for sink in sorted(app.sinks):
        head = latest_written_barrier(locations[sink])
        if head is not None:
            catalog.record_written(sink, head[0], head[1], app.job_id)


def run_barrier(
    spark: SparkSession,
    app: TsbApp,
    plan: BarrierPlan,
    locations: Mapping[str, str],
    catalog: BarrierCatalog | None,
    *,
    before: dict[str, float] | None = None,
) -> list[WriteResult]:
    """Process one barrier end to end (alignment, skip-if-committed, process, commit sinks).

    Records the job's timing for the barrier in the catalog (``running``, then ``succeeded``
    or ``failed``) and logs a ``tsb-timing`` line with the phases of
    :mod:`airflow_provider_tsb.spark.timing`.

    Args:
        before: ``{phase: seconds}`` the barrier spent before this call (streaming mode: ``poll``,
            the wait for its micro-batch, and ``source``, reading the control row).

    Returns one :class:`WriteResult` per sink (sorted by sink name).

    Raises:
        MisalignedInputError: an input is not at the barrier's version.
        KeyError: ``process`` did not return a DataFrame for every sink.
    """
    started = _now_ms()
    with barrier_timer(app.job_id, plan.barrier, before=before):
        if catalog is not None:
            catalog.record_job_barrier(app.job_id, plan.barrier, "running", started_at_ms=started)
        try:
            results = _run_barrier(spark, app, plan, locations, catalog)
        except BaseException:
            if catalog is not None:
                try:
                    catalog.record_job_barrier(app.job_id, plan.barrier, "failed", finished_at_ms=_now_ms())
                except Exception:  # the original error matters more than a lost timing
                    log.warning("job %s: could not record the failure of barrier %s", app.job_id, plan.barrier)
            raise
        if catalog is not None:
            catalog.record_job_barrier(app.job_id, plan.barrier, "succeeded", finished_at_ms=_now_ms())
    return results


def _now_ms() -> int:
    return int(time.time() * 1000)


def _run_barrier(
    spark: SparkSession,
    app: TsbApp,
    plan: BarrierPlan,
    locations: Mapping[str, str],
    catalog: BarrierCatalog | None,
) -> list[WriteResult]:
    with phase("delta_log"):
        check_alignment(app, plan, locations)
        committed = all(is_barrier_committed(locations[s], app.job_id, plan.barrier) for s in app.sinks)
    results: list[WriteResult] = []
    if committed:
        for sink in sorted(app.sinks):
            with phase("delta_log"):
                version = version_of_barrier(locations[sink], plan.barrier)
            if version is not None and catalog is not None:
                catalog.record_written(sink, plan.barrier, version, app.job_id)
            results.append(WriteResult(sink, plan.barrier, version if version is not None else -1, skipped=True))
        log.info("job %s: barrier %s already committed, skipped", app.job_id, plan.barrier)
        return results
    ctx = BarrierContext(spark, app, plan, locations)
    outputs = app.process(ctx)
    missing = sorted(set(app.sinks) - set(outputs))
    if missing:
        raise KeyError(f"job {app.job_id}: process() returned no DataFrame for sinks {missing}")
    for sink in sorted(app.sinks):
        spec = app.sinks[sink]
        results.append(
            write_barrier(
                spark,
                outputs[sink],
                table=sink,
                location=locations[sink],
                job_id=app.job_id,
                barrier=plan.barrier,
                mode=spec.mode,
                inputs=plan.inputs,
                ts_ms=plan.ts_ms,
                keys=spec.keys,
                max_files=spec.max_files,
                catalog=catalog,
            )
        )
    log.info("job %s: barrier %s done: %s", app.job_id, plan.barrier, results)
    return results


def run_batch(
    spark: SparkSession,
    app: TsbApp,
    catalog: BarrierCatalog,
    locations: Mapping[str, str],
    *,
    until_barrier: int | None = None,
    max_barriers: int | None = None,
) -> list[int]:
    """Batch mode: process the pending barriers in order (up to ``until_barrier``), then stop.

    Returns the barriers processed (committed or found already committed).
    """
    sources = {name: locations[name] for name in app.sources}
    report_written_heads(app, locations, catalog)
    after = sinks_base_barrier(app, locations)
    done: list[int] = []
    for plan in catalog.pending_barriers(app.job_id, sources, after):
        if until_barrier is not None and plan.barrier > until_barrier:
            break
        if max_barriers is not None and len(done) >= max_barriers:
            break
        run_barrier(spark, app, plan, locations, catalog)
        done.append(plan.barrier)
    catalog.heartbeat(app.job_id)
    return done


def build_arg_parser(app: TsbApp) -> argparse.ArgumentParser:
    """The CLI of every app script (see :func:`run_app`)."""
    p = argparse.ArgumentParser(prog=app.job_id, description=app.description or f"tsb job {app.job_id}")
    p.add_argument("--mode", choices=("batch", "streaming"), default="batch")
    p.add_argument("--plan", help="plan file (PlanFileCatalog)")
    p.add_argument("--report", help="report file the states are recorded into")
    p.add_argument("--metastore-url", help="metastore catalog (needs the 'metastore' catalog kind)")
    p.add_argument("--until-barrier", type=int, help="process barriers up to this one, then stop")
    p.add_argument("--max-barriers", type=int, help="stop after this many barriers")
    p.add_argument("--idle-timeout", type=float, default=None, help="streaming: stop after S seconds idle")
    p.add_argument(
        "--trigger-interval", type=float, default=1.0,
        help="streaming: longest wait (seconds) for a barrier in one offset poll (long poll)",
    )
    p.add_argument(
        "--poll-interval", type=float, default=0.05,
        help="streaming: seconds between catalog look-ups while waiting for a barrier",
    )
    p.add_argument("--checkpoint", help="streaming checkpoint dir (default: <first sink>/_tsb_checkpoints/<job>)")
    p.add_argument(
        "--final-since", type=int, default=None, metavar="EPOCH_MS",
        help="streaming: stop after a final barrier (end of input) generated at or after this time",
    )
    p.add_argument("--table", action="append", default=[], metavar="NAME=LOCATION", help="table location")
    p.add_argument("--warehouse", help="default location root: <warehouse>/<table name>")
    p.add_argument("--master", help="Spark master when not launched by spark-submit")
    return p


def _catalog_from_args(args: argparse.Namespace) -> BarrierCatalog:
    if args.metastore_url:
        import airflow_provider_tsb.spark.metastore_catalog  # noqa: F401  (registers the "metastore" kind)

        return open_catalog({"kind": "metastore", "url": args.metastore_url, "report": args.report or ""})
    if not args.plan:
        raise SystemExit("one of --plan or --metastore-url is required")
    return PlanFileCatalog(args.plan, args.report)


def run_app(app: TsbApp, argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    """Command-line entry of an app script: parse ``argv`` and run batch or streaming mode.

    Returns the process exit code (0 on success). Options: see :func:`build_arg_parser`.
    """
    from airflow_provider_tsb.spark.session import get_spark

    args = build_arg_parser(app).parse_args(argv)
    logging.basicConfig(level=os.environ.get("TSB_LOG_LEVEL", "INFO"), format="%(asctime)s %(name)s %(message)s")
    catalog = _catalog_from_args(args)
    overrides = dict(t.split("=", 1) for t in args.table)
    plan_tables = catalog.tables() if isinstance(catalog, PlanFileCatalog) else None
    locations = app.resolve_locations(plan_tables, overrides, args.warehouse)
    spark = spark or get_spark(app.job_id, master=args.master)
    if args.mode == "batch":
        done = run_batch(
            spark, app, catalog, locations, until_barrier=args.until_barrier, max_barriers=args.max_barriers
        )
        log.info("job %s: batch mode processed barriers %s", app.job_id, done)
        return 0
    from airflow_provider_tsb.spark.streaming import run_streaming

    done = run_streaming(
        spark,
        app,
        catalog,
        locations,
        checkpoint=args.checkpoint,
        until_barrier=args.until_barrier,
        max_barriers=args.max_barriers,
        idle_timeout_s=args.idle_timeout,
        trigger_interval_s=args.trigger_interval,
        poll_interval_s=args.poll_interval,
        final_since_ms=args.final_since,
    )
    log.info("job %s: streaming mode processed barriers %s", app.job_id, done)
    return 0
