"""One run of a job's app in its Spark driver (:class:`AppRun`), and how a streaming run goes
(:class:`StreamOptions`).

Every step of a run, batch or streaming (:mod:`~airflow_provider_tsb.spark.runner`,
:mod:`~airflow_provider_tsb.spark.streaming`), reads the same four things: the job's Spark
session, its :class:`~airflow_provider_tsb.spark.model.TsbApp`, the barrier catalog and the
location of each table it reads or writes. :class:`AppRun` holds them, built once by the app's
command line (:mod:`~airflow_provider_tsb.spark.cli`) and passed to each step.

Example::

    run = AppRun(spark, APP, MetastoreCatalog(url), APP.resolve_locations(tables))
    run_batch(run, until_barrier=3)
    run_streaming(run, StreamOptions(idle_timeout_s=30))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from airflow_provider_tsb.delta.sink_log import SinkLog
from airflow_provider_tsb.spark.catalog import BarrierCatalog
from airflow_provider_tsb.spark.model import TsbApp
from airflow_provider_tsb.spark.plans import DEFAULT_MAX_BARRIERS_PER_TRIGGER


@dataclass(frozen=True)
class AppRun:
    """A run of ``app`` on ``spark``: its barriers from ``catalog`` (``None``: no catalog, the
    reports are not made), its tables at ``locations`` (``{table: location}``, every source and
    sink of the app)."""

    spark: SparkSession
    app: TsbApp
    catalog: BarrierCatalog | None
    locations: Mapping[str, str]
    #: the app's job id (an attribute, not a property: a barrier's walk through the runner makes no
    #: call into this module)
    job_id: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "job_id", self.app.job_id)

    def sources(self) -> dict[str, str]:
        """``{source: location}`` of the app's inputs."""
        return {name: self.locations[name] for name in self.app.sources}

    def sink_heads(self) -> dict[str, tuple[int, int] | None]:
        """``{sink: (barrier, version)}`` of each sink's newest WRITTEN barrier (``None``: none),
        one log read per sink."""
        return {name: SinkLog.read(self.locations[name], self.job_id).head() for name in sorted(self.app.sinks)}

    def base_barrier(self, heads: Mapping[str, tuple[int, int] | None] | None = None) -> int | None:
        """The barrier every sink has reached (the least of the sinks'); ``None`` if a sink is
        empty. ``heads``: :meth:`sink_heads` already read (default: read them)."""
        heads = self.sink_heads() if heads is None else heads
        barriers = [heads[name] for name in self.app.sinks]
        if any(head is None for head in barriers):
            return None
        return min(head[0] for head in barriers if head is not None) if barriers else None


@dataclass(frozen=True)
class StreamOptions:
    """How a streaming run goes (:func:`~airflow_provider_tsb.spark.streaming.run_streaming`).

    It stops after committing a final barrier (FLIP-147 end of input; one generated at or after
    ``final_since_ms``, epoch ms, when given), after ``max_barriers`` barriers, after committing
    ``until_barrier``, or after ``idle_timeout_s`` seconds without a new barrier; with none of
    them it runs until the input ends.

    Attributes:
        trigger_interval_s: longest wait, seconds, for a barrier inside one poll of the source
            (its long poll); an idle run makes one micro-batch attempt per interval.
        poll_interval_s: seconds between catalog look-ups while the source waits: a ready
            barrier starts its micro-batch within about this delay.
        max_barriers_per_trigger: ready barriers one micro-batch takes at most
            (:mod:`~airflow_provider_tsb.spark.barrier_group`; ``1``: a micro-batch per barrier).
        checkpoint: the Structured Streaming checkpoint (submit engine; default
            ``<first sink>/_tsb_checkpoints/<job>``). A Spark Connect client keeps none: its
            checkpoint is the sinks' Delta logs.
    """

    until_barrier: int | None = None
    max_barriers: int | None = None
    idle_timeout_s: float | None = None
    final_since_ms: int | None = None
    trigger_interval_s: float = 0.5
    poll_interval_s: float = 0.05
    max_barriers_per_trigger: int = DEFAULT_MAX_BARRIERS_PER_TRIGGER
    checkpoint: str | None = None
