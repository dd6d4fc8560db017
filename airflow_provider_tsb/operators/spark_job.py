"""Run one ETL job of a topology for one barrier: :class:`TsbSparkJobOperator`.

A thin :class:`~airflow.providers.apache.spark.operators.spark_submit.SparkSubmitOperator`
subclass. Before ``spark-submit`` it registers the job (atomic cycle and double-writer check,
FLIP-276 ``/register/source`` and ``/register/sink``) and refuses to start when an input is not
WRITTEN at the barrier. It passes the barrier and the input version vector to the app. After
the app exits it checks the sink commits in the Delta log (the durable truth for WRITTEN),
records WRITTEN, versions and timings in the metastore, and emits one asset event per sink
with ``extra={"barrier": n, "version": v}``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_provider_tsb.assets import table_asset
from airflow_provider_tsb.exceptions import BarrierNotReadyError, TsbError, UnknownJobError
from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook
from airflow_provider_tsb.metastore.store import MetaStore, now_ms
from airflow_provider_tsb.topology import Job, Table, Topology

#: Spark settings for small local runs; any key the user sets wins
LOCAL_SPARK_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "1g",
}


class CommitMissingError(TsbError):
    """The app exited successfully but a sink has no Delta commit tagged with the barrier."""


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
    """Run ``job_id`` of ``topology`` with ``spark-submit`` for one barrier (or all pending).

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
    :param tsb_conn_id: metastore connection (default ``tsb_default``).
    :param heartbeat_interval_s: seconds between liveness heartbeats while the app runs.
    :param kwargs: passed to ``SparkSubmitOperator`` (``conn_id``, ``conf``, ...).

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
        tsb_conn_id: str = TsbMetastoreHook.default_conn_name,
        heartbeat_interval_s: float = 10.0,
        conn_id: str = "spark_default",
        **kwargs: Any,
    ) -> None:
        if job_id not in topology.jobs:
            raise UnknownJobError(
                f"job {job_id!r} is not declared in topology {topology.name!r}; "
                f"declared jobs: {', '.join(sorted(topology.jobs)) or '(none)'}"
            )
        if mode not in ("batch", "streaming"):
            raise ValueError(f"job {job_id!r}: mode must be 'batch' or 'streaming', got {mode!r}")
        job = topology.jobs[job_id]
        kwargs.setdefault("task_id", job_id)
        kwargs.setdefault("name", f"tsb-{topology.name}-{job_id}")
        outlets = list(kwargs.pop("outlets", None) or []) + [table_asset(topology, s) for s in job.sinks]
        inlets = list(kwargs.pop("inlets", None) or []) + [table_asset(topology, s) for s in job.sources]
        conf = {**LOCAL_SPARK_CONF, **job.conf, **(kwargs.pop("conf", None) or {})}
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
        self.tsb_conn_id = tsb_conn_id
        self.heartbeat_interval_s = heartbeat_interval_s
        self._lineage: dict[str, Any] = {}

    # ------------------------------------------------------------------ helpers (logic in the hook/store)
    @property
    def job(self) -> Job:
        return self.topology.jobs[self.job_id]

    def _job_tables(self) -> dict[str, Table]:
        return {name: self.topology.tables[name] for name in (*self.job.sources, *self.job.sinks)}

    def check_inputs(self, store: MetaStore, barrier: int) -> dict[str, int]:
        """Input version vector of ``barrier``: {source table: Delta version}.

        Raises:
            BarrierNotReadyError: an input is not WRITTEN at ``barrier``.
        """
        vector: dict[str, int] = {}
        problems = []
        for source in self.job.sources:
            state = store.table_state(source, barrier)
            if state is not None and state.state == "WRITTEN" and state.version is not None:
                vector[source] = state.version
                continue
            newest = store.newest_written(source)
            at = f"barrier {newest.barrier_id}" if newest else "no barrier yet"
            extra = " (PROCESSED, not committed)" if state is not None else ""
            problems.append(f"input {source!r} is at {at}{extra}")
        if problems:
            raise BarrierNotReadyError(
                f"job {self.job_id!r} cannot process barrier {barrier}: " + "; ".join(problems)
                + f". Run the upstream jobs for barrier {barrier} first (or wait with BarrierCommittedSensor)."
            )
        return vector

    def build_application_args(
        self, barrier: int | None, vector: dict[str, int] | None, final_since_ms: int | None = None
    ) -> list[str]:
        """The app's command line: mode, catalog, barrier bound and table locations.

        ``final_since_ms`` (streaming): the DAG run's start, epoch ms; the app stops after a
        final barrier generated since then.
        """
        args = [*self.job.application_args, "--mode", self.mode, "--metastore-url", "env:TSB_METASTORE_URL"]
        if barrier is not None:
            args += ["--until-barrier", str(barrier)]
        if self.mode == "streaming":
            args += ["--trigger-interval", str(self.trigger_interval_s), "--poll-interval", str(self.poll_interval_s)]
            if self.idle_timeout_s is not None:
                args += ["--idle-timeout", str(self.idle_timeout_s)]
            if final_since_ms is not None:
                args += ["--final-since", str(final_since_ms)]
        for name, table in sorted(self._job_tables().items()):
            args += ["--table", f"{name}={table.resolved_location(self.topology.warehouse)}"]
        return args

    def build_env(self, url: str, barrier: int | None, vector: dict[str, int] | None) -> dict[str, str]:
        """Environment of spark-submit: metastore URL (never on the command line), Python, PATH."""
        bin_dir = os.path.dirname(sys.executable)
        env = {
            **(self.env_vars or {}),
            "TSB_METASTORE_URL": url,
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "TSB_JOB_ID": self.job_id,
        }
        if barrier is not None and vector is not None:
            env["TSB_BARRIER_INPUTS"] = json.dumps({str(barrier): vector}, sort_keys=True)
        return env

    # ------------------------------------------------------------------ execute
    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_provider_tsb.delta.barriers import versions_of_barriers

        hook = TsbMetastoreHook(self.tsb_conn_id)
        store = hook.get_conn()
        store.register_job(self.topology.name, self.job, self._job_tables(), warehouse=self.topology.warehouse)
        barrier = parse_barrier(self.barrier, self.task_id)
        vector = self.check_inputs(store, barrier) if barrier is not None else None
        before = {sink: store.newest_written(sink) for sink in self.job.sinks}
        locations = {sink: self.topology.location(sink) for sink in self.job.sinks}
        already = barrier is not None and all(
            (b := before[s]) is not None and b.barrier_id >= barrier for s in self.job.sinks
        )
        self._lineage = {"inputs": vector or {}, "outputs": {}}
        started = now_ms()
        if already:
            self.log.info("job %s: barrier %s is WRITTEN in all sinks already; nothing to run", self.job_id, barrier)
        else:
            self.application_args = self.build_application_args(barrier, vector, _run_start_ms(context))
            self.env_vars = self.build_env(hook.get_uri(), barrier, vector)
            self.log.info("job %s: barrier %s, input versions %s", self.job_id, barrier, vector)
            if barrier is not None:
                store.record_job_barrier(self.job_id, barrier, status="running", started_at_ms=started)
            store.heartbeat(self.job_id, status="running", barrier_id=barrier)
            stop = threading.Event()
            beat = threading.Thread(target=self._heartbeat_loop, args=(store, barrier, stop), daemon=True)
            beat.start()
            try:
                super().execute(context)
            except BaseException as exc:
                store.heartbeat(self.job_id, status="failed", barrier_id=barrier, message=str(exc)[:2000])
                if barrier is not None:
                    store.record_job_barrier(self.job_id, barrier, status="failed", finished_at_ms=now_ms())
                raise
            finally:
                stop.set()
                beat.join(timeout=5)
        # The Delta log is the durable truth: index every barrier the app committed.
        committed: dict[str, dict[int, int]] = {}
        for sink in self.job.sinks:
            if already:
                version = store.version_at(sink, barrier)
                committed[sink] = {barrier: version} if version is not None else {}
                continue
            after = before[sink].barrier_id if before[sink] is not None else None
            found = versions_of_barriers(locations[sink], after)
            if barrier is not None:
                found = {b: v for b, v in found.items() if b <= barrier}
                if barrier not in found and store.version_at(sink, barrier) is None:
                    raise CommitMissingError(
                        f"job {self.job_id!r} exited successfully but table {sink!r} at {locations[sink]!r} has no "
                        f"Delta commit tagged with barrier {barrier}; check the application's sink declaration"
                    )
            for b, v in sorted(found.items()):
                store.record_written(sink, b, v, self.job_id)
            committed[sink] = found
        barriers = sorted({b for found in committed.values() for b in found} | ({barrier} if barrier else set()))
        # the app recorded each barrier's timing itself; only barriers it could not record are added
        recorded = store.job_barrier_statuses(self.job_id, barriers)
        finished = now_ms()
        for b in barriers:
            if recorded.get(b) != "succeeded":
                store.record_job_barrier(self.job_id, b, status="succeeded", finished_at_ms=finished)
        last = barriers[-1] if barriers else None
        store.heartbeat(self.job_id, status="succeeded", barrier_id=last)
        self._emit_asset_events(context, store, committed, last)
        self._lineage["outputs"] = {s: store.version_at(s, last) for s in self.job.sinks} if last else {}
        return {
            "barriers": barriers,
            "versions": {s: {str(b): v for b, v in sorted(f.items())} for s, f in committed.items()},
        }

    def _heartbeat_loop(self, store: MetaStore, barrier: int | None, stop: threading.Event) -> None:
        while not stop.wait(self.heartbeat_interval_s):
            try:
                store.heartbeat(self.job_id, status="running", barrier_id=barrier)
            except Exception as exc:  # a missed heartbeat must not kill the job
                self.log.warning("job %s: heartbeat failed: %s", self.job_id, exc)

    def _emit_asset_events(
        self, context: Any, store: MetaStore, committed: dict[str, dict[int, int]], last: int | None
    ) -> None:
        events = context.get("outlet_events") if hasattr(context, "get") else None
        if events is None or last is None:
            return
        for sink in self.job.sinks:
            version = store.version_at(sink, last)
            asset = table_asset(self.topology, sink)
            extra = {"barrier": last, "version": version, "table": sink, "job": self.job_id}
            if len(committed.get(sink, {})) > 1:
                extra["barriers"] = {str(b): v for b, v in sorted(committed[sink].items())}
            events[asset].extra = extra

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
