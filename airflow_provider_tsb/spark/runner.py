"""The runner: process an app's barriers in order, exactly once (batch mode).

Per barrier ``n`` (:func:`run_barrier`):

1. asserts *alignment*: every input is read at the version of barrier ``n`` (an intermediate
   input's version must be tagged with ``n``; :class:`MisalignedInputError` otherwise);
2. reads each sink's Delta log once (:class:`~airflow_provider_tsb.delta.sink_log.SinkLog`),
   and skips the barrier if every sink already has it committed (re-reporting WRITTEN);
3. calls ``process`` with a :class:`~airflow_provider_tsb.spark.model.BarrierContext` (which
   reads ``previous`` from those logs);
4. commits each sink with :func:`airflow_provider_tsb.spark.barrier_commit.write_barrier`,
   passing its log, a :class:`~airflow_provider_tsb.spark.write_options.WriteTarget` and the
   sink's :class:`~airflow_provider_tsb.spark.write_options.WriteOptions`.

Batch and streaming mode start the same way (:func:`start_run`: the fencing token, WRITTEN
re-reported from each sink's log, the barrier the sinks are at). :func:`run_batch` then
processes the pending barriers (optionally up to ``until_barrier``) and stops, each barrier's
start record, WRITTEN reports and end record running behind the barriers' work
(:class:`~airflow_provider_tsb.spark.report_queue.ReportQueue`) under one input lease for the
run (:class:`~airflow_provider_tsb.spark.input_leases.RunLease`); streaming mode
(:mod:`airflow_provider_tsb.spark.streaming`) runs the same :func:`run_barrier` once per
micro-batch. Both produce identical tables.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame

from airflow_provider_tsb.delta.barriers import barrier_of_version
from airflow_provider_tsb.delta.log import shared_commit_reads
from airflow_provider_tsb.delta.sink_log import SinkLog
from airflow_provider_tsb.exceptions import MisalignedInputError
from airflow_provider_tsb.metastore.records import JobStatus
from airflow_provider_tsb.spark.app_run import AppRun
from airflow_provider_tsb.spark.barrier_commit import StagedAttempt, WriteResult, write_barrier
from airflow_provider_tsb.spark.barrier_group import BarrierGroup, SinkOutput
from airflow_provider_tsb.spark.catalog import BarrierCatalog, BarrierPlan
from airflow_provider_tsb.spark.input_leases import InputLease, RunLease
from airflow_provider_tsb.spark.micro_batch import MicroBatchContext
from airflow_provider_tsb.spark.model import BarrierContext, TsbApp
from airflow_provider_tsb.spark.report_queue import ReportQueue
from airflow_provider_tsb.spark.timing import barrier_timer, phase
from airflow_provider_tsb.spark.write_options import WriteTarget

log = logging.getLogger("airflow_provider_tsb.spark")


def check_alignment(run: AppRun, plan: BarrierPlan) -> None:
    """Assert every input of ``plan`` is read at the version of ``plan.barrier``.

    For a tagged (intermediate) input the version's ``tsb.barrier`` must equal the barrier
    (and the previous version's the previous barrier); root inputs carry no tags and their
    versions come from the barrier's recorded offsets. Cost: one log-file read per input.

    Raises:
        MisalignedInputError: naming the input, the version, and both barriers.
    """
    app = run.app
    missing = sorted(set(app.sources) - set(plan.inputs))
    if missing:
        raise MisalignedInputError(f"job {app.job_id}: barrier {plan.barrier} has no version for inputs {missing}")
    checks = [(plan.barrier, plan.inputs)]
    if plan.previous_barrier is not None:
        checks.append((plan.previous_barrier, plan.previous_inputs))
    for barrier, versions in checks:
        for name in sorted(app.sources):
            version = versions[name]
            tagged = barrier_of_version(run.locations[name], version)
            if tagged is None:
                continue  # root table (no tags) or a non-barrier commit of a root
            if tagged != barrier:
                raise MisalignedInputError(
                    f"job {app.job_id}: input {name} would be read at version {version}, which holds "
                    f"barrier {tagged}, while processing barrier {barrier}"
                )


def check_outputs(app: TsbApp, outputs: object, *, function: str = "process") -> None:
    """Check that ``process`` (or the app's ``function``) returned ``{sink: DataFrame}`` with
    exactly the app's sinks as keys.

    Raises:
        KeyError: a sink is missing or a key is not a sink; the message names the keys returned
            and the sinks expected (a misspelt key would otherwise be dropped silently).
        TypeError: ``outputs`` is not a mapping.
    """
    if not isinstance(outputs, Mapping):
        raise TypeError(
            f"job {app.job_id}: {function}() must return {{sink: DataFrame}} for sinks {sorted(app.sinks)}, "
            f"got {type(outputs).__name__}"
        )
    missing = sorted(set(app.sinks) - set(outputs))
    extra = sorted(set(outputs) - set(app.sinks), key=str)
    if missing or extra:
        problems = ([f"no DataFrame for sinks {missing}"] if missing else []) + (
            [f"keys {extra} that are not sinks"] if extra else []
        )
        raise KeyError(
            f"job {app.job_id}: {function}() returned {' and '.join(problems)}: it returned keys "
            f"{sorted(outputs, key=str)}, the app's sinks are {sorted(app.sinks)}; return one DataFrame per sink, "
            "keyed by the sink's name as declared in TsbApp(sinks=...)"
        )


def start_run(run: AppRun) -> int | None:
    """The prologue of a batch or streaming run: take the run's fencing token
    (:func:`begin_attempt`), read each sink's log once to re-report its newest barrier WRITTEN
    (:func:`report_written_heads`), and return the barrier all sinks are at (``None``: a sink
    is empty), after which the run's barriers come."""
    begin_attempt(run.app, run.catalog)
    heads = run.sink_heads()
    report_written_heads(run, heads)
    return run.base_barrier(heads)


def begin_attempt(app: TsbApp, catalog: BarrierCatalog | None) -> int | None:
    """Take this run's fencing token (docs/design.md "Fencing zombies"); ``None`` when the
    catalog does not fence (a plan file). From then on every older run of the job still
    going (an Airflow zombie) is refused by the metastore and fails with ``FencedError``.

    A token the app's command line took ahead of this run (with its Spark Connect session, see
    :mod:`airflow_provider_tsb.spark.cli`) is this run's: it is claimed, not replaced."""
    claim = getattr(catalog, "claim_attempt", None)
    token = claim(app.job_id) if claim is not None else None
    if token is not None:
        return token
    begin = getattr(catalog, "begin_attempt", None)
    return begin(app.job_id) if begin is not None else None


def report_written_heads(run: AppRun, heads: Mapping[str, tuple[int, int] | None] | None = None) -> None:
    """Re-report WRITTEN for each sink's newest barrier (idempotent).

    Repairs a run killed after its Delta commit but before its WRITTEN report: the Delta log
    is the truth, the catalog only indexes it. Cost: one short log walk per sink (none for the
    sinks in ``heads``, already read).
    """
    if run.catalog is None:
        return
    heads = run.sink_heads() if heads is None else heads
    for sink in sorted(run.app.sinks):
        head = heads[sink]
        if head is not None:
            run.catalog.record_written(sink, head[0], head[1], run.job_id)


def run_barrier(
    run: AppRun,
    plan: BarrierPlan,
    *,
    before: dict[str, float] | None = None,
    queue: ReportQueue | None = None,
    run_lease: RunLease | None = None,
    group: BarrierGroup | None = None,
) -> list[WriteResult]:
    """Process one barrier end to end (alignment, skip-if-committed, process, commit sinks).

    Records the job's timing for the barrier in the catalog (``running``, then ``succeeded``
    or ``failed``) and logs a ``tsb-timing`` line with the phases of
    :mod:`airflow_provider_tsb.spark.timing`.

    Args:
        before: ``{phase: seconds}`` the barrier spent before this call (streaming mode: ``poll``,
            the wait for its micro-batch, and ``source``, reading the control row).
        queue: where the barrier's WRITTEN reports and its ``succeeded`` record go, to run
            behind the job's next barrier (:mod:`airflow_provider_tsb.spark.report_queue`);
            ``None``: they are made before this returns.
        run_lease: the batch run's input lease (:class:`RunLease`): when it covers ``plan``, the
            barrier takes no lease of its own, its start record goes on ``queue`` and the run
            lease is narrowed behind it once the barrier is done.
        group: the micro-batch's :class:`~airflow_provider_tsb.spark.barrier_group.BarrierGroup`
            holding ``plan``: its first barrier stages the group's outputs, the later ones commit
            theirs (see :func:`run_barrier_group`).

    Returns one :class:`WriteResult` per sink (sorted by sink name).

    Raises:
        MisalignedInputError: an input is not at the barrier's version.
        KeyError: ``process`` did not return exactly one DataFrame per sink (see :func:`check_outputs`).
    """
    started, app, catalog = _now_ms(), run.app, run.catalog
    with barrier_timer(app.job_id, plan.barrier, before=before):
        lease: InputLease | None = None
        try:
            lease = _start(catalog, app.job_id, plan, started, queue, run_lease)
            with shared_commit_reads():  # each commit file read once for the barrier
                results = _run_barrier(run, plan, queue, group)
        except BaseException:
            _record_failure(catalog, app.job_id, plan.barrier, lease, queue)
            raise
        if catalog is not None:  # the timing and the end of the input lease: one catalog call
            _record_success(catalog, app.job_id, plan.barrier, lease, queue)
            narrow = run_lease.narrowing_after(plan.barrier) if run_lease is not None and queue is not None else None
            if narrow is not None and queue is not None:
                queue.submit(plan.barrier, "the narrowing of the run's input lease", narrow)
    return results


def _record_success(catalog: BarrierCatalog, job_id: str, barrier: int, lease: InputLease | None,
                    queue: ReportQueue | None) -> None:
    """The barrier's ``succeeded`` record with the end of its input lease; behind its WRITTEN
    reports on ``queue`` when there is one, its input lease then ending with the next start."""
    finished, lease_id = _now_ms(), lease.stop() if lease is not None else None
    if queue is None:
        catalog.record_job_barrier(job_id, barrier, JobStatus.SUCCEEDED, finished_at_ms=finished,
                                   release_lease=lease_id)
        return
    queue.submit(barrier, "the job's succeeded record",
                 lambda: catalog.record_job_barrier(job_id, barrier, JobStatus.SUCCEEDED, finished_at_ms=finished))
    queue.end_lease_with_next_start(lease_id)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _record_failure(catalog: BarrierCatalog | None, job_id: str, barrier: int, lease: InputLease | None,
                    queue: ReportQueue | None = None) -> None:
    """The barrier failed: record it and end its input lease, in one catalog call, after the
    reports queued before it (its own start record may be one); a metastore failure here is
    logged (the original error matters more, and the lease lapses by itself)."""
    if queue is not None:
        try:
            queue.wait()
        except Exception as exc:
            log.warning("job %s: a background report failed as well: %s", job_id, exc)
    if catalog is None:
        if lease is not None:
            lease.release()
        return
    try:
        catalog.record_job_barrier(job_id, barrier, JobStatus.FAILED, finished_at_ms=_now_ms(),
                                   release_lease=lease.stop() if lease is not None else None)
    except Exception:
        log.warning("job %s: could not record the failure of barrier %s", job_id, barrier)
        if lease is not None:
            lease.release()


def _start(catalog: BarrierCatalog | None, job_id: str, plan: BarrierPlan, started: int,
           queue: ReportQueue | None = None, run_lease: RunLease | None = None) -> InputLease | None:
    """Record the barrier's start and take its input lease, in one catalog call: the epoch's
    input versions stay out of snapshot expiry while they are read (spark/input_leases.py). The
    same call ends the previous barrier's lease when ``queue`` holds it. Under a run lease
    that covers the barrier the start record is only the timing, queued when there is a queue."""
    if catalog is None:
        return None
    ending = queue.lease_to_end() if queue is not None else None
    if run_lease is not None and run_lease.covers(plan):
        def record() -> None:
            catalog.record_job_barrier(job_id, plan.barrier, JobStatus.RUNNING, started_at_ms=started,
                                       release_lease=ending)
        if queue is None:
            record()
        else:
            queue.submit(plan.barrier, "the job's running record", record)
        return None
    wanted = InputLease.request(catalog, job_id, plan)
    try:
        lease_id = catalog.record_job_barrier(job_id, plan.barrier, JobStatus.RUNNING, started_at_ms=started,
                                              take_lease=wanted, release_lease=ending)
    except BaseException:
        if queue is not None:  # not ended: the queue ends it when it closes
            queue.end_lease_with_next_start(ending)
        raise
    return InputLease.held(catalog, lease_id, wanted) if wanted is not None and lease_id is not None else None


def _run_barrier(
    run: AppRun, plan: BarrierPlan, queue: ReportQueue | None = None, group: BarrierGroup | None = None,
) -> list[WriteResult]:
    """The barrier's work (its input lease is held by the caller); its results."""
    spark, app, catalog, locations = run.spark, run.app, run.catalog, run.locations
    with phase("delta_log"):
        logs = read_sink_logs(run, plan)
        if group is None or plan.barrier == group.first:  # a later barrier of a group: checked by the first
            check_alignment(run, plan)
    if all(sink_log.holds_barrier for sink_log in logs.values()):
        if group is not None and group.plans and plan.barrier == group.first:  # a replay: the next stages the group
            group.drop_first()
        if queue is not None:  # the previous barrier's WRITTEN first
            queue.wait()
        return _skip_committed(run, plan, logs)
    outputs: Mapping[str, SinkOutput] | None = group.take(plan.barrier) if group is not None else None
    if outputs is None and group is not None and plan.barrier == group.first:
        outputs = _stage_group(run, group, logs)
    if outputs is None:
        outputs = app.process(BarrierContext(spark, app, plan, locations, logs))
        check_outputs(app, outputs)
    if queue is not None and not all(isinstance(out, StagedAttempt) for out in outputs.values()):
        queue.release()  # the reports run while the driver waits on Spark's write (none when pre-staged)
    results: list[WriteResult] = []
    for sink, sink_log in logs.items():
        target = WriteTarget(sink, locations[sink], app.job_id, plan.barrier, plan.inputs, plan.ts_ms)
        out = outputs[sink]
        staged = out if isinstance(out, StagedAttempt) else None
        results.append(write_barrier(spark, None if staged is not None else out, target, app.sinks[sink].options,
                                     catalog=catalog, log=sink_log, queue=queue, staged=staged))
    log.info("job %s: barrier %s done: %s", app.job_id, plan.barrier, results)
    return results


def read_sink_logs(run: AppRun, plan: BarrierPlan) -> dict[str, SinkLog]:
    """``{sink: SinkLog}``: each sink's log read once as ``plan``'s barrier starts, with the
    barrier's answers (committed, its version and attempt, the previous barrier's version) and,
    for a sink whose write plans against the table's files (a merge, auto compaction), the
    table's snapshot: what the context and the commit protocol need, passed in."""
    out = {}
    for sink in sorted(run.app.sinks):
        options = run.app.sinks[sink].options
        out[sink] = SinkLog.read(run.locations[sink], run.job_id, barrier=plan.barrier, previous=plan.previous_barrier,
                                 snapshot=options.mode == "merge" or options.compaction is not None)
    return out


def _stage_group(run: AppRun, group: BarrierGroup, logs: Mapping[str, SinkLog]) -> Mapping[str, SinkOutput] | None:
    """The first barrier of ``group`` plans every barrier of it and stages their outputs
    (:meth:`BarrierGroup.stage`); returns its own outputs (``None``: it runs alone after all).

    The group ends before a barrier that a sink already holds (a replay), that is misaligned
    or whose ``process`` fails (each then runs alone and fails or skips with its own error),
    or whose ``process`` reads a sink's previous state. An app with ``process_micro_batch``
    builds the group's outputs with one call (:class:`MicroBatchContext`) when its sinks allow
    (:meth:`BarrierGroup.micro_batch_ready`)."""
    spark, app, locations = run.spark, run.app, run.locations
    for plan in group.plans[1:]:
        if not _can_join(run, plan, logs):
            group.truncate(plan.barrier)
            break
    if len(group.plans) >= 2 and group.micro_batch_ready(app, logs):
        tagged = app.process_micro_batch(MicroBatchContext(spark, app.job_id, group.plans, locations))
        check_outputs(app, tagged, function="process_micro_batch")
        group.stage_micro_batch(run, logs, tagged)
        return group.take(group.first)
    outputs: dict[int, Mapping[str, DataFrame]] = {}
    for plan in group.plans:
        ctx = BarrierContext(spark, app, plan, locations, logs)
        try:
            out = app.process(ctx)
            check_outputs(app, out)
        except Exception:
            if plan.barrier == group.first:
                raise
            group.truncate(plan.barrier)
            break
        if ctx.read_sinks and plan.barrier != group.first:
            group.truncate(plan.barrier)
            break
        outputs[plan.barrier] = out
    if len(group.plans) < 2:
        return outputs[group.first]
    group.stage(run, logs, outputs)
    return group.take(group.first)


def _can_join(run: AppRun, plan: BarrierPlan, logs: Mapping[str, SinkLog]) -> bool:
    """True when a later barrier of a group may be staged with its first: no sink holds it yet
    and its inputs are aligned."""
    if any(sink_log.is_committed(plan.barrier) for sink_log in logs.values()):
        return False
    try:
        with phase("delta_log"):
            check_alignment(run, plan)
    except MisalignedInputError:
        return False
    return True


def run_barrier_group(
    run: AppRun, plans: Sequence[BarrierPlan], *, before: dict[str, float] | None = None,
) -> list[int]:
    """Process consecutive ready barriers as one micro-batch (:mod:`~airflow_provider_tsb.spark.barrier_group`):
    one Spark job per ``append`` sink for their outputs, then a commit per barrier, in order.

    One input lease covers every barrier's inputs from the start (:class:`RunLease`), and the
    barriers' end-of-barrier reports run behind the next barrier's work (:class:`ReportQueue`),
    all made before this returns. One plan: :func:`run_barrier` alone.

    Args:
        plans: the barriers, oldest first, as :meth:`BarrierCatalog.pending_barriers` gives them.
        before: the first barrier's ``{phase: seconds}`` before this call (see :func:`run_barrier`).

    Returns the barriers processed (committed or found committed), in order.

    Raises:
        whatever :func:`run_barrier` raises for a barrier: the barriers before it are committed.
    """
    if len(plans) == 1:
        run_barrier(run, plans[0], before=before)
        return [plans[0].barrier]
    return _run_in_order(run, plans, group=BarrierGroup(plans), before=before)


def _run_in_order(
    run: AppRun, plans: Sequence[BarrierPlan], *, group: BarrierGroup | None = None,
    before: dict[str, float] | None = None,
) -> list[int]:
    """:func:`run_barrier` for each plan in order, under one input lease over every plan's inputs
    (:class:`RunLease`), each barrier's reports behind the next barrier's work
    (:class:`ReportQueue`), each commit file read once for all of them (the barrier before's
    sink commit is the next one's log head; :func:`shared_commit_reads`); ``group``: the plans'
    micro-batch (a plan the group ended before runs alone); ``before``: the first barrier's
    phases before the call. Returns the barriers done."""
    done: list[int] = []
    catalog = run.catalog
    run_lease = RunLease.take(catalog, run.job_id, plans)
    try:  # the commit files read are shared by the run's barriers (immutable: Delta protocol)
        with shared_commit_reads(), ReportQueue(run.job_id, getattr(catalog, "release_lease", None),
                                                 getattr(catalog, "in_one_transaction", None)) as queue:
            for plan in plans:
                member = group if group is not None and plan in group.plans else None
                run_barrier(run, plan, before=None if done else before, queue=queue, run_lease=run_lease,
                            group=member)
                done.append(plan.barrier)
    finally:
        if run_lease is not None:  # after the queue: its narrowings use the lease
            run_lease.release()
    return done


def _skip_committed(run: AppRun, plan: BarrierPlan, logs: Mapping[str, SinkLog]) -> list[WriteResult]:
    """Every sink holds the barrier: re-report WRITTEN (from the logs read), write nothing."""
    results, app, catalog = [], run.app, run.catalog
    for sink, sink_log in logs.items():
        version = sink_log.barrier_version
        if version is not None and catalog is not None:
            catalog.record_written(sink, plan.barrier, version, app.job_id)
        results.append(WriteResult(sink, plan.barrier, version if version is not None else -1, skipped=True))
    log.info("job %s: barrier %s already committed, skipped", app.job_id, plan.barrier)
    return results


def run_batch(run: AppRun, *, until_barrier: int | None = None, max_barriers: int | None = None) -> list[int]:
    """Batch mode: process the pending barriers of ``run.catalog`` in order (up to
    ``until_barrier``, at most ``max_barriers`` of them), then stop.

    Returns the barriers processed (committed or found already committed), once every report
    of theirs is made.

    Raises:
        ValueError: ``run`` has no catalog (a batch run takes its barriers from one).
    """
    catalog = run.catalog
    if catalog is None:
        raise ValueError(f"job {run.job_id}: a batch run needs a barrier catalog to take its barriers from")
    after = start_run(run)
    plans = [plan for plan in catalog.pending_barriers(run.job_id, run.sources(), after)
             if until_barrier is None or plan.barrier <= until_barrier][:max_barriers]
    done = _run_in_order(run, plans)
    catalog.heartbeat(run.job_id)
    return done
