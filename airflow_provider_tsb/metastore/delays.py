"""Delays per barrier: generation -> WRITTEN per table, per job and end to end.

The delay view of the UI and ``GET /delays``. For each of the newest barriers of a topology:

* table delay: barrier generation (``created_at_ms``) -> WRITTEN, non-root tables;
* end-to-end delay: generation -> the last non-root table WRITTEN (when all are, i.e. the
  barrier is COMMIT over the topology's sinks);
* job delay: its sinks' (last) WRITTEN minus its inputs' latest WRITTEN (a root input is
  WRITTEN when the barrier is generated);
* bottleneck: the job with the largest delay.

All times are epoch milliseconds; delays are milliseconds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import bindparam, select

from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.models import BarrierRow, TableBarrierRow, TableRow
from airflow_provider_tsb.metastore.records import BarrierDelays, BarrierState, JobDelay, TableDelay
from airflow_provider_tsb.metastore.registry_reads import job_io

#: :attr:`TableDelay.state` of a table that has neither PROCESSED nor WRITTEN the barrier.
PENDING = "PENDING"


@dataclass(frozen=True)
class _Reached:
    """What one table reached of one barrier."""

    root: bool
    state: str
    written_at_ms: int | None


#: larger than any barrier id (a BIGINT): the page bound of the first page
MAX_BARRIER = 2**63 - 1
#: the newest ``limit`` barriers of a topology below ``before`` (built once: building a
#: statement cost about as much CPU as running it)
NEWEST_BARRIERS = (
    select(BarrierRow.barrier_id, BarrierRow.ts_ms, BarrierRow.created_at_ms)
    .where(BarrierRow.topology == bindparam("topology"), BarrierRow.barrier_id < bindparam("before"))
    .order_by(BarrierRow.barrier_id.desc())
    .limit(bindparam("limit"))
)
#: each table's state at the barriers ``ids`` (one primary-key seek per table and barrier)
REACHED = (
    select(TableRow.name, TableRow.kind, TableBarrierRow.barrier_id, TableBarrierRow.state,
           TableBarrierRow.written_at_ms)
    .join(TableBarrierRow, TableBarrierRow.table_id == TableRow.id)
    .where(TableRow.topology == bindparam("topology"),
           TableBarrierRow.barrier_id.in_(bindparam("ids", expanding=True)))
)


class DelayManager:
    """The delay view over the newest barriers of a topology.

    Args:
        core: the metastore's engine and transactions; the jobs' sources and sinks are read in
            the view's own transaction (:func:`~.registry_reads.job_io`).
    """

    def __init__(self, core: MetastoreCore) -> None:
        self._core = core

    def list(
        self, topology: str, *, limit: int = 20, before: int | None = None
    ) -> tuple[list[BarrierDelays], int | None]:
        """Delays of the newest ``limit`` barriers of ``topology`` (below ``before`` if given).

        Returns:
            ``(delays, next_before)``: :class:`BarrierDelays` newest first, and the ``before``
            of the next (older) page, ``None`` on the last page. Cost: one index range on the
            barriers plus one primary-key seek per (table, barrier), bounded by ``limit`` and
            independent of the barrier history length.
        """
        below = MAX_BARRIER if before is None else before
        with self._core.transaction() as s:
            barriers = s.execute(NEWEST_BARRIERS, {"topology": topology, "before": below, "limit": limit}).all()
            reached: dict[int, dict[str, _Reached]] = defaultdict(dict)
            if barriers:
                ids = [b.barrier_id for b in barriers]
                rows = s.execute(REACHED, {"topology": topology, "ids": ids}).all()
                for name, kind, barrier, state, written in rows:
                    reached[int(barrier)][name] = _Reached(kind == "root", state, written)
            io = job_io(s, topology)  # in the same transaction: one pool checkout per call
        items = [
            barrier_delays(int(b), int(ts), int(created), reached.get(int(b), {}), io)
            for b, ts, created in barriers
        ]
        last = items[-1].barrier if items else None
        return items, (last if len(items) == limit and last is not None and last > 1 else None)


def barrier_delays(
    barrier: int,
    ts_ms: int,
    created_at_ms: int,
    reached: dict[str, _Reached],
    io: dict[str, tuple[tuple[str, ...], tuple[str, ...]]],
) -> BarrierDelays:
    """The :class:`BarrierDelays` of one barrier from what each table reached (see module doc)."""

    def written_at(table: str) -> int | None:
        row = reached.get(table)
        if row is None or row.state != BarrierState.WRITTEN:
            return None
        return created_at_ms if row.root else row.written_at_ms

    sinks_all = {t for _, sinks in io.values() for t in sinks}
    tables: dict[str, TableDelay] = {}
    for table in sorted(sinks_all | {t for t, r in reached.items() if not r.root}):
        row = reached.get(table)
        written = written_at(table)
        tables[table] = TableDelay(
            state=row.state if row else PENDING,
            delay_ms=(written - created_at_ms) if written is not None else None,
        )
    complete = all(t.delay_ms is not None for t in tables.values())
    end_to_end = max((t.delay_ms or 0 for t in tables.values()), default=0) if complete else None
    jobs: dict[str, JobDelay] = {}
    for job_id, (sources, sinks) in sorted(io.items()):
        sink_w = [written_at(t) for t in sinks]
        src_w = [written_at(t) for t in sources]
        sink_done = max(v for v in sink_w if v is not None) if sink_w and None not in sink_w else None
        src_done = max(v for v in src_w if v is not None) if src_w and None not in src_w else created_at_ms
        jobs[job_id] = JobDelay(
            delay_ms=(sink_done - src_done) if sink_done is not None else None, written_at_ms=sink_done
        )
    timed = [(j.delay_ms, job_id) for job_id, j in jobs.items() if j.delay_ms is not None]
    return BarrierDelays(
        barrier=barrier, ts_ms=ts_ms, created_at_ms=created_at_ms, complete=complete,
        end_to_end_ms=end_to_end, tables=tables, jobs=jobs, bottleneck=max(timed)[1] if timed else None,
    )
