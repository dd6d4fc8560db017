"""A micro-batch of several barriers processed as one: the context ``process_micro_batch`` sees.

A streaming job that takes several ready barriers in one micro-batch
(:mod:`~airflow_provider_tsb.spark.barrier_group`) calls the app's ``process`` once per barrier
by default: each barrier's output is its own Spark plan, so the group's write still analyzes,
plans and scans one branch per barrier (Spark time that grows with the barriers of the group,
docs/benchmarks.md "A micro-batch group's Spark cost"). An app whose outputs are row-wise in its
changes (each output row comes from change rows of one barrier: filters, projections, lookups in static
data) can declare ``TsbApp(process_micro_batch=...)`` as well. The runner then calls it once for
the whole micro-batch with a :class:`MicroBatchContext`, whose :meth:`~MicroBatchContext.changes`
are the changes of all the micro-batch's epochs in one scan, each row tagged with its barrier in
:data:`~airflow_provider_tsb.spark.frames.BARRIER_COLUMN`; the output keeps that column, and is
written with one Spark job split by it. Every barrier is still its own Delta commit, version and
tag (FLIP-276: a snapshot per timestamp barrier); a reader sees no difference.

The contract: for every barrier ``b`` of the micro-batch, the output's rows tagged ``b`` are the
rows ``process`` returns for ``b`` alone. It holds for row-wise logic, not for logic across rows
of an epoch (a ``groupBy`` not keyed by the barrier column, ``dropDuplicates``, a window), nor for
logic that reads a table as of the barrier (``ctx.snapshot``, ``ctx.previous``): such an app
declares ``process`` only. It is used only when every sink is an existing ``append`` table and the
barriers' epochs are contiguous; otherwise ``process`` runs per barrier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession

from airflow_provider_tsb.spark.catalog import BarrierPlan
from airflow_provider_tsb.spark.frames import BARRIER_COLUMN
from airflow_provider_tsb.spark.inputs import read_changes

__all__ = ["BARRIER_COLUMN", "MicroBatchContext", "contiguous"]


def contiguous(plans: Sequence[BarrierPlan]) -> bool:
    """True when each plan's epoch starts where the one before ends: the previous barrier of
    plan ``i`` is plan ``i-1``'s barrier and its previous input versions are plan ``i-1``'s
    input versions (then one read of ``(first's previous, last]`` holds exactly their epochs)."""
    return all(b.previous_barrier == a.barrier and dict(b.previous_inputs) == dict(a.inputs)
               for a, b in zip(plans, plans[1:], strict=False))


class MicroBatchContext:
    """What ``process_micro_batch`` sees: the consecutive barriers ``plans`` of job ``job_id``.

    Args:
        plans: two or more consecutive barriers of the job, oldest first, contiguous
            (:func:`contiguous`).
        locations: ``{table: location}`` of the job's sources and sinks.

    Raises:
        ValueError: fewer than two plans, or plans that are not contiguous.

    Example::

        def process_micro_batch(ctx: MicroBatchContext) -> dict[str, DataFrame]:
            new = ctx.changes("raw.flights").where(F.col("_change_type") == "insert")
            return {"flights.delayed": new.where(F.col("dep_delay") > 60).select("flight", "dep_delay",
                                                                                   ctx.barrier_column)}
    """

    #: the column naming each row's barrier, on :meth:`changes` and on the outputs (int)
    barrier_column = BARRIER_COLUMN

    def __init__(self, spark: SparkSession, job_id: str, plans: Sequence[BarrierPlan],
                 locations: Mapping[str, str]) -> None:
        if len(plans) < 2 or not contiguous(plans):
            raise ValueError(f"job {job_id}: a micro-batch needs two or more contiguous barriers, got "
                             f"{[p.barrier for p in plans]}")
        self.spark = spark
        self.job_id = job_id
        self.plans = list(plans)
        self.locations = dict(locations)

    @property
    def barriers(self) -> list[int]:
        """The micro-batch's barriers, ascending."""
        return [p.barrier for p in self.plans]

    def ts_ms(self, barrier: int) -> int:
        """The timestamp (epoch ms) of ``barrier``, one of :attr:`barriers`.

        Raises:
            KeyError: ``barrier`` is not in the micro-batch.
        """
        for plan in self.plans:
            if plan.barrier == barrier:
                return plan.ts_ms
        raise KeyError(f"job {self.job_id}: barrier {barrier} is not in the micro-batch {self.barriers}")

    def changes(self, source: str) -> DataFrame:
        """The source's changes in every epoch of the micro-batch, as one scan.

        Columns: those of :meth:`BarrierContext.changes
        <airflow_provider_tsb.spark.model.BarrierContext.changes>` (the table's, ``_change_type``,
        ``_commit_version``) and :attr:`barrier_column` (int): the barrier whose epoch
        ``(previous barrier, barrier]`` holds the row's commit.

        Raises:
            KeyError: ``source`` is not a source of the job.
            DeltaLogError: a commit in the range is missing from the log.
        """
        first, last = self.plans[0], self.plans[-1]
        if source not in last.inputs:
            raise KeyError(f"job {self.job_id}: {source!r} is not a source (sources: {sorted(last.inputs)})")
        start = first.previous_inputs.get(source) if first.previous_barrier is not None else None
        return read_changes(self.spark, self.locations[source], start, last.inputs[source],
                            barriers=[(p.barrier, p.inputs[source]) for p in self.plans])
