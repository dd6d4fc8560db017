"""Revision: roll a table and every table downstream of it back to a barrier, atomically or
resumably, or reprocess them from barrier 1 (docs/design.md "Revision").

A revision of intermediate table T to barrier k:

1. **Plan** (:func:`plan_revision`): the tables are T, every table computed from it, and every
   other sink of their jobs (a job's sinks go back together), upstream first. Each must hold k
   in its Delta log. The plan -- tables, k, the Delta version of k in each, the writer job and
   its streaming checkpoint -- is recorded in the metastore, and in the same transaction the
   states above k of those tables are forgotten
   (:meth:`~airflow_provider_tsb.metastore.revisions.RevisionManager.plan`). From then
   on READ_COMMITTED and REPEATABLE_READ answer k or older for them (k's versions stay readable
   by time travel), and their jobs are refused until the revision is done.
2. **Steps**, one table at a time, each idempotent: Delta ``RESTORE`` to k and an epoch bump
   (:func:`~airflow_provider_tsb.delta.restore.restore_to_barrier`), or for a reprocess an
   emptying commit (:func:`~airflow_provider_tsb.delta.restore.truncate_table`); then the writer
   job's streaming checkpoint is deleted (its offsets are barrier ids: a restarted query would
   resume after the undone barriers); then the step is marked done.
3. **Finish**: every table is checked to hold k at its head (a commit a job slipped in is undone
   again) and the plan is marked done. The jobs then process k+1.. (or 1..) on their next run.

A crash or an error at any table leaves the plan pending with its error; running the revision
again (Airflow's retry of :class:`~airflow_provider_tsb.operators.maintenance.TsbRollbackOperator`,
or ``tsb rollback TABLE --resume``) finishes it. Barrier generation is never refused: root tables
are written from outside and are not rolled back.

Test facility: ``TSB_KILL_AT=revision:<table>`` SIGKILLs the process right before that table's
step (like :mod:`airflow_provider_tsb.spark.killpoints`); never set it in production.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
from dataclasses import dataclass, field

import networkx as nx

from airflow_provider_tsb.delta.restore import RestoreResult
from airflow_provider_tsb.exceptions import RevisionPendingError
from airflow_provider_tsb.metastore.revisions import DONE, PlannedTable, RevisionPlan
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.names import normalize_table_name
from airflow_provider_tsb.topology import Topology

__all__ = [ "RevisionResult", "checkpoint_location", "downstream_tables", "resume_revision",
    "revise", "revision_tables", "rollback",
]

log = logging.getLogger(__name__)

#: the streaming checkpoint of a job: ``<first sink, by name>/_tsb_checkpoints/<job>`` (as
#: :func:`airflow_provider_tsb.spark.streaming.run_streaming` defaults it), or ``--checkpoint``
CHECKPOINT_DIR = "_tsb_checkpoints"
KILL_ENV = "TSB_KILL_AT"


@dataclass(frozen=True)
class RevisionResult:
    """What a revision did.

    Attributes:
        revision: the revision id in the metastore.
        barrier: the barrier the tables went back to (0: reprocess from barrier 1).
        tables: ``{table: Delta version whose data it now holds}`` (the truncation commit for a
            reprocess), upstream first.
        checkpoints: streaming checkpoint directories deleted.
        resumed: True when a pending plan was finished rather than a new one made.
    """

    revision: int
    barrier: int
    tables: dict[str, int]
    checkpoints: list[str] = field(default_factory=list)
    resumed: bool = False

    def to_xcom(self) -> dict[str, object]:
        """JSON-able form (the operator's XCom, the CLI's output)."""
        return {"revision": self.revision, "barrier": self.barrier, "tables": dict(self.tables),
                "checkpoints": list(self.checkpoints), "resumed": self.resumed}


def downstream_tables(topology: Topology, table: str) -> list[str]:
    """``table`` and every table computed from it, upstream first (topological order)."""
    graph = topology.graph
    start = f"table:{normalize_table_name(table)}"
    reach = nx.descendants(graph, start) | {start}
    order = [n for n in nx.topological_sort(graph) if n in reach and n.startswith("table:")]
    return [n.split(":", 1)[1] for n in order]


def revision_tables(topology: Topology, table: str) -> list[str]:
    """The intermediate tables a revision of ``table`` rolls back, upstream first: ``table``, every
    table downstream of it, and every other sink of their writer jobs (with its downstream).

    Raises:
        ValueError: ``table`` is not an intermediate table of the topology (root tables are
            written from outside and cannot be rolled back).
    """
    name = normalize_table_name(table)
    if topology.tables.get(name) is None or topology.tables[name].kind != "intermediate":
        raise ValueError(f"{name!r} is not an intermediate table of topology {topology.name!r}; only tables "
                         "written by jobs can be rolled back (intermediate tables: "
                         f"{', '.join(sorted(n for n, t in topology.tables.items() if t.kind == 'intermediate'))})")
    wanted: set[str] = set()
    todo = [name]
    while todo:
        for found in downstream_tables(topology, todo.pop()):
            if found in wanted or topology.tables[found].kind != "intermediate":
                continue
            wanted.add(found)
            writer = topology.writer_of(found)
            todo.extend(s for s in topology.jobs[writer].sinks if normalize_table_name(s) not in wanted)
    order = [n.split(":", 1)[1] for n in nx.topological_sort(topology.graph) if n.startswith("table:")]
    return [t for t in order if t in wanted]


def checkpoint_location(topology: Topology, job_id: str) -> str:
    """The streaming checkpoint directory of ``job_id``: its ``--checkpoint`` application
    argument, else ``<location of its first sink by name>/_tsb_checkpoints/<job_id>``."""
    job = topology.jobs[job_id]
    args = list(job.application_args)
    for i, arg in enumerate(args):
        if arg == "--checkpoint" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--checkpoint="):
            return arg.split("=", 1)[1]
    first = sorted(normalize_table_name(s) for s in job.sinks)[0]
    return os.path.join(topology.location(first), CHECKPOINT_DIR, job_id)


def plan_revision(
    store: MetaStore, topology: Topology, table: str, barrier: int, *, reprocess: bool = False
) -> RevisionPlan:
    """Record the plan of a revision (see module doc, step 1); the pending plan of the same
    table, barrier and kind when there is one.

    Raises:
        ValueError: not an intermediate table, or ``barrier`` < 1 without ``reprocess``.
        BarrierNotInTableError: a table's Delta log holds no version of ``barrier``.
        RevisionPendingError: another revision over some of the tables is pending.
        TopologyError: ``barrier`` is not WRITTEN in a table of the plan.
    """
    from airflow_provider_tsb.exceptions import BarrierNotInTableError

    tables = revision_tables(topology, table)
    if not reprocess and barrier < 1:
        raise ValueError(f"barrier must be >= 1, got {barrier}; to rebuild from the start use reprocess")
    pending = store.revisions.pending(topology.name, table)
    if pending is not None and (pending.table, pending.barrier, pending.reprocess) == (
        normalize_table_name(table), 0 if reprocess else barrier, reprocess
    ):
        return pending
    store.registry.register_topology(topology)
    planned = []
    for name in tables:
        target = None
        if not reprocess:
            from airflow_provider_tsb.delta.barriers import version_of_barrier

            target = version_of_barrier(topology.location(name), barrier)
            if target is None:
                raise BarrierNotInTableError(
                    f"cannot roll {normalize_table_name(table)} back to barrier {barrier}: table {name} "
                    f"({topology.location(name)}) holds no version of it in its Delta log (never WRITTEN, "
                    "already undone, or its log was cleaned up); pick an older barrier or reprocess"
                )
        writer = topology.writer_of(name)
        planned.append(PlannedTable(name, target, writer, checkpoint_location(topology, writer)))
    return store.revisions.plan(topology.name, table, barrier, planned, reprocess=reprocess)


def run_revision(store: MetaStore, topology: Topology, plan: RevisionPlan) -> RevisionResult:
    """Do the steps of a recorded plan that are not done yet, then finish it (module doc, 2-3).

    Raises:
        Whatever a step raised (the plan stays pending with the error, run it again to finish).
    """
    from airflow_provider_tsb.delta.restore import restore_to_barrier, truncate_table

    resumed = any(t.status == DONE for t in plan.tables) or plan.error is not None
    restored: dict[str, int] = {}
    checkpoints: list[str] = []

    def step_of(location: str) -> RestoreResult:
        return truncate_table(location) if plan.reprocess else restore_to_barrier(location, plan.barrier)

    try:
        locations = {step.table: store.registry.table(step.table).location for step in plan.tables}
        for step in plan.tables:
            if step.status == DONE:
                continue
            _kill_point(step.table)
            result = step_of(locations[step.table])
            if step.checkpoint and os.path.exists(step.checkpoint):
                shutil.rmtree(step.checkpoint)
                checkpoints.append(step.checkpoint)
            store.revisions.mark_table(plan.id, step.table, result.latest_version)
            log.info("%s: %s at barrier %s (%s)", plan.describe(), step.table, plan.barrier, result)
        # finish: every head holds the barrier (a commit a job slipped in is undone again)
        for step in plan.tables:
            restored[step.table] = step_of(locations[step.table]).target_version
        done = store.revisions.finish(plan.id)
    except Exception as exc:
        store.revisions.fail(plan.id, f"{type(exc).__name__}: {exc}")
        raise
    log.info("%s", done.describe())
    return RevisionResult(plan.id, plan.barrier, restored, checkpoints, resumed)


def revise(
    store: MetaStore, topology: Topology, table: str, barrier: int, *, reprocess: bool = False
) -> RevisionResult:
    """Roll ``table`` and its downstream tables back to ``barrier`` (or reprocess them from
    barrier 1 with ``reprocess``; ``barrier`` is then ignored): plan, steps, finish. A pending
    plan of the same revision (a retry) is finished instead of made again.

    Returns:
        :class:`RevisionResult`.

    Raises:
        ValueError: ``table`` is not an intermediate table; ``barrier`` < 1.
        BarrierNotInTableError, TopologyError: a table does not hold ``barrier``.
        RevisionPendingError: another revision over some of these tables is pending.
    """
    plan = plan_revision(store, topology, table, barrier, reprocess=reprocess)
    return run_revision(store, topology, plan)


def resume_revision(store: MetaStore, topology: Topology, table: str | None = None) -> RevisionResult:
    """Finish the pending revision of ``topology`` (over ``table`` when given).

    Raises:
        RevisionPendingError: there is no pending revision to finish (the message says so).
    """
    plan = store.revisions.pending(topology.name, table)
    if plan is None:
        over = f" over {normalize_table_name(table)}" if table else ""
        raise RevisionPendingError(f"no pending revision of topology {topology.name!r}{over} to resume")
    return run_revision(store, topology, plan)


def rollback(store: MetaStore, topology: Topology, table: str, barrier: int) -> dict[str, int]:
    """:func:`revise` to ``barrier``; returns ``{table: restored Delta version}``."""
    return revise(store, topology, table, barrier).tables


def _kill_point(table: str) -> None:
    """SIGKILL this process when ``TSB_KILL_AT=revision:<table>`` names this table (tests)."""
    spec = os.environ.get(KILL_ENV, "")
    if spec.startswith("revision:") and normalize_table_name(spec.split(":", 1)[1]) == table:
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
