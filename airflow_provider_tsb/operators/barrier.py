"""Barrier generation operators (FLIP-276 "Timestamp Barrier", generation).

:class:`TsbBarrierOperator` generates one barrier per task run: it records the current Delta
version of every root table of the topology, with a new barrier id, in one metastore
transaction (the (barrier, offset) map that makes replay deterministic). A retried task of the
same DAG run gets the same barrier back. :class:`TsbBarrierEmitterOperator` emits barriers for
a streaming topology. Both hold parameters and templating; the logic is
:class:`~airflow_provider_tsb.hooks.barrier.TsbBarrierHook`'s.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_tsb.exceptions import StreamingJobFailedError
from airflow_provider_tsb.hooks.barrier import TsbBarrierHook
from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook
from airflow_provider_tsb.metastore.records import TsKind
from airflow_provider_tsb.topology import Topology


class TsbBarrierOperator(BaseOperator):
    """Generate the next timestamp barrier of a topology.

    :param topology: the topology (declared in the DAG file). Its tables and jobs are
        registered in the metastore first (atomic cycle and double-writer checks).
    :param ts_kind: ``system`` (barrier timestamp = now) or ``event`` (the event-time
        watermark: max of each root table's ``event_time_column`` at the recorded version).
    :param tsb_conn_id: metastore connection (default ``tsb_default``).
    :param storage_conn_id: Airflow connection of the object storage the tables live on
        (``aws``, ``wasb``/``adls``, ``google_cloud_platform``; see
        :class:`~airflow_provider_tsb.hooks.barrier.TsbBarrierHook`). ``None``: local tables, or
        ``$TSB_STORAGE_OPTIONS``.

    Returns (XCom) the barrier id, an ``int``. Raises
    :class:`~airflow_provider_tsb.hooks.barrier.RootTableError` naming the table and its location
    when a root table is missing.
    """

    template_fields: Sequence[str] = ()
    ui_color = "#f4d58d"

    def __init__(
        self,
        *,
        topology: Topology,
        ts_kind: TsKind | str = TsKind.SYSTEM,
        tsb_conn_id: str = TsbMetastoreHook.default_conn_name,
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if ts_kind not in (TsKind.SYSTEM, TsKind.EVENT):
            raise ValueError(f"{self.task_id}: ts_kind must be 'system' or 'event', got {ts_kind!r}")
        if ts_kind == TsKind.EVENT and not any(t.event_time_column for t in topology.root_tables):
            raise ValueError(
                f"{self.task_id}: ts_kind='event' needs a root table declared with event_time_column "
                f"in topology {topology.name!r}"
            )
        self.topology = topology
        self.ts_kind = ts_kind
        self.tsb_conn_id = tsb_conn_id
        self.storage_conn_id = storage_conn_id
        self._hook: TsbBarrierHook | None = None

    @property
    def hook(self) -> TsbBarrierHook:
        """The hook generating the barriers (built on first use, from the operator's parameters)."""
        if self._hook is None:
            self._hook = TsbBarrierHook(self.topology, ts_kind=self.ts_kind, tsb_conn_id=self.tsb_conn_id,
                                        storage_conn_id=self.storage_conn_id)
        return self._hook

    def execute(self, context: Any) -> int:
        """Generate the barrier of this DAG run (run key ``<dag_id>/<run_id>``); its id."""
        run = context.get("dag_run")
        return self.hook.generate(f"{run.dag_id}/{run.run_id}" if run is not None else None).barrier


class TsbBarrierEmitterOperator(TsbBarrierOperator):
    """Emit barriers every few seconds for a streaming topology, and a final one at end of input.

    Every ``interval_s`` seconds it reads the root tables' Delta versions and generates a
    barrier when one of them has a new version (no new data, no barrier). Its timestamps are
    system time or, with ``ts_kind="event"``, the event-time watermark (as
    :class:`TsbBarrierOperator`). Run it in the same DAG run as the
    :class:`~airflow_provider_tsb.operators.spark_job.TsbSparkJobOperator` tasks in
    ``mode="streaming"`` (``TsbTopologyTaskGroup(..., mode="streaming")`` renders both), which
    pick up each barrier as it appears.

    End of input (FLIP-147): when every root table's newest version is marked
    ``tsb.end_of_input`` (:func:`airflow_provider_tsb.delta.roots.mark_end_of_input`), it
    generates a *final* barrier and returns; the streaming jobs stop once they have committed
    it, and the DAG run can succeed. When ``duration_s`` or ``count`` runs out first, a final
    barrier is generated too (``final_on_stop=False`` leaves the jobs running instead).
    Root tables that do not exist yet are waited for. A retry of the task in the same DAG run
    gets the barriers of its run keys back (``<dag_id>/<run_id>#<n>``, ``...#final``).

    :param interval_s: seconds between barrier attempts (> 0; templated).
    :param duration_s: stop after this many seconds (templated).
    :param count: stop after this many barriers (``None``: only the duration or the end of
        input bound it).
    :param final_on_stop: generate a final barrier when ``duration_s``/``count`` runs out.
    :param max_in_flight: backpressure: generate a barrier only while fewer than this many
        barriers are generated but not yet COMMIT (WRITTEN in every table of the topology), like
        Flink's maximum of concurrent checkpoints. A topology that cannot keep up with
        ``interval_s`` then gets fewer, larger barriers instead of a queue that grows without
        bound, and the delay from a barrier to its COMMIT stays bounded. ``None``: no limit.
    :param job_task_ids: the streaming job tasks of the same DAG run to watch (full task ids;
        ``TsbTopologyTaskGroup`` sets them; default: every streaming
        :class:`~airflow_provider_tsb.operators.spark_job.TsbSparkJobOperator` of the DAG).
        When one of them is ``failed`` or ``upstream_failed`` (no try left) the emitter fails
        at once instead of emitting barriers that can never reach COMMIT.

    End-of-input marks committed before the DAG run started belong to an earlier run and are
    ignored.

    Returns (XCom) the list of barrier ids generated, the final one last.

    Raises:
        RootTableError: a root table exists but cannot be read
            (:class:`~airflow_provider_tsb.hooks.barrier.RootTableError`).
        StreamingJobFailedError: a watched job task failed for good (names the job, its task
            and the job's last error recorded in the metastore).
    """

    template_fields: Sequence[str] = ("interval_s", "duration_s")

    def __init__(
        self,
        *,
        interval_s: float | str = 5.0,
        duration_s: float | str = 3600.0,
        count: int | None = None,
        final_on_stop: bool = True,
        max_in_flight: int | None = 2,
        job_task_ids: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_task_ids = list(job_task_ids) if job_task_ids is not None else None
        self.interval_s = interval_s
        self.duration_s = duration_s
        if not isinstance(interval_s, str):  # templated values are checked when rendered
            self._seconds("interval_s")
        if not isinstance(duration_s, str):
            self._seconds("duration_s")
        self.interval_s = interval_s
        self.duration_s = duration_s
        self.count = count
        self.final_on_stop = final_on_stop
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"{self.task_id}: max_in_flight must be at least 1 (or None), got {max_in_flight}")
        self.max_in_flight = max_in_flight

    def _seconds(self, field_name: str) -> float:
        """A positive number of seconds from ``field_name`` (rendered template or number).

        Raises:
            ValueError: not a positive number (names the task, the field and the value).
        """
        value = getattr(self, field_name)
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = float("nan")
        if not (seconds > 0 and seconds != float("inf")):
            raise ValueError(f"{self.task_id}: {field_name} must be a positive number of seconds, got {value!r}")
        return seconds

    def execute(self, context: Any) -> list[int]:  # type: ignore[override]
        """Emit this DAG run's barriers (run keys ``<dag_id>/<run_id>#<n>``); their ids, final last."""
        run = context.get("dag_run")
        prefix = f"{run.dag_id}/{run.run_id}" if run is not None else f"emitter/{time.time()}"
        started = getattr(run, "start_date", None) if run is not None else None
        return self.hook.emit(
            prefix,
            interval_s=self._seconds("interval_s"),
            duration_s=self._seconds("duration_s"),
            count=self.count,
            final_on_stop=self.final_on_stop,
            max_in_flight=self.max_in_flight,
            since_ms=int(started.timestamp() * 1000) if started is not None else None,
            watch=self._job_watch(context),
        )

    def watched_task_ids(self) -> list[str]:
        """The job tasks this emitter watches: ``job_task_ids``, else every streaming job task of
        its DAG."""
        if self.job_task_ids is not None:
            return list(self.job_task_ids)
        from airflow_provider_tsb.operators.spark_job import TsbSparkJobOperator

        tasks = self.dag.tasks if self.has_dag() else []
        return [t.task_id for t in tasks if isinstance(t, TsbSparkJobOperator) and t.mode == "streaming"]

    def _job_watch(self, context: Any) -> Any:
        """A check the emitter calls each interval: raises :class:`StreamingJobFailedError` once a
        watched job task of this DAG run failed for good (read through the task's own
        ``get_task_states``: the Task SDK's call, no ORM). ``None`` outside a DAG run."""
        ti, run = context.get("ti"), context.get("dag_run")
        if ti is None or run is None or not hasattr(ti, "get_task_states"):
            return None
        task_ids = self.watched_task_ids()
        if not task_ids:
            return None

        def check() -> None:
            try:
                found = ti.get_task_states(dag_id=run.dag_id, task_ids=task_ids, run_ids=[run.run_id])
            except Exception as exc:  # the watch is advisory: never stop the barriers for it
                self.log.warning("cannot read the job tasks' states (%s); not watching them", exc)
                return
            states = found.get(run.run_id, found)
            failed = sorted(t for t, s in states.items() if str(s) in ("failed", "upstream_failed"))
            if failed:
                raise StreamingJobFailedError(self._describe_failures(failed, states))

        return check

    def _describe_failures(self, failed: list[str], states: dict[str, Any]) -> str:
        """The error of failed job tasks: each job with its task state and last metastore error."""
        store = self.hook.get_conn()
        by_task = {t: t.rsplit(".", 1)[-1] for t in failed}
        parts = []
        for task_id, job_id in by_task.items():
            try:
                message = store.registry.job(job_id).message if job_id in self.topology.jobs else None
            except Exception:  # the failure report must not fail itself
                message = None
            parts.append(f"job {job_id!r} (task {task_id} {states[task_id]}): {message or 'see the task log'}")
        return (
            f"streaming topology {self.topology.name!r}: " + "; ".join(parts) + ". No barrier can reach COMMIT "
            "without it, so the emitter stops; fix the job, then clear its task and this one to resume "
            "from the checkpoint."
        )
