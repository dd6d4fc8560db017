"""Run one ETL job of a topology for one barrier: :class:`TsbSparkJobOperator`.

A thin :class:`~airflow.providers.apache.spark.operators.spark_submit.SparkSubmitOperator`
subclass: it holds the parameters, the templating and the call. The run protocol (register the
job, refuse to start when an input is not WRITTEN at the barrier, heartbeats, reconcile the sink
commits from the Delta log, timings, asset events with ``extra={"barrier": n, "version": v}``)
is :class:`~airflow_provider_tsb.hooks.spark_job.TsbSparkJobHook`'s, which calls back this
operator's own ``spark-submit``.

The operator adds no Spark setting of its own. The conf ``spark-submit`` gets is, from the
weakest: the Spark connection's ``conf`` extra (cluster-wide resources: executor cores and
memory, dynamic allocation, shuffle partitions, the executors' Python), then the job's declared
conf (:meth:`Topology.job(conf=...) <airflow_provider_tsb.topology.Topology.job>`), then the
operator's ``conf``. Small-machine tuning is the DAG author's to set (the example DAGs use
``tsb_examples.spark_conf.LOCAL_SPARK_CONF``). On a cluster master the provider itself goes to
the executors as ``--py-files`` (see :func:`~airflow_provider_tsb.hooks.submit_conf.configure_submit`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_provider_tsb.assets import table_asset
from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook
from airflow_provider_tsb.hooks.spark_engine import ConnectClient, SparkEngine, connect_markers_hidden
from airflow_provider_tsb.hooks.spark_job import JobRunOptions, TsbSparkJobHook, declared_job
from airflow_provider_tsb.hooks.submit_conf import configure_submit
from airflow_provider_tsb.spark.plans import DEFAULT_MAX_BARRIERS_PER_TRIGGER
from airflow_provider_tsb.topology import Job, Topology


def parse_barrier(value: Any, task_id: str) -> int | None:
    """Templated barrier -> int, or ``None`` for "every pending barrier".

    Raises:
        ValueError: not an integer (names the task and the value).
    """
    if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
        return None
    try:
        barrier = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{task_id}: barrier must be an integer barrier id, got {value!r}") from None
    if barrier < 1:
        raise ValueError(f"{task_id}: barrier ids start at 1, got {barrier}")
    return barrier


class TsbSparkJobOperator(SparkSubmitOperator):
    """Run ``job_id`` of ``topology`` for one barrier (or all pending) on the engine of ``conn_id``.

    The Spark connection's type picks the engine (:mod:`airflow_provider_tsb.hooks.spark_engine`):
    ``spark_connect`` runs the app as a Spark Connect client of a long-running server (one warm
    Spark for every job, no JVM start per barrier); ``spark`` runs it with ``spark-submit``, a
    driver of its own.

    :param topology: the topology declared in the DAG file.
    :param job_id: the job to run.
    :param barrier: barrier id (templated; e.g. the barrier task's XCom). ``None`` runs every
        pending barrier in batch mode (the last one committed before the app exits).
    :param mode: ``batch`` or ``streaming``: a long-running Structured Streaming query whose
        micro-batches are barriers. It stops on its own once it has committed a final barrier
        (FLIP-147 end of input, see :class:`~airflow_provider_tsb.operators.barrier.TsbBarrierEmitterOperator`)
        generated since the DAG run started; a retry resumes from the query's checkpoint.
        Bound it with ``execution_timeout`` like any long-running task.
    :param idle_timeout_s: streaming mode: also stop after this many seconds without a new
        barrier (``None``: only the end of input stops it).
    :param trigger_interval_s: streaming mode: longest wait, seconds, for the next barrier in
        one offset poll (the source long-polls the catalog; an idle query makes one micro-batch
        attempt per interval, and stopping waits at most this long).
    :param poll_interval_s: streaming mode: seconds between catalog look-ups while waiting: a
        ready barrier starts its micro-batch within about this delay.
    :param max_barriers_per_trigger: streaming mode, either engine: when several barriers are
        ready (the job fell behind), one micro-batch takes up to this many: one Spark job per
        ``append`` sink writes all their outputs, and each barrier is still its own Delta commit
        (``1``: a micro-batch per barrier).
    :param tsb_conn_id: metastore connection (default ``tsb_default``).
    :param heartbeat_interval_s: seconds between liveness heartbeats while the app runs.
    :param storage_conn_id: Airflow connection (``aws``, ``wasb``/``adls``,
        ``google_cloud_platform``) with the credentials of tables at object-store locations,
        for delta-rs here and in the job's driver (see :class:`TsbSparkJobHook`).
    :param ship_package: add the provider's zip to ``--py-files`` (executors have nothing
        installed). ``None``: the Spark connection's ``tsb-ship-package`` extra, else for every
        master but ``local[...]``.
    :param kwargs: passed to ``SparkSubmitOperator`` (``conn_id``, ...); ``conf`` updates the
        job's declared conf, which updates the Spark connection's ``conf`` extra.

    Returns (XCom) ``{"barriers": [n, ...], "versions": {sink: {barrier: version}}}``.

    Raises:
        BarrierNotReadyError: an input is not WRITTEN at the barrier (names it and its barrier).
        CommitMissingError: the app succeeded but left no commit for a sink and barrier.
        DoubleWriterError, CycleError: registration conflicts with another registered job.
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "barrier")
    ui_color = "#e6f1f2"

    def __init__(
        self,
        *,
        topology: Topology,
        job_id: str,
        barrier: int | str | None = None,
        mode: str = "batch",
        idle_timeout_s: float | None = None,
        trigger_interval_s: float = 1.0,
        poll_interval_s: float = 0.05,
        max_barriers_per_trigger: int = DEFAULT_MAX_BARRIERS_PER_TRIGGER,
        tsb_conn_id: str = TsbMetastoreHook.default_conn_name,
        heartbeat_interval_s: float = 10.0,
        conn_id: str = "spark_default",
        ship_package: bool | None = None,
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        job = declared_job(topology, job_id)
        if mode not in ("batch", "streaming"):
            raise ValueError(f"job {job_id!r}: mode must be 'batch' or 'streaming', got {mode!r}")
        kwargs.setdefault("task_id", job_id)
        kwargs.setdefault("name", f"tsb-{topology.name}-{job_id}")
        outlets = list(kwargs.pop("outlets", None) or []) + [table_asset(topology, s) for s in job.sinks]
        inlets = list(kwargs.pop("inlets", None) or []) + [table_asset(topology, s) for s in job.sources]
        conf = {**job.conf, **(kwargs.pop("conf", None) or {})}
        super().__init__(
            application=resolve_application(job.application),
            conn_id=conn_id,
            conf=conf,
            outlets=outlets,
            inlets=inlets,
            **kwargs,
        )
        self.topology = topology
        self.job_id = job_id
        self.barrier = barrier
        self.mode = mode
        self.idle_timeout_s = idle_timeout_s
        self.trigger_interval_s = trigger_interval_s
        self.poll_interval_s = poll_interval_s
        if isinstance(max_barriers_per_trigger, bool) or not isinstance(max_barriers_per_trigger, int) \
                or max_barriers_per_trigger < 1:
            raise ValueError(
                f"task {kwargs.get('task_id')!r}: max_barriers_per_trigger must be an integer >= 1 (1: a micro-batch "
                f"per barrier), got {max_barriers_per_trigger!r}"
            )
        self.max_barriers_per_trigger = max_barriers_per_trigger
        self.tsb_conn_id = tsb_conn_id
        self.heartbeat_interval_s = heartbeat_interval_s
        self.ship_package = ship_package
        self.storage_conn_id = storage_conn_id
        self._job_hook: TsbSparkJobHook | None = None
        self._lineage: dict[str, Any] = {}
        self._connect_client: ConnectClient | None = None
        self._submitting = False

    @property
    def job(self) -> Job:
        """The job's declaration in the topology."""
        return self.topology.jobs[self.job_id]

    @property
    def job_hook(self) -> TsbSparkJobHook:
        """The hook holding the run protocol (built on first use, from the operator's parameters)."""
        if self._job_hook is None:
            options = JobRunOptions(
                mode=self.mode, idle_timeout_s=self.idle_timeout_s, trigger_interval_s=self.trigger_interval_s,
                poll_interval_s=self.poll_interval_s, heartbeat_interval_s=self.heartbeat_interval_s,
                max_barriers_per_trigger=self.max_barriers_per_trigger,
            )
            self._job_hook = TsbSparkJobHook(self.topology, self.job_id, options, tsb_conn_id=self.tsb_conn_id,
                                             storage_conn_id=self.storage_conn_id)
        return self._job_hook

    def execute(self, context: Any) -> dict[str, Any]:
        """Run the job's protocol on the connection's engine; the XCom of :meth:`JobRun.to_xcom`."""
        hook = self.job_hook
        barrier = parse_barrier(self.barrier, self.task_id)
        engine = SparkEngine.from_connection(self._conn_id)
        if engine.kind == "connect":
            self._connect_client = ConnectClient(
                self.application, engine, conf=self.conf or {}, job_id=self.job_id, logger=self.log
            )
            runner: Any = self._connect_client
        else:
            runner = functools.partial(self._spark_submit, context)
        try:
            run = hook.run(
                barrier,
                runner,
                run_start_ms=self.stretch_start_ms(context),
                env_vars=self.env_vars,
            )
        finally:
            self._lineage = dict(hook.lineage)
        if barrier is None and not run.barriers and self.mode == "batch":
            self.log.warning("%s", self.nothing_processed_message(hook.get_conn()))
        hook.emit_asset_events(context.get("outlet_events") if hasattr(context, "get") else None, run)
        return run.to_xcom()

    def stretch_start_ms(self, context: Any) -> int | None:
        """When this DAG run's stretch of the stream began (epoch ms): a streaming job stops at
        the first final barrier generated since (FLIP-147 end of input).

        It is the generation time of the run's first barrier (the emitter's run keys are
        ``<dag_id>/<run_id>#<n>``), which clearing the job or the run does not move, so a
        cleared job resumes from its checkpoint and still ends at the stretch's final barrier,
        even one generated before it catches up. Before the run has a barrier: the run's start.
        """
        run = context.get("dag_run") if hasattr(context, "get") else None
        if self.mode == "streaming" and run is not None and getattr(run, "run_id", None):
            first = self.job_hook.get_conn().barriers.first_of_run(self.topology.name, f"{run.dag_id}/{run.run_id}#")
            if first is not None:
                return min(first.created_at_ms, _run_start_ms(context) or first.created_at_ms)
        return _run_start_ms(context)

    def nothing_processed_message(self, store: Any) -> str:
        """Why a run without a barrier processed nothing, and how to give it one.

        ``barrier`` renders to ``None`` when the barrier task's XCom is missing, e.g. under
        ``airflow tasks test <dag> <job>``, which runs this task alone; the run then processes the
        barriers pending for the job, and there may be none.
        """
        newest = store.barriers.latest(self.topology.name)
        pending = (
            f"the newest barrier of topology {self.topology.name!r} is {newest.barrier}, already processed or "
            "not WRITTEN in every source of the job yet" if newest is not None
            else f"topology {self.topology.name!r} has no barrier yet"
        )
        return (
            f"job {self.job_id!r}: no barrier was given (barrier={self.barrier!r}, e.g. `airflow tasks test` "
            f"without the DAG's barrier task) and none is pending ({pending}): nothing was processed. Run the "
            f"DAG's barrier task first, or generate one with `tsb barrier create {self.topology.name} --dags PATH` "
            f"and run it with `tsb job run {self.job_id} --barrier N --dags PATH`"
        )

    def on_kill(self) -> None:
        """Stop the job's app: its Spark Connect client process, or ``spark-submit``."""
        if self._connect_client is not None:
            self._connect_client.kill()
            return
        super().on_kill()

    def _get_hook(self) -> SparkSubmitHook:
        """Airflow's ``SparkSubmitHook`` with the Spark connection's conf under the job's and, on a
        cluster, the provider in ``--py-files`` (:func:`configure_submit`)."""
        return configure_submit(super()._get_hook(), self._conn_id, ship_package=self.ship_package,
                                write_class_data=self._submitting)

    def _spark_submit(self, context: Any, application_args: list[str], env: dict[str, str]) -> None:
        """``SparkSubmitOperator.execute`` with the app's command line and environment."""
        self.application_args = application_args
        self.env_vars = env
        self._submitting = True
        try:
            with connect_markers_hidden():  # the driver is never a Spark Connect client
                super().execute(context)
        finally:
            self._submitting = False

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage inputs (with the Delta versions read) and outputs (versions written).

        Used when ``apache-airflow-providers-openlineage`` is installed (Airflow OpenLineage docs,
        "Implementing OpenLineage in Operators").
        """
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset
        from openlineage.client.facet_v2 import dataset_version_dataset

        def dataset(table: str, version: int | None) -> Dataset:
            facets = {}
            if version is not None:
                facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(version))
            location = self.topology.location(table)
            if "://" in location:
                namespace, name = location.split("://", 1)[0], location
            else:
                namespace, name = "file", os.path.abspath(location)
            return Dataset(namespace=namespace, name=name, facets=facets)

        inputs = [dataset(t, self._lineage.get("inputs", {}).get(t)) for t in self.job.sources]
        outputs = [dataset(t, self._lineage.get("outputs", {}).get(t)) for t in self.job.sinks]
        return OperatorLineage(inputs=inputs, outputs=outputs)


def _run_start_ms(context: Any) -> int | None:
    """Start of the DAG run (epoch ms): a streaming job stops at a final barrier generated since."""
    run = context.get("dag_run") if hasattr(context, "get") else None
    start = getattr(run, "start_date", None) or getattr(run, "run_after", None)
    return int(start.timestamp() * 1000) if start is not None else None


def resolve_application(application: str) -> str:
    """An application path: absolute, or relative to ``$TSB_SPARK_APPS`` / the working directory."""
    if os.path.isabs(application) or "://" in application:
        return application
    base = os.environ.get("TSB_SPARK_APPS")
    if base:
        return os.path.join(base, application)
    return os.path.abspath(application)
