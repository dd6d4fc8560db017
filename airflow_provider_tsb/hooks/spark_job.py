"""The run protocol of one ETL job for one barrier: :class:`TsbSparkJobHook`.

:class:`~airflow_provider_tsb.operators.spark_job.TsbSparkJobOperator` holds the parameters,
the templating and the call; this hook holds the logic, as in Airflow's Spark provider
(``SparkSqlOperator.execute`` is ``self._hook.run_query()``). One :meth:`TsbSparkJobHook.run`:

1. registers the job in the metastore (atomic cycle and double-writer check, FLIP-276
   ``/register/source`` and ``/register/sink``);
2. checks that every input is WRITTEN at the barrier: the input version vector;
3. skips the app when every sink already holds the barrier (a retry of a finished task);
4. calls ``submit`` (the operator's own ``spark-submit``, so Airflow's ``SparkSubmitHook``
   keeps every deployment mode) with the app's command line and environment, heartbeating
   the job in the metastore while it runs;
5. reconciles: every barrier committed in the sinks' Delta logs (the durable truth for
   WRITTEN: commits tagged ``tsb.barrier`` in their ``commitInfo``, Delta protocol) is
   recorded WRITTEN with its version;
6. records the job's timing per barrier and its final heartbeat;
7. gives the asset-event extras, ``{"barrier": n, "version": v, ...}`` per sink (Airflow docs,
   "Asset events": ``outlet_events[asset].extra``), through :meth:`TsbSparkJobHook.emit_asset_events`.

What ``spark-submit`` gets beyond the app's command line is
:mod:`airflow_provider_tsb.hooks.submit_conf`'s.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_tsb.assets import barrier_event_extra, table_asset
from airflow_provider_tsb.exceptions import BarrierNotReadyError, CommitMissingError, UnknownJobError
from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook, use_storage_connection
from airflow_provider_tsb.metastore.store import BarrierState, JobStatus, MetaStore, now_ms
from airflow_provider_tsb.spark.plans import DEFAULT_MAX_BARRIERS_PER_TRIGGER
from airflow_provider_tsb.topology import Job, Table, Topology

#: ``submit(application_args, env)``: runs the app with ``spark-submit`` and returns when it has
#: exited successfully; raises otherwise (the operator passes its ``SparkSubmitOperator.execute``)
Submit = Callable[[list[str], dict[str, str]], None]


@dataclass(frozen=True)
class JobRun:
    """What one :meth:`TsbSparkJobHook.run` found and committed.

    Attributes:
        barrier: the barrier asked for, or ``None`` for every pending barrier.
        inputs: the input version vector ``{source table: Delta version}`` of ``barrier``
            (empty when ``barrier`` is ``None``).
        committed: ``{sink: {barrier: Delta version}}`` recorded WRITTEN by this run.
        barriers: every barrier the run covered, ascending.
        outputs: ``{sink: Delta version}`` at the last of ``barriers`` (empty without one).
    """

    barrier: int | None
    inputs: dict[str, int]
    committed: dict[str, dict[int, int]]
    barriers: list[int]
    outputs: dict[str, int | None]

    @property
    def last(self) -> int | None:
        """The newest barrier of the run, or ``None``."""
        return self.barriers[-1] if self.barriers else None

    def to_xcom(self) -> dict[str, Any]:
        """``{"barriers": [n, ...], "versions": {sink: {"n": version}}}`` (JSON keys are strings)."""
        return {
            "barriers": self.barriers,
            "versions": {s: {str(b): v for b, v in sorted(f.items())} for s, f in self.committed.items()},
        }


def declared_job(topology: Topology, job_id: str) -> Job:
    """The declaration of ``job_id`` in ``topology``.

    Raises:
        UnknownJobError: the job is not declared (the message lists the declared jobs).
    """
    if job_id not in topology.jobs:
        raise UnknownJobError(
            f"job {job_id!r} is not declared in topology {topology.name!r}; "
            f"declared jobs: {', '.join(sorted(topology.jobs)) or '(none)'}"
        )
    return topology.jobs[job_id]


@dataclass(frozen=True)
class JobRunOptions:
    """How a job's app runs (the app's command line; see ``TsbSparkJobOperator`` for each).

    Attributes:
        mode: ``batch`` or ``streaming`` (``--mode``).
        idle_timeout_s: streaming: stop after this many seconds without a new barrier.
        trigger_interval_s: streaming: longest wait, seconds, for a barrier in one offset poll.
        poll_interval_s: streaming: seconds between catalog look-ups while waiting.
        max_barriers_per_trigger: streaming, either engine: ready barriers one micro-batch
            takes at most (``--max-barriers-per-trigger``).
        heartbeat_interval_s: seconds between liveness heartbeats while the app runs.
    """

    mode: str = "batch"
    idle_timeout_s: float | None = None
    trigger_interval_s: float = 1.0
    poll_interval_s: float = 0.05
    heartbeat_interval_s: float = 10.0
    max_barriers_per_trigger: int = DEFAULT_MAX_BARRIERS_PER_TRIGGER


class TsbSparkJobHook(BaseHook):
    """Run ``job_id`` of ``topology`` for one barrier, or every pending one (see module doc).

    :param topology: the topology declared in the DAG file.
    :param job_id: the job to run.
    :param options: how the app runs (:class:`JobRunOptions`).
    :param tsb_conn_id: metastore connection (default ``tsb_default``).
    :param storage_conn_id: Airflow connection (``aws``, ``wasb``/``adls``,
        ``google_cloud_platform``) whose credentials open tables at object-store locations,
        here (reconciling the commits) and in the job's driver (``$TSB_STORAGE_OPTIONS``); see
        :mod:`airflow_provider_tsb.delta.storage`. ``None``: none (local tables, or credentials
        from the environment).

    Raises:
        UnknownJobError: ``job_id`` is not declared in ``topology``.
    """

    conn_name_attr = "tsb_conn_id"
    default_conn_name = TsbMetastoreHook.default_conn_name
    hook_name = "TSB Spark job"

    def __init__(
        self,
        topology: Topology,
        job_id: str,
        options: JobRunOptions | None = None,
        *,
        tsb_conn_id: str = default_conn_name,
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        declared_job(topology, job_id)
        self.topology = topology
        self.job_id = job_id
        self.options = options or JobRunOptions()
        self.tsb_conn_id = tsb_conn_id
        self.storage_conn_id = storage_conn_id
        #: OpenLineage of the latest run: ``{"inputs": {table: version}, "outputs": {table: version}}``
        self.lineage: dict[str, dict[str, int | None]] = {}

    @property
    def job(self) -> Job:
        """The job's declaration."""
        return self.topology.jobs[self.job_id]

    def job_tables(self) -> dict[str, Table]:
        """``{table name: Table}`` of the job's sources and sinks."""
        return {name: self.topology.tables[name] for name in (*self.job.sources, *self.job.sinks)}

    def get_conn(self) -> MetaStore:
        """The metastore of ``tsb_conn_id`` (see :class:`TsbMetastoreHook`)."""
        return TsbMetastoreHook(self.tsb_conn_id).get_conn()

    def storage_options(self) -> dict[str, str]:
        """delta-rs storage options of ``storage_conn_id`` (``{}`` without one)."""
        if not self.storage_conn_id:
            return {}
        from airflow_provider_tsb.delta.storage import storage_options_from_connection

        return storage_options_from_connection(self.get_connection(self.storage_conn_id))

    # ------------------------------------------------------------------ the app's command line
    def check_inputs(self, store: MetaStore, barrier: int) -> dict[str, int]:
        """Input version vector of ``barrier``: ``{source table: Delta version}``.

        Raises:
            BarrierNotReadyError: an input is not WRITTEN at ``barrier`` (names each such input
                and the barrier it is at).
        """
        vector: dict[str, int] = {}
        problems = []
        for source in self.job.sources:
            state = store.table_states.get(source, barrier)
            if state is not None and state.state == BarrierState.WRITTEN and state.version is not None:
                vector[source] = state.version
                continue
            newest = store.table_states.newest_written(source)
            at = f"barrier {newest.barrier}" if newest else "no barrier yet"
            extra = " (PROCESSED, not committed)" if state is not None else ""
            problems.append(f"input {source!r} is at {at}{extra}")
        if problems:
            raise BarrierNotReadyError(
                f"job {self.job_id!r} cannot process barrier {barrier}: " + "; ".join(problems)
                + f". Run the upstream jobs for barrier {barrier} first (or wait with TsbBarrierCommittedSensor)."
            )
        return vector

    def build_application_args(
        self, barrier: int | None, vector: Mapping[str, int] | None, final_since_ms: int | None = None
    ) -> list[str]:
        """The app's command line: mode, catalog, barrier bound and table locations.

        ``final_since_ms`` (streaming): the DAG run's start, epoch ms; the app stops after a
        final barrier generated since then. Options: see
        :func:`airflow_provider_tsb.spark.cli.build_arg_parser`.
        """
        opts = self.options
        args = [*self.job.application_args, "--mode", opts.mode, "--metastore-url", "env:TSB_METASTORE_URL"]
        if barrier is not None:
            args += ["--until-barrier", str(barrier)]
        if opts.mode == "streaming":
            args += ["--trigger-interval", str(opts.trigger_interval_s), "--poll-interval", str(opts.poll_interval_s),
                     "--max-barriers-per-trigger", str(opts.max_barriers_per_trigger)]
            if opts.idle_timeout_s is not None:
                args += ["--idle-timeout", str(opts.idle_timeout_s)]
            if final_since_ms is not None:
                args += ["--final-since", str(final_since_ms)]
        for name, table in sorted(self.job_tables().items()):
            args += ["--table", f"{name}={table.resolved_location(self.topology.warehouse)}"]
        return args

    def build_env(
        self, url: str, barrier: int | None, vector: Mapping[str, int] | None,
        base: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Environment of spark-submit: ``base`` (the operator's ``env_vars``) plus the metastore
        URL and the storage options (secrets: never on the command line), the Python
        interpreter, ``PATH`` and the job id."""
        bin_dir = os.path.dirname(sys.executable)
        env = {
            **(base or {}),
            "TSB_METASTORE_URL": url,
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "TSB_JOB_ID": self.job_id,
        }
        storage = self.storage_options()
        if storage:
            from airflow_provider_tsb.delta.storage import ENV_VAR

            env[ENV_VAR] = json.dumps(storage, sort_keys=True)
        if barrier is not None and vector is not None:
            env["TSB_BARRIER_INPUTS"] = json.dumps({str(barrier): dict(vector)}, sort_keys=True)
        return env

    # ------------------------------------------------------------------ the run
    def run(
        self,
        barrier: int | None,
        submit: Submit,
        *,
        run_start_ms: int | None = None,
        env_vars: Mapping[str, str] | None = None,
    ) -> JobRun:
        """Run the job for ``barrier`` (``None``: every pending barrier) through ``submit``.

        Args:
            barrier: barrier id, or ``None``.
            submit: runs ``spark-submit`` with ``(application_args, env)`` (see :data:`Submit`).
            run_start_ms: streaming: the DAG run's start, epoch ms (``--final-since``).
            env_vars: the operator's own environment for spark-submit (``build_env``'s base).

        Raises:
            BarrierNotReadyError: an input is not WRITTEN at the barrier.
            CommitMissingError: the app succeeded but left no commit for a sink and barrier.
            DoubleWriterError, CycleError: registration conflicts with another registered job.
            RevisionPendingError: a revision over the job's sinks is pending (before spark-submit).
        """
        store = self.get_conn()
        use_storage_connection(self.storage_conn_id)  # this process reads the sinks' logs (reconcile)
        store.registry.register_job(self.topology.name, self.job, self.job_tables(), warehouse=self.topology.warehouse)
        store.revisions.check_none_pending(self.job_id)
        self.lineage = {"inputs": {}, "outputs": {}}
        vector = self.check_inputs(store, barrier) if barrier is not None else None
        self.lineage["inputs"] = dict(vector or {})
        before = {sink: store.table_states.newest_written(sink) for sink in self.job.sinks}
        already = barrier is not None and all(
            (b := before[s]) is not None and b.barrier >= barrier for s in self.job.sinks
        )
        if already:
            self.log.info("job %s: barrier %s is WRITTEN in all sinks already; nothing to run", self.job_id, barrier)
        else:
            args = self.build_application_args(barrier, vector, run_start_ms)
            env = self.build_env(TsbMetastoreHook(self.tsb_conn_id).get_uri(), barrier, vector, env_vars)
            self.log.info("job %s: barrier %s, input versions %s", self.job_id, barrier, vector)
            self._submit_with_heartbeats(store, barrier, lambda: submit(args, env))
        heads = {s: (b.barrier if b is not None else None) for s, b in before.items()}
        committed = self._reconcile(store, barrier, heads, already=already)
        barriers = sorted({b for found in committed.values() for b in found} | ({barrier} if barrier else set()))
        # the app recorded each barrier's timing itself; only barriers it could not record are added
        recorded = store.job_runs.job_barrier_statuses(self.job_id, barriers)
        finished = now_ms()
        for b in barriers:
            if recorded.get(b) != JobStatus.SUCCEEDED:
                store.job_runs.record_job_barrier(self.job_id, b, status=JobStatus.SUCCEEDED, finished_at_ms=finished)
        last = barriers[-1] if barriers else None
        store.job_runs.heartbeat(self.job_id, status=JobStatus.SUCCEEDED, barrier=last)
        outputs = {s: store.table_states.version_at(s, last) for s in self.job.sinks} if last else {}
        self.lineage["outputs"] = dict(outputs)
        return JobRun(barrier=barrier, inputs=dict(vector or {}), committed=committed, barriers=barriers,
                      outputs=outputs)

    def _reconcile(
        self, store: MetaStore, barrier: int | None, heads: Mapping[str, int | None], *, already: bool
    ) -> dict[str, dict[int, int]]:
        """Record WRITTEN for every barrier the app committed: ``{sink: {barrier: version}}``.

        The Delta log is the durable truth: each sink's log is walked from its newest WRITTEN
        barrier before the run (``heads``). With ``already`` (nothing ran), the recorded version.

        Raises:
            CommitMissingError: ``barrier`` has no commit in a sink after a successful app.
        """
        from airflow_provider_tsb.delta.barriers import versions_of_barriers

        committed: dict[str, dict[int, int]] = {}
        for sink in self.job.sinks:
            if already and barrier is not None:
                version = store.table_states.version_at(sink, barrier)
                committed[sink] = {barrier: version} if version is not None else {}
                continue
            location = self.topology.location(sink)
            found = versions_of_barriers(location, heads[sink])
            if barrier is not None:
                found = {b: v for b, v in found.items() if b <= barrier}
                if barrier not in found and store.table_states.version_at(sink, barrier) is None:
                    raise CommitMissingError(
                        f"job {self.job_id!r} exited successfully but table {sink!r} at {location!r} has no "
                        f"Delta commit tagged with barrier {barrier}; check the application's sink declaration"
                    )
            for b, v in sorted(found.items()):
                store.table_states.record_written(sink, b, v, self.job_id)
            committed[sink] = found
        return committed

    def emit_asset_events(self, outlet_events: Any, run: JobRun) -> None:
        """Set ``outlet_events[asset].extra`` of each sink's asset to the run's newest barrier.

        ``extra``: :func:`~airflow_provider_tsb.assets.barrier_event_extra` (barrier, barrier
        timestamp, Delta version, commit state, lag seconds, TSB history link), plus
        ``"barriers": {"n": version}`` when the run committed several. Nothing without a barrier
        or without ``outlet_events`` (a context outside Airflow).
        """
        last = run.last
        if outlet_events is None or last is None:
            return
        store = self.get_conn()
        for sink in self.job.sinks:
            extra = barrier_event_extra(store, self.topology, sink, last, job_id=self.job_id)
            if extra["version"] is None:
                extra["version"] = run.outputs.get(sink)
            if len(run.committed.get(sink, {})) > 1:
                extra["barriers"] = {str(b): v for b, v in sorted(run.committed[sink].items())}
            outlet_events[table_asset(self.topology, sink)].extra = extra

    def _submit_with_heartbeats(self, store: MetaStore, barrier: int | None, submit: Callable[[], None]) -> None:
        """Call ``submit`` with the job marked running and heartbeating; a failure is recorded."""
        if barrier is not None:
            store.job_runs.record_job_barrier(self.job_id, barrier, status=JobStatus.RUNNING, started_at_ms=now_ms())
        store.job_runs.heartbeat(self.job_id, status=JobStatus.RUNNING, barrier=barrier)
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat_loop, args=(store, barrier, stop), daemon=True)
        beat.start()
        try:
            submit()
        except BaseException as exc:
            store.job_runs.heartbeat(self.job_id, status=JobStatus.FAILED, barrier=barrier, message=str(exc)[:2000])
            if barrier is not None:
                store.job_runs.record_job_barrier(self.job_id, barrier, status=JobStatus.FAILED,
                                                  finished_at_ms=now_ms())
            raise
        finally:
            stop.set()
            beat.join(timeout=5)

    def _heartbeat_loop(self, store: MetaStore, barrier: int | None, stop: threading.Event) -> None:
        while not stop.wait(self.options.heartbeat_interval_s):
            try:
                store.job_runs.heartbeat(self.job_id, status=JobStatus.RUNNING, barrier=barrier)
            except Exception as exc:  # a missed heartbeat must not kill the job
                self.log.warning("job %s: heartbeat failed: %s", self.job_id, exc)
