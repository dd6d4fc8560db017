"""The app model: what one Spark ETL job of a topology declares, and what it sees per barrier.

An app (:class:`TsbApp`) declares its job id, its source tables, its sink tables
(:class:`Sink`: mode, keys, schema) and a ``process(ctx) -> {sink: DataFrame}`` function. For
barrier ``n`` the runner (:mod:`airflow_provider_tsb.spark.runner`) hands ``process`` a
:class:`BarrierContext`: the inputs as of ``n`` (FLIP-276: every input read at the version of
the same barrier), their changes in the epoch ``(n-1, n]``, and the sinks' previous state.
Reads are lazy DataFrames over Delta tables at exact versions.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_provider_tsb.delta.sink_log import SinkLog
from airflow_provider_tsb.exceptions import MisalignedInputError
from airflow_provider_tsb.spark.catalog import BarrierPlan
from airflow_provider_tsb.spark.inputs import Ranges, change_ranges, read_changes, read_snapshot
from airflow_provider_tsb.spark.micro_batch import MicroBatchContext
from airflow_provider_tsb.spark.outputs_compaction import APPEND_MIN_FILES, Compaction
from airflow_provider_tsb.spark.write_options import WRITER_VARIABLE, SinkMode, SinkWriter, WriteOptions


@dataclass(frozen=True)
class Sink:
    """A sink table of an app.

    Attributes:
        mode: ``append`` | ``overwrite`` | ``merge`` (upsert, and delete with ``delete_when``,
            by ``keys``; only the files holding an affected key are rewritten).
        keys: key columns for ``merge``.
        schema: Spark DDL of the table, used by ``ctx.previous`` before the table exists
            (without it ``previous`` returns ``None`` then); a new column declared ``NOT NULL``
            here is refused by schema evolution.
        max_files: coalesce each barrier's output to at most this many files (per partition
            written, for a partitioned sink).
        location: default location (overridden by the plan's tables or ``--table``).
        partition_by: partition columns of the Delta table (Hive-style ``col=value/``
            directories, Delta ``partitionColumns``), fixed when the table is created: a change
            on an existing table is refused. Reads with a filter on them skip the other
            partitions' files.
        delete_when: ``merge`` only: a Spark SQL condition on the output's rows (e.g.
            ``"op = 'D'"``); a row where it is true deletes its key from the table and is not
            written, the others upsert (null counts as false). CDC-style: the output carries
            inserts, updates and deletes of the epoch, at most one row per key.
        compaction: auto compaction of the table's small files in the barrier's own commit
            (:class:`~airflow_provider_tsb.spark.outputs_compaction.Compaction`): ``None`` (the
            default) compacts ``merge`` sinks with ``Compaction()`` (at 16 small files) and
            ``append`` sinks at 50 (``APPEND_MIN_FILES``: a streaming append sink gains a file
            per barrier), ``False`` never, ``True`` is ``Compaction()``, a ``Compaction`` its
            own thresholds (``overwrite`` sinks never need it). See :attr:`compaction_options`.
        writer: ``staged`` (tsb stages the files and commits them with delta-rs, reporting
            PROCESSED with their manifest first) or ``delta`` (Delta's own Spark writer with
            its application transaction; PROCESSED is not separately visible, so READ_COMMITTED
            reads such a sink at its WRITTEN barriers). ``None``: ``$TSB_SINK_WRITER``, else
            ``staged``. See :mod:`airflow_provider_tsb.spark.delta_writer`.

    Raises:
        ValueError: ``merge`` without keys, ``delete_when`` without ``merge``, a column named
            twice in ``keys`` or ``partition_by``.
    """

    mode: SinkMode = "append"
    keys: tuple[str, ...] = ()
    schema: str | None = None
    max_files: int | None = None
    location: str | None = None
    partition_by: tuple[str, ...] = ()
    delete_when: str | None = None
    compaction: Compaction | bool | None = None
    writer: SinkWriter | None = None

    @functools.cached_property
    def options(self) -> WriteOptions:
        """How the sink's barriers are written (:class:`WriteOptions`; made once per sink, in the
        job's process: ``writer=None`` takes ``$TSB_SINK_WRITER``, else ``staged``)."""
        return WriteOptions(
            mode=self.mode, keys=self.keys, partition_by=self.partition_by, max_files=self.max_files,
            delete_when=self.delete_when, schema=self.schema, compaction=self.compaction_options,
            writer=self.writer or os.environ.get(WRITER_VARIABLE) or "staged",  # type: ignore[arg-type]
        )

    @property
    def compaction_options(self) -> Compaction | None:
        """The compaction this sink's barriers run (``None``: none), from :attr:`compaction`."""
        if self.mode == "overwrite" or self.compaction is False:
            return None
        if isinstance(self.compaction, Compaction):
            return self.compaction
        if self.compaction is True or self.mode == "merge":
            return Compaction()
        return Compaction(min_files=APPEND_MIN_FILES)

    def __post_init__(self) -> None:
        if isinstance(self.partition_by, str):
            object.__setattr__(self, "partition_by", (self.partition_by,))
        if isinstance(self.keys, str):
            object.__setattr__(self, "keys", (self.keys,))
        if self.mode == "merge" and not self.keys:
            raise ValueError("Sink(mode='merge') needs key columns: Sink(mode='merge', keys=('id',))")
        if self.delete_when is not None and self.mode != "merge":
            raise ValueError(f"Sink(delete_when={self.delete_when!r}) needs mode='merge', not {self.mode!r}")
        for name, cols in (("keys", self.keys), ("partition_by", self.partition_by)):
            if len(set(cols)) != len(cols):
                raise ValueError(f"Sink({name}={cols!r}) names a column twice")


