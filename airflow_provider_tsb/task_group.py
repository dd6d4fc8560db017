"""Turn a :class:`~airflow_provider_tsb.topology.Topology` into Airflow tasks.

:class:`TsbTopologyTaskGroup` renders, inside a DAG, one barrier-generation task followed by one
:class:`~airflow_provider_tsb.operators.spark_job.TsbSparkJobOperator` per job in topological
order (a job waits for the writers of its sources), like astronomer-cosmos renders a dbt
project. With ``mode="streaming"`` it renders a
:class:`~airflow_provider_tsb.operators.barrier.TsbBarrierEmitterOperator` and one long-running
streaming job task per job, all running at once: the jobs pipeline (job 2 on barrier n while
job 1 is on n+1) and stop after the final barrier (FLIP-147 end of input). Airflow's graph still
shows the lineage: emitter -> the jobs reading root tables, writer -> reader, as edges that do
not gate (every streaming task has ``trigger_rule="always"``), and a last ``stretch_done`` task
(``all_success`` on every streaming task and on the tasks set upstream of the group) keeps the
DAG run failing when any of them fails.

When the topology has no root table (it is the part of a topology owned by another
team, fed by :meth:`~airflow_provider_tsb.topology.Topology.external_table`), the group starts
with a :class:`~airflow_provider_tsb.sensors.barrier_committed.TsbBarrierCommittedSensor` on the
external tables instead, taking the barrier from the triggering asset events.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import BaseOperator, TaskGroup, TriggerRule

from airflow_provider_tsb.metastore.records import TsKind
from airflow_provider_tsb.operators.barrier import TsbBarrierEmitterOperator, TsbBarrierOperator
from airflow_provider_tsb.operators.spark_job import TsbSparkJobOperator
from airflow_provider_tsb.sensors.barrier_committed import TsbBarrierCommittedSensor
from airflow_provider_tsb.topology import Topology


class TsbTopologyTaskGroup(TaskGroup):
    """A TaskGroup running ``topology``: one barrier through all its jobs, or a streaming stretch.

    :param topology: the topology; validated now (an invalid one is a DAG import error).
    :param group_id: defaults to the topology name.
    :param mode: ``batch`` (one barrier per DAG run: ``generate_barrier`` then the jobs in
        topological order) or ``streaming`` (``generate_barriers``, an emitter, and every job
        as a long-running streaming query, all started together; no task waits for another:
        the lineage edges have ``trigger_rule="always"``; ``stretch_done`` ends the group).
    :param emitter_kwargs: streaming: arguments of the emitter (``interval_s``, ``duration_s``...).
    :param ts_kind: barrier timestamps, ``system`` or ``event``.
    :param spark_conn_id: Spark connection of the job operators.
    :param tsb_conn_id: metastore connection.
    :param storage_conn_id: Airflow connection of the object storage the tables live on
        (``aws``, ``wasb``/``adls``, ``google_cloud_platform``), given to the barrier task and
        every job task. ``None``: local tables, or ``$TSB_STORAGE_OPTIONS``.
    :param job_kwargs: extra operator arguments per job id (e.g. ``{"enrich": {"conf": {...}}}``).
    :param default_job_kwargs: extra operator arguments for every job.
    :param sensor_kwargs: arguments of the start sensor of a split topology (``timeout``...).

    Attributes ``barrier_task`` (the first task; its XCom is the barrier id), ``job_tasks``
    (job id -> operator) and ``end_task`` (streaming: ``stretch_done``; batch: ``None``) let DAG
    authors attach their own tasks.

    Raises:
        ValueError: a bad ``mode``, ``job_kwargs`` naming unknown jobs, or (streaming) a job
            given a ``trigger_rule`` other than ``always``.
    """

    def __init__(
        self,
        topology: Topology,
        *,
        group_id: str | None = None,
        mode: str = "batch",
        emitter_kwargs: Mapping[str, Any] | None = None,
        ts_kind: TsKind | str = TsKind.SYSTEM,
        spark_conn_id: str = "spark_default",
        tsb_conn_id: str = "tsb_default",
        storage_conn_id: str | None = None,
        job_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        default_job_kwargs: Mapping[str, Any] | None = None,
        sensor_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        topology.validate()
        _check_mode(topology, mode)
        super().__init__(group_id=group_id or topology.name, **kwargs)
        self.topology = topology
        job_kwargs = dict(job_kwargs or {})
        unknown = sorted(set(job_kwargs) - set(topology.jobs))
        if unknown:
            raise ValueError(f"job_kwargs names jobs {unknown} that topology {topology.name!r} does not declare")
        connections = {"tsb_conn_id": tsb_conn_id, "storage_conn_id": storage_conn_id}
        jobs = _JobArguments(topology, spark_conn_id, connections, job_kwargs, dict(default_job_kwargs or {}))
        self.end_task: EmptyOperator | None = None
        with self:
            if mode == "streaming":
                self.barrier_task = TsbBarrierEmitterOperator(
                    task_id="generate_barriers", topology=topology, ts_kind=ts_kind, **connections,
                    **{"trigger_rule": TriggerRule.ALWAYS, **dict(emitter_kwargs or {})},
                )
                self.job_tasks = _streaming_job_tasks(jobs, self.barrier_task)
                self.barrier_task.job_task_ids = [t.task_id for t in self.job_tasks.values()]
                self.end_task = _stretch_done([self.barrier_task, *self.job_tasks.values()])
                return
            self.barrier_task = _start_task(topology, ts_kind, connections, sensor_kwargs)
            self.job_tasks: dict[str, TsbSparkJobOperator] = _batch_job_tasks(jobs, self.barrier_task)


    def update_relative(self, other: Any, upstream: bool = True, edge_modifier: Any = None) -> None:
        """Airflow's hook when a dependency is set on the group (``ingest >> group``); in streaming
        mode an upstream task is also made upstream of ``stretch_done`` (the group's only leaf), so
        its failure still fails the DAG run although the group's tasks start without waiting for it."""
        super().update_relative(other, upstream, edge_modifier=edge_modifier)
        if upstream and getattr(self, "end_task", None) is not None:
            for task in other.leaves:
                if task is not self.end_task:
                    task >> self.end_task


# ---------------------------------------------------------------- the steps of TsbTopologyTaskGroup
def _check_mode(topology: Topology, mode: str) -> None:
    """ValueError unless ``mode`` is ``batch``, or ``streaming`` for a topology with root tables."""
    if mode not in ("batch", "streaming"):
        raise ValueError(
            f"TsbTopologyTaskGroup({topology.name!r}): mode must be 'batch' or 'streaming', got {mode!r}"
        )
    if mode == "streaming" and not topology.root_tables:
        raise ValueError(
            f"TsbTopologyTaskGroup({topology.name!r}): streaming mode needs the topology's root tables "
            "(the emitter generates the barriers); a split topology without roots runs in batch mode"
        )


@dataclass(frozen=True)
class _JobArguments:
    """What every job task of the group is given: the topology, the connections (Spark's, and
    ``{"tsb_conn_id": ..., "storage_conn_id": ...}``), the extra operator arguments
    (``default_job_kwargs`` overridden by ``job_kwargs[job id]``)."""

    topology: Topology
    spark_conn_id: str
    connections: Mapping[str, str | None]
    job_kwargs: Mapping[str, Mapping[str, Any]]
    default_job_kwargs: Mapping[str, Any]

    def task(self, job_id: str, **given: Any) -> TsbSparkJobOperator:
        """The job task of ``job_id`` (``given``: ``mode`` or ``barrier``)."""
        return TsbSparkJobOperator(
            task_id=job_id,
            topology=self.topology,
            job_id=job_id,
            **given,
            conn_id=self.spark_conn_id,
            **{**self.connections, **self.default_job_kwargs, **dict(self.job_kwargs.get(job_id, {}))},
        )


def _streaming_job_tasks(jobs: _JobArguments, emitter: BaseOperator) -> dict[str, TsbSparkJobOperator]:
    """One long-running streaming job task per job, in topological order, all running at once.

    The graph carries the lineage (emitter -> readers of root tables, writer -> reader of its
    sink) as edges that do not gate: every streaming task has ``trigger_rule="always"``, which
    Airflow's trigger-rule check passes whatever the upstream tasks' states (running included).
    """
    tasks: dict[str, TsbSparkJobOperator] = {}
    for job in jobs.topology.jobs_in_order():
        given = {**jobs.default_job_kwargs, **dict(jobs.job_kwargs.get(job.id, {}))}
        if given.get("trigger_rule", TriggerRule.ALWAYS) != TriggerRule.ALWAYS:
            raise ValueError(
                f"TsbTopologyTaskGroup({jobs.topology.name!r}): streaming job {job.id!r} must keep "
                f"trigger_rule 'always' (its tasks run at once; the graph's edges only show the lineage), "
                f"got {given['trigger_rule']!r}"
            )
        task = tasks[job.id] = jobs.task(job.id, mode="streaming")
        task.trigger_rule = TriggerRule.ALWAYS
        writers = {jobs.topology.writer_of(s) for s in job.sources}
        if None in writers:  # reads a root (or external) table: its barriers come from the emitter
            emitter >> task
        for writer in sorted(w for w in writers if w is not None):
            tasks[writer] >> task
    return tasks


def _stretch_done(tasks: list[BaseOperator]) -> EmptyOperator:
    """The streaming group's last task: succeeds when every streaming task has, else is
    ``upstream_failed``. It is the group's only leaf, so the DAG run fails when any of them does
    (Airflow decides a run's state from its leaf tasks)."""
    done = EmptyOperator(task_id="stretch_done", trigger_rule=TriggerRule.ALL_SUCCESS)
    for task in tasks:
        task >> done
    return done


def _start_task(
    topology: Topology, ts_kind: TsKind | str, connections: Mapping[str, str | None],
    sensor_kwargs: Mapping[str, Any] | None,
) -> TsbBarrierOperator | TsbBarrierCommittedSensor:
    """The batch group's first task: generate a barrier, or (no root table: a split topology)
    wait for one committed in the external tables (a deferrable sensor, which reads only the
    metastore)."""
    if topology.root_tables:
        return TsbBarrierOperator(task_id="generate_barrier", topology=topology, ts_kind=ts_kind, **connections)
    externals = sorted(n for n, t in topology.tables.items() if t.kind == "external")
    return TsbBarrierCommittedSensor(
        task_id="wait_for_upstream_barrier",
        tables=externals,
        tsb_conn_id=connections["tsb_conn_id"],
        **{"deferrable": True, "poke_interval": 5, "timeout": 3600, **(sensor_kwargs or {})},
    )


def _batch_job_tasks(jobs: _JobArguments, start: BaseOperator) -> dict[str, TsbSparkJobOperator]:
    """One job task per job at the start task's barrier (its XCom), after the start task and the
    writers of the job's sources."""
    barrier_ref = "{{ ti.xcom_pull(task_ids='" + start.task_id + "') }}"
    tasks: dict[str, TsbSparkJobOperator] = {}
    for job in jobs.topology.jobs_in_order():
        task = jobs.task(job.id, barrier=barrier_ref)
        tasks[job.id] = task
        upstream = {jobs.topology.writer_of(s) for s in job.sources} - {None}
        start >> task
        for writer in sorted(upstream):
            tasks[writer] >> task
    return tasks
