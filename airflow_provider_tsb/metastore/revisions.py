"""Revision plans: a rollback recorded before any table is touched (docs/design.md "Revision").

A revision rolls tables of a topology back to barrier k (or, for a full reprocess, empties them
so every barrier is processed again). :meth:`RevisionManager.plan` records the plan --
the tables, upstream first, the Delta version tagged with k in each, the job writing each and
its streaming checkpoint -- and, in the same transaction, forgets every state above k of those
tables. From that commit on:

* readers at READ_COMMITTED and REPEATABLE_READ answer barrier k or older for these tables
  (the Delta versions of k stay readable by time travel while the tables are restored), so a
  read never mixes restored and not yet restored tables;
* a job writing a table of the plan is refused when it asks for barriers to process
  (:meth:`RevisionManager.check_none_pending`, :class:`RevisionPendingError`); barrier
  generation goes on (root tables are never rolled back);
* each table's step is marked when its Delta restore (and checkpoint reset) is done, and the
  plan is ``done`` when every table is. A plan left ``pending`` by a crash or an error is
  finished by running the revision again (Airflow's retry of the operator, or
  ``tsb rollback --resume``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from airflow_provider_tsb.exceptions import RevisionPendingError, TopologyError
from airflow_provider_tsb.metastore.base import MetastoreCore, table_id_of
from airflow_provider_tsb.metastore.models import (
    RevisionRow,
    RevisionTableRow,
    TableBarrierRow,
    TableRow,
    TopologyRow,
)
from airflow_provider_tsb.metastore.records import BarrierState, now_ms
from airflow_provider_tsb.names import normalize_table_name

#: status of a revision, and of each table of its plan
PENDING = "pending"
DONE = "done"


class PlannedTable(NamedTuple):
    """One table of a revision, as the caller plans it.

    Attributes:
        table: table name.
        target_version: Delta version tagged with the target barrier (``None`` for a reprocess).
        job_id: the job writing the table.
        checkpoint: the job's streaming checkpoint directory.
    """

    table: str
    target_version: int | None
    job_id: str | None
    checkpoint: str | None


@dataclass(frozen=True)
class RevisionTable:
    """One table of a recorded plan: its step's ``status`` (``pending`` | ``done``) and, once
    done, ``restored_version`` (the table's latest Delta version after its restore)."""

    table: str
    position: int
    target_version: int | None
    job_id: str | None
    checkpoint: str | None
    status: str
    restored_version: int | None


@dataclass(frozen=True)
class RevisionPlan:
    """A recorded revision (see module doc).

    Attributes:
        id: revision id.
        topology: topology name.
        table: the table the revision was asked for.
        barrier: the barrier the tables go back to (0 for a reprocess).
        reprocess: True when the tables are emptied and every barrier is processed again.
        status: ``pending`` or ``done``.
        created_at_ms, finished_at_ms: epoch ms.
        error: the last error of a run that did not finish.
        tables: the plan's tables, upstream first.
    """

    id: int
    topology: str
    table: str
    barrier: int
    reprocess: bool
    status: str
    created_at_ms: int
    finished_at_ms: int | None
    error: str | None
    tables: tuple[RevisionTable, ...]

    @property
    def pending(self) -> bool:
        """Whether the revision still has tables to restore."""
        return self.status == PENDING

    def describe(self) -> str:
        """One line: ``revision 3 of tsb.x.y to barrier 2 (pending: tsb.x.z)``."""
        what = "reprocess of" if self.reprocess else "revision of"
        target = "from barrier 1" if self.reprocess else f"to barrier {self.barrier}"
        left = [t.table for t in self.tables if t.status != DONE]
        state = f"pending: {', '.join(left)}" if self.pending else "done"
        return f"revision {self.id} ({what} {self.table} {target}; {state})"


class RevisionManager:
    """Revision plans (see module doc)."""

    def __init__(self, core: MetastoreCore) -> None:
        self._core = core

    def plan(
        self,
        topology: str,
        table: str,
        barrier: int,
        tables: Sequence[PlannedTable],
        *,
        reprocess: bool = False,
    ) -> RevisionPlan:
        """Record a revision plan and forget the states above ``barrier`` of its tables, at once.

        Args:
            topology: topology name.
            table: the table the revision is asked for.
            barrier: the barrier to go back to (0 with ``reprocess``: forget every state).
            tables: the plan's tables, upstream first (``table`` and everything downstream).
            reprocess: empty the tables and process every barrier again.

        Returns:
            The new plan, or the pending plan of the same table, barrier and kind (a retry).

        Raises:
            RevisionPendingError: another revision over some of these tables is pending.
            TopologyError: ``barrier`` is not WRITTEN in a table of the plan (a revision goes
                back to a barrier every table holds), or the topology is not registered.
            UnknownTableError: a table is not registered.
        """
        if reprocess:
            barrier = 0
        elif barrier < 1:
            raise ValueError(f"a revision goes back to a barrier >= 1, got {barrier} (use reprocess to start over)")
        name = normalize_table_name(table)
        with self._core.transaction(write=True) as s:
            _lock_topology(s, topology)
            ids = {normalize_table_name(p.table): table_id_of(s, p.table) for p in tables}
            retried = self._pending_over(s, topology, ids, name, barrier, reprocess)
            if retried is not None:
                return retried
            if not reprocess:
                _check_written_everywhere(s, name, barrier, ids)
            row = _insert_plan(s, topology, name, barrier, reprocess, tables, ids)
            self._forget_above(s, list(ids.values()), barrier)
            s.flush()
            return self._plan(s, row)

    def _pending_over(
        self, s: Session, topology: str, ids: Mapping[str, int], name: str, barrier: int, reprocess: bool
    ) -> RevisionPlan | None:
        """The pending plan of the same table, barrier and kind (a retry), if any;
        RevisionPendingError if another pending plan covers some of the tables ``ids``."""
        for plan in self._pending(s, topology):
            if not {t.table for t in plan.tables} & set(ids):
                continue
            if (plan.table, plan.barrier, plan.reprocess) == (name, barrier, reprocess):
                return plan
            raise RevisionPendingError(
                f"cannot start a revision of {name} while {plan.describe()} is pending over some of the "
                f"same tables: finish it first (rerun its task, or `tsb rollback {plan.table} --resume`)"
            )
        return None

    def get(self, revision_id: int) -> RevisionPlan:
        """The revision ``revision_id``.

        Raises:
            TopologyError: no such revision.
        """
        with self._core.transaction() as s:
            row = s.get(RevisionRow, revision_id)
            if row is None:
                raise TopologyError(f"no revision {revision_id} in the tsb metastore")
            return self._plan(s, row)

    def list(self, topology: str, *, limit: int = 20) -> list[RevisionPlan]:
        """The newest ``limit`` revisions of ``topology``, newest first."""
        with self._core.transaction() as s:
            rows = s.scalars(select(RevisionRow).where(RevisionRow.topology == topology)
                             .order_by(RevisionRow.id.desc()).limit(limit))
            return [self._plan(s, row) for row in rows]

    def pending(self, topology: str, table: str | None = None) -> RevisionPlan | None:
        """The pending revision of ``topology`` (over ``table`` when given), or ``None``."""
        with self._core.transaction() as s:
            for plan in self._pending(s, topology):
                if table is None or normalize_table_name(table) in {t.table for t in plan.tables}:
                    return plan
            return None

    def check_none_pending(self, job_id: str) -> None:
        """Refuse to run ``job_id`` while a revision over a table it writes is pending.

        One query on the (small) revision tables.

        Raises:
            RevisionPendingError: names the revision, the job and how to finish the revision.
        """
        with self._core.transaction() as s:
            revision_id = s.scalar(
                select(RevisionRow.id).join(RevisionTableRow, RevisionTableRow.revision_id == RevisionRow.id)
                .where(RevisionRow.status == PENDING, RevisionTableRow.job_id == job_id).limit(1)
            )
            if revision_id is None:
                return
            plan = self._plan(s, s.get(RevisionRow, revision_id))
        raise RevisionPendingError(
            f"job {job_id!r} cannot run: {plan.describe()} is pending over the tables it writes; finish it "
            f"first (rerun the rollback task, or `tsb rollback {plan.table} --resume`), then run the job"
        )

    def mark_table(self, revision_id: int, table: str, restored_version: int) -> None:
        """Mark ``table``'s step of the revision done at Delta ``restored_version``."""
        with self._core.transaction(write=True) as s:
            table_id = table_id_of(s, table)
            s.execute(update(RevisionTableRow)
                      .where(RevisionTableRow.revision_id == revision_id, RevisionTableRow.table_id == table_id)
                      .values(status=DONE, restored_version=restored_version))

    def fail(self, revision_id: int, error: str) -> None:
        """Keep the revision pending with the error of the run that stopped (at most 2,000 characters)."""
        with self._core.transaction(write=True) as s:
            s.execute(update(RevisionRow).where(RevisionRow.id == revision_id).values(error=error[:2000]))

    def finish(self, revision_id: int) -> RevisionPlan:
        """Mark the revision done; forget again the states above its barrier that a job recorded
        meanwhile (the Delta tables are the truth and hold the barrier).

        Raises:
            RevisionPendingError: a table of the plan is not done yet.
        """
        with self._core.transaction(write=True) as s:
            row = s.get(RevisionRow, revision_id)
            if row is None:
                raise TopologyError(f"no revision {revision_id} in the tsb metastore")
            plan = self._plan(s, row)
            left = [t.table for t in plan.tables if t.status != DONE]
            if left:
                raise RevisionPendingError(f"{plan.describe()}: tables not restored yet: {', '.join(left)}")
            ids = list(s.scalars(select(RevisionTableRow.table_id).where(RevisionTableRow.revision_id == row.id)))
            self._forget_above(s, ids, row.barrier_id)
            row.status, row.finished_at_ms, row.error = DONE, now_ms(), None
            s.flush()
            return self._plan(s, row)

    # ------------------------------------------------------------------ helpers
    def _forget_above(self, s: Session, table_ids: Sequence[int], barrier: int) -> None:
        s.execute(delete(TableBarrierRow).where(
            TableBarrierRow.table_id.in_(table_ids), TableBarrierRow.barrier_id > barrier))

    def _pending(self, s: Session, topology: str) -> list[RevisionPlan]:
        rows = s.scalars(select(RevisionRow).where(RevisionRow.topology == topology, RevisionRow.status == PENDING)
                         .order_by(RevisionRow.id))
        return [self._plan(s, row) for row in rows]

    def _plan(self, s: Session, row: RevisionRow) -> RevisionPlan:
        tables = s.execute(
            select(RevisionTableRow, TableRow.name).join(TableRow, TableRow.id == RevisionTableRow.table_id)
            .where(RevisionTableRow.revision_id == row.id).order_by(RevisionTableRow.position)
        ).all()
        return RevisionPlan(
            id=row.id, topology=row.topology, table=row.table_name, barrier=row.barrier_id,
            reprocess=bool(row.reprocess), status=row.status, created_at_ms=row.created_at_ms,
            finished_at_ms=row.finished_at_ms, error=row.error,
            tables=tuple(
                RevisionTable(table=name, position=t.position, target_version=t.target_version, job_id=t.job_id,
                              checkpoint=t.checkpoint, status=t.status, restored_version=t.restored_version)
                for t, name in tables
            ),
        )


# ---------------------------------------------------------------- the steps of plan_revision
def _lock_topology(s: Session, topology: str) -> None:
    """Lock ``topology``'s row (bump its lock version); TopologyError if it is not registered."""
    locked = s.execute(update(TopologyRow).where(TopologyRow.name == topology)
                       .values(lock_version=TopologyRow.lock_version + 1))
    if not locked.rowcount:
        raise TopologyError(f"topology {topology!r} is not registered in the tsb metastore")


def _check_written_everywhere(s: Session, name: str, barrier: int, ids: Mapping[str, int]) -> None:
    """TopologyError unless ``barrier`` is WRITTEN in every table ``ids`` of the plan."""
    written = set(s.scalars(select(TableBarrierRow.table_id).where(
        TableBarrierRow.table_id.in_(ids.values()), TableBarrierRow.barrier_id == barrier,
        TableBarrierRow.state == BarrierState.WRITTEN)))
    missing = [t for t, i in ids.items() if i not in written]
    if missing:
        raise TopologyError(
            f"cannot roll {name} back to barrier {barrier}: it is not WRITTEN in {', '.join(missing)} "
            "(a revision goes back to a barrier every downstream table holds; pick an older one, "
            "or reprocess from barrier 1)"
        )


def _insert_plan(
    s: Session, topology: str, name: str, barrier: int, reprocess: bool, tables: Sequence[PlannedTable],
    ids: Mapping[str, int],
) -> RevisionRow:
    """Insert the PENDING plan and its tables, upstream first."""
    row = RevisionRow(topology=topology, table_name=name, barrier_id=barrier, reprocess=reprocess,
                      status=PENDING, created_at_ms=now_ms())
    s.add(row)
    s.flush()
    for position, planned in enumerate(tables):
        s.add(RevisionTableRow(
            revision_id=row.id, table_id=ids[normalize_table_name(planned.table)], position=position,
            target_version=planned.target_version, job_id=planned.job_id, checkpoint=planned.checkpoint,
            status=PENDING,
        ))
    return row
