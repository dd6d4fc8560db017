"""Several ready barriers in one micro-batch: one Spark job per sink, one Delta commit per barrier.

A streaming job that fell behind (its inputs hold barriers ``n+1 .. n+k`` when its micro-batch
starts, e.g. after a restart, a slow barrier, or barriers generated faster than one Spark job
each) processes up to ``max_barriers_per_trigger`` of them in one micro-batch, as Structured
Streaming's ``maxFilesPerTrigger`` caps a micro-batch by files. The barriers stay separate
where readers see them: each is its own Delta commit with its own version, txn and tag,
PROCESSED and WRITTEN (FLIP-276: a snapshot per timestamp barrier), so a reader at any of them
gets the same answer as with one micro-batch per barrier. What the group shares is the Spark
work: ``process`` is called once per barrier (lazy DataFrames, each reading its own epoch), and
the outputs of an ``append`` sink are written by one Spark job, split by barrier
(:func:`~airflow_provider_tsb.spark.outputs.stage_outputs`) into one attempt directory per
barrier; the commit protocol then runs barrier by barrier from step e
(:func:`~airflow_provider_tsb.spark.barrier_commit.write_barrier` with ``staged``).

A barrier's output is only staged ahead when it does not read its job's sinks
(``BarrierContext.previous``: it would need the barrier before it committed); other sinks
(``merge``, ``overwrite``, a new table) keep a Spark job per barrier, still planned up front.
An ``append`` sink's auto compaction rides on the group's first barrier (planned on the table
before the group). The runner (:func:`~airflow_provider_tsb.spark.runner.run_barrier_group`) holds one
input lease over the group's input versions from its start.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame

from airflow_provider_tsb.delta.conventions import staging_dir
from airflow_provider_tsb.delta.sink_log import SinkLog
from airflow_provider_tsb.spark.app_run import AppRun
from airflow_provider_tsb.spark.barrier_commit import StagedAttempt
from airflow_provider_tsb.spark.catalog import BarrierPlan
from airflow_provider_tsb.spark.frames import BARRIER_COLUMN, spark_schema
from airflow_provider_tsb.spark.micro_batch import contiguous
from airflow_provider_tsb.spark.model import TsbApp
from airflow_provider_tsb.spark.outputs import stage_outputs, tag_outputs
from airflow_provider_tsb.spark.plans import DEFAULT_MAX_BARRIERS_PER_TRIGGER  # noqa: F401 - re-exported
from airflow_provider_tsb.spark.write_options import WriteTarget

#: a sink's part of one barrier in a group: its staged files, or its output still to write
SinkOutput = StagedAttempt | DataFrame



class BarrierGroup:
    """The barriers of one micro-batch, in order, and their outputs once :meth:`stage` ran.

    Args:
        plans: two or more consecutive ready barriers of the job, oldest first.
    """

    def __init__(self, plans: Sequence[BarrierPlan]) -> None:
        self.plans = list(plans)
        self._outputs: dict[int, dict[str, SinkOutput]] = {}

    @property
    def first(self) -> int:
        """The group's first barrier (the one whose run stages the group)."""
        return self.plans[0].barrier

    def drop_first(self) -> None:
        """Drop the group's first barrier, found committed in every sink (a micro-batch replayed
        after a failure): the next barrier stages the group."""
        self.plans = self.plans[1:]

    def truncate(self, barrier: int) -> None:
        """Drop ``barrier`` and the barriers after it from the group (they run one at a time)."""
        self.plans = [p for p in self.plans if p.barrier < barrier]

    def micro_batch_ready(self, app: TsbApp, logs: Mapping[str, SinkLog]) -> bool:
        """True when the group's outputs may come from one ``app.process_micro_batch`` call
        (:mod:`~airflow_provider_tsb.spark.micro_batch`): the app declares it, every sink is an
        existing ``append`` table without a column named :data:`BARRIER_COLUMN`, and the
        barriers' epochs are contiguous."""
        if app.process_micro_batch is None or not contiguous(self.plans):
            return False
        for sink, sink_log in logs.items():
            options = app.sinks[sink].options
            if options.mode != "append" or options.writer != "staged" or sink_log.table is None:
                return False
            if BARRIER_COLUMN in spark_schema(sink_log.table).fieldNames():
                return False
        return True

    def stage(self, run: AppRun, logs: Mapping[str, SinkLog], outputs: Mapping[int, Mapping[str, DataFrame]]) -> None:
        """Write the group's outputs: an ``append`` sink's with one Spark job for all barriers
        (:func:`~airflow_provider_tsb.spark.outputs.stage_outputs`), the other sinks' are kept
        to be written barrier by barrier.

        Args:
            logs: ``{sink: SinkLog}`` read as the first barrier started.
            outputs: ``{barrier: {sink: DataFrame}}``, ``process``'s result for each barrier.

        Raises:
            SchemaChangeError: the outputs' common schema is not a valid change of the table's.
        """
        barriers = [p.barrier for p in self.plans if p.barrier in outputs]
        for sink in sorted(run.app.sinks):
            per_barrier = {b: outputs[b][sink] for b in barriers}
            self._stage_sink(run, sink, logs[sink], tag_outputs(per_barrier), barriers, per_barrier)

    def stage_micro_batch(self, run: AppRun, logs: Mapping[str, SinkLog], tagged: Mapping[str, DataFrame]) -> None:
        """Write the group's outputs from ``process_micro_batch``'s ``{sink: DataFrame}`` (rows
        tagged with their barrier), one Spark job per sink; after :meth:`micro_batch_ready`.

        Raises:
            BarrierColumnError: an output lacks the barrier column or tags a row with a barrier
                outside the group (nothing of the group is committed).
            SchemaChangeError: an output is not a valid change of its table's schema.
        """
        barriers = [p.barrier for p in self.plans]
        for sink in sorted(run.app.sinks):
            self._stage_sink(run, sink, logs[sink], tagged[sink], barriers, None)

    def _stage_sink(self, run: AppRun, sink: str, log: SinkLog, tagged: DataFrame, barriers: list[int],
                    per_barrier: Mapping[int, DataFrame] | None) -> None:
        """Stage one sink's part of the group; ``per_barrier``: the outputs to keep when the
        sink cannot share a write (``None``: it must)."""
        first, app = self.plans[0], run.app
        if app.sinks[sink].options.writer != "staged" and per_barrier is not None:
            for b in barriers:  # Delta's own writer commits as it writes: one write per barrier
                self._outputs.setdefault(b, {})[sink] = per_barrier[b]
            return
        attempts = {b: uuid.uuid4().hex for b in barriers}
        rel_dirs = {b: f"{staging_dir(app.job_id, log.epoch.epoch, b)}/{attempts[b]}" for b in barriers}
        group_dir = f"{staging_dir(app.job_id, log.epoch.epoch, first.barrier)}/{uuid.uuid4().hex}"
        target = WriteTarget(sink, run.locations[sink], app.job_id, first.barrier, first.inputs, first.ts_ms)
        staged = stage_outputs(run.spark, tagged, barriers, target, app.sinks[sink].options, log, rel_dirs, group_dir)
        if staged is None and per_barrier is None:
            tagged.columns  # noqa: B018 - raises Spark's own error for a frame it cannot analyze
            raise ValueError(f"job {app.job_id}: table {sink}: process_micro_batch's output cannot be written as "
                             "one micro-batch")
        for b in barriers:
            self._outputs.setdefault(b, {})[sink] = (
                StagedAttempt(attempts[b], rel_dirs[b], staged[b]) if staged is not None
                else per_barrier[b]  # type: ignore[index]
            )

    def take(self, barrier: int) -> dict[str, SinkOutput] | None:
        """The barrier's outputs by sink (``None``: not staged; the barrier runs ``process`` itself)."""
        return self._outputs.pop(barrier, None)