ProcessFn = Callable[["BarrierContext"], Mapping[str, DataFrame]]
MicroBatchFn = Callable[[MicroBatchContext], Mapping[str, DataFrame]]


@dataclass
class TsbApp:
    """An ETL job of the topology.

    Attributes:
        job_id: the job id (also the Delta txn app id stem).
        sources: ``{input table name: default location or None}``.
        sinks: ``{sink table name: Sink}``.
        process: builds each sink's output DataFrame for one barrier (lazy; no actions
            needed). For ``merge`` sinks return only the upserted rows.
        description: one line on what the job computes.
        process_micro_batch: optional, for apps whose outputs are row-wise in their changes:
            builds each sink's output for several consecutive barriers at once from
            :meth:`MicroBatchContext.changes
            <airflow_provider_tsb.spark.micro_batch.MicroBatchContext.changes>`, keeping its
            ``_tsb_barrier`` column on every row. A streaming micro-batch of several barriers of
            ``append`` sinks then costs Spark one scan and one write instead of a plan per
            barrier; its rows tagged ``b`` must be ``process``'s output for ``b``
            (:mod:`airflow_provider_tsb.spark.micro_batch`).
    """

    job_id: str
    sources: Mapping[str, str | None]
    sinks: Mapping[str, Sink]
    process: ProcessFn
    description: str = ""
    process_micro_batch: MicroBatchFn | None = None
    _locations: dict[str, str] = field(default_factory=dict, repr=False)

    def resolve_locations(
        self,
        plan_tables: Mapping[str, str] | None = None,
        overrides: Mapping[str, str] | None = None,
        warehouse: str | None = None,
    ) -> dict[str, str]:
        """Return ``{table: location}`` for every source and sink.

        Precedence: ``overrides`` (``--table``) > the plan's tables > the declared default >
        ``<warehouse>/<catalog>/<database>/<table>`` (where ``Topology`` puts a table without a
        location).

        Raises:
            ValueError: a table has no location (the message names it, whether the app declares it
                as a source or a sink, and the tables that were given).
        """
        from airflow_provider_tsb.names import normalize_table_name, parse_table_name

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
            if not loc and warehouse:  # the Topology's convention: <warehouse>/<catalog>/<database>/<table>
                loc = os.path.join(warehouse, *parse_table_name(key))
            if not loc:
                kind = "source" if name in self.sources else "sink"
                given = sorted({*(overrides or {}), *(plan_tables or {})})
                raise ValueError(
                    f"job {self.job_id}: no location for table {name!r}, which the app declares as a {kind}: "
                    f"the tables given (--table NAME=LOCATION, the plan's tables) are {given or '(none)'}, "
                    "the app declares no default location for it and no --warehouse was given. If the app "
                    "misspells it, make its name the topology's; else pass --table, --plan or --warehouse"
                )
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
        sink_logs: Mapping[str, SinkLog] | None = None,
    ) -> None:
        self.spark = spark
        self.app = app
        self.plan = plan
        self.locations = dict(locations)
        #: each sink's log as the barrier started (read here when not given)
        self.sink_logs = dict(sink_logs or {})
        #: the sinks whose previous state :meth:`previous` read (such a barrier's output needs
        #: the barrier before it committed, so it is never staged with it in one Spark job)
        self.read_sinks: set[str] = set()

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

    def change_ranges(self, source: str, columns: Sequence[str]) -> dict[str, tuple[Any, Any] | None]:
        """``{column: (min, max)}`` of the rows added to ``source`` in this barrier's epoch, from
        the Delta statistics of the added files (no data read); ``None`` for each column when
        nothing was added (``snapshot(within=...)`` then reads no file).
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
        self.read_sinks.add(sink)
        location = self.locations[sink]
        log = self.sink_logs.get(sink) or SinkLog.read(location, self.app.job_id)
        prev = self.plan.previous_barrier
        if prev is not None and log.previous == prev:  # answered as the log was read
            version, head = log.previous_version, log.newest
        else:
            version = log.version_of(prev) if prev is not None else None
            head = log.head() if version is None else None
        if version is None:
            if prev is not None and head is not None:
                raise MisalignedInputError(
                    f"job {self.app.job_id}: sink {sink} has no version for previous barrier {prev} "
                    f"while processing barrier {self.barrier}"
                )
            ddl = self.app.sinks[sink].schema
            return self.spark.createDataFrame([], ddl) if ddl else None
        return read_snapshot(self.spark, location, version)
