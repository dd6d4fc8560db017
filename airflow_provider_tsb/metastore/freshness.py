"""Freshness targets (Snowflake ``TARGET_LAG``, Flink Materialized Table ``FRESHNESS``).

A non-root table may declare a freshness target (``Topology.table(..., freshness=...)`` or
``Topology(name, freshness=...)`` for every sink table; ``tsb_table.freshness_ms``). The report
says, at one instant ``now`` (epoch ms, wall clock of the metastore client):

* **lag of a table**: how far behind the newest generated barrier the table's committed content
  is, in seconds. Let ``c`` be the table's newest COMMIT barrier (over the table alone: its
  newest WRITTEN barrier, docs/design.md "Vocabulary") and ``g`` the topology's newest generated
  barrier. ``lag = 0`` when ``c >= g``; otherwise ``lag = now - created_at(b)`` where ``b`` is
  the first barrier generated after ``c`` (the oldest barrier the table does not show yet): the
  table has been behind since ``b`` was generated, and the lag grows with wall time until the
  table commits ``g``. A table that committed nothing yet is behind since the oldest barrier
  still recorded. Generation times (``created_at_ms``) are wall clock for system-time and
  event-time barriers alike, so the lag never depends on an event-time watermark.
* **missed**: the table has a target and ``lag > target``.
* **lag of a job** (its own, not inherited): ``0`` when its sinks have WRITTEN every barrier its
  inputs have WRITTEN (a root input has every generated barrier); otherwise ``now`` minus the
  time its inputs made the first barrier after the sinks' newest common WRITTEN barrier
  available (the generation time, or the latest input's ``written_at_ms`` at that barrier).
  A job that waits for an upstream job has no own lag.
* **bottleneck of a table** behind ``g``: of its writer and the writers of all its ancestor
  tables, the job with the largest own lag -- the one whose WRITTEN state holds the others back
  (ties: the most upstream). The delay view (:mod:`.delays`) gives the per-barrier figures.

Cost: one grouped query over the (table, state, barrier) index, one seek per distinct newest
barrier and per (job input), independent of the barrier history length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.models import BarrierRow, JobRow, TableBarrierRow, TableRow
from airflow_provider_tsb.metastore.records import BarrierState, now_ms
from airflow_provider_tsb.metastore.registry import RegistryManager


@dataclass(frozen=True)
class TableFreshness:
    """Freshness of one non-root table (see the module docstring for the definitions).

    Attributes:
        table: canonical name; writer: its writer job (``None``: not registered).
        target_s: freshness target in seconds, or ``None``.
        lag_s: lag behind the newest generated barrier in seconds (0.0: up to date).
        missed: ``target_s`` is set and ``lag_s > target_s``.
        committed_barrier: newest COMMIT (WRITTEN) barrier; processed_barrier: newest barrier
            PROCESSED or WRITTEN (``None``: none).
        bottleneck: the upstream job furthest behind while ``lag_s > 0``, else ``None``.
    """

    table: str
    writer: str | None
    target_s: float | None
    lag_s: float
    missed: bool
    committed_barrier: int | None
    processed_barrier: int | None
    bottleneck: str | None


@dataclass(frozen=True)
class JobFreshness:
    """One job's own lag behind its inputs.

    Attributes:
        job, status, current_barrier: the registered job.
        written_barrier: newest barrier WRITTEN in all its sinks; ready_barrier: newest barrier
            WRITTEN in all its inputs (root inputs: the newest generated); ``None``: none.
        lag_s: seconds since its inputs made the first barrier it has not WRITTEN available
            (0.0 when ``written_barrier >= ready_barrier``).
    """

    job: str
    status: str
    current_barrier: int | None
    written_barrier: int | None
    ready_barrier: int | None
    lag_s: float


@dataclass(frozen=True)
class FreshnessReport:
    """Freshness of a topology's tables at ``measured_at_ms`` (epoch ms).

    Attributes:
        newest_barrier: newest generated barrier ``g`` (``None``: none yet) and
            ``newest_barrier_age_s``: seconds since it was generated (barrier generation's own lag).
        tables: {table: :class:`TableFreshness`} of every non-root table, by name.
        jobs: {job id: :class:`JobFreshness`}.
    """

    topology: str
    measured_at_ms: int
    newest_barrier: int | None
    newest_barrier_age_s: float | None
    tables: dict[str, TableFreshness] = field(default_factory=dict)
    jobs: dict[str, JobFreshness] = field(default_factory=dict)

    @property
    def missed(self) -> list[str]:
        """Names of the tables that miss their target, sorted."""
        return [name for name, t in self.tables.items() if t.missed]

    def describe_misses(self, tables: list[str] | None = None) -> str:
        """The missing tables (of ``tables`` if given), ``; ``-separated: lag, target, committed
        barrier and bottleneck job (for errors and logs)."""
        return "; ".join(
            f"{t.table}: lag {t.lag_s:.1f} s > target {t.target_s:g} s (committed barrier "
            f"{t.committed_barrier}, newest {self.newest_barrier}; bottleneck job {t.bottleneck!r})"
            for t in self.tables.values() if t.missed and (tables is None or t.table in tables)
        )


class FreshnessManager:
    """Freshness of a topology's tables against their targets (see module docstring).

    Args:
        core: the metastore's engine and transactions.
        registry: where the jobs' sources and sinks come from (:meth:`RegistryManager.job_io`).
    """

    def __init__(self, core: MetastoreCore, registry: RegistryManager) -> None:
        self._core = core
        self._registry = registry

    def report(self, topology: str, *, now: int | None = None) -> FreshnessReport:
        """The :class:`FreshnessReport` of ``topology`` at ``now`` (epoch ms, default: the clock).

        An unregistered topology has no tables: an empty report (callers that must refuse
        unknown names check :meth:`RegistryManager.topologies` first, as the REST API does).
        """
        now = now_ms() if now is None else now
        io = self._registry.job_io(topology)
        with self._core.transaction() as s:
            tables = s.execute(
                select(TableRow.id, TableRow.name, TableRow.kind, TableRow.freshness_ms)
                .where(TableRow.topology == topology).order_by(TableRow.name)
            ).all()
            ids = {name: tid for tid, name, _, _ in tables}
            names = {tid: name for name, tid in ids.items()}
            roots = {name for _, name, kind, _ in tables if kind == "root"}
            newest = s.execute(
                select(BarrierRow.barrier_id, BarrierRow.created_at_ms).where(BarrierRow.topology == topology)
                .order_by(BarrierRow.barrier_id.desc()).limit(1)
            ).first()
            g = int(newest[0]) if newest else None
            written, reached = _committed_and_processed(s, ids, names)
            for name in roots:  # a root table has every generated barrier at generation
                if g is not None:
                    written[name] = g
            jobs = {r.id: r for r in s.scalars(select(JobRow).where(JobRow.topology == topology))}
            job_out = {
                job_id: self._job_lag(
                    s, topology, job_id, jobs.get(job_id), sources, sinks, written, ids, roots, g, now
                )
                for job_id, (sources, sinks) in sorted(io.items())
            }
            out = self._tables_freshness(s, topology, tables, io, job_out, written, reached, g, now)
        return FreshnessReport(
            topology=topology, measured_at_ms=now, newest_barrier=g,
            newest_barrier_age_s=None if newest is None else max(0, now - int(newest[1])) / 1000,
            tables=out, jobs=job_out,
        )

    def _tables_freshness(
        self, s: Session, topology: str, tables: list[Any], io: dict[str, tuple[tuple[str, ...], tuple[str, ...]]],
        job_out: dict[str, JobFreshness], written: dict[str, int], reached: dict[str, int], g: int | None,
        now: int,
    ) -> dict[str, TableFreshness]:
        """``{table: TableFreshness}`` of the topology's intermediate tables (``tables``: id, name,
        kind, freshness target in ms) at ``now``; ``g`` is the newest barrier."""
        writer = {t: job_id for job_id, (_, sinks) in io.items() for t in sinks}
        out: dict[str, TableFreshness] = {}
        for _, name, kind, target_ms in tables:
            if kind == "root":
                continue
            c = written.get(name)
            behind = g is not None and (c is None or c < g)
            lag_ms = max(0, now - self._generated_after(s, topology, c)) if behind else 0
            target_s = None if target_ms is None else target_ms / 1000
            out[name] = TableFreshness(
                table=name, writer=writer.get(name), target_s=target_s, lag_s=lag_ms / 1000,
                missed=target_ms is not None and lag_ms > target_ms, committed_barrier=c,
                processed_barrier=reached.get(name),
                bottleneck=_bottleneck(name, io, writer, job_out) if behind else None,
            )
        return out

    def _generated_after(self, s: Session, topology: str, barrier: int | None) -> int:
        """Generation time of the first barrier after ``barrier`` (of the oldest kept if ``None``)."""
        query = select(BarrierRow.created_at_ms).where(BarrierRow.topology == topology)
        if barrier is not None:
            query = query.where(BarrierRow.barrier_id > barrier)
        return int(s.scalar(query.order_by(BarrierRow.barrier_id).limit(1)) or 0)

    def _job_lag(
        self, s: Session, topology: str, job_id: str, row: JobRow | None, sources: tuple[str, ...],
        sinks: tuple[str, ...], written: dict[str, int], ids: dict[str, int], roots: set[str], g: int | None,
        now: int,
    ) -> JobFreshness:
        done = min((written.get(t, 0) for t in sinks), default=0)
        ready = min((written.get(t, 0) for t in sources), default=g or 0)
        lag_ms = 0
        if sinks and ready > done:  # a job with no sink registered yet has nothing to write
            first = s.execute(
                select(BarrierRow.barrier_id, BarrierRow.created_at_ms)
                .where(BarrierRow.topology == topology, BarrierRow.barrier_id > done)
                .order_by(BarrierRow.barrier_id).limit(1)
            ).first()
            if first is not None:
                available = int(first[1])
                for src in sources:
                    if src in roots:
                        continue
                    at = s.scalar(
                        select(TableBarrierRow.written_at_ms).where(
                            TableBarrierRow.table_id == ids[src], TableBarrierRow.state == BarrierState.WRITTEN,
                            TableBarrierRow.barrier_id >= int(first[0]),
                        ).order_by(TableBarrierRow.barrier_id).limit(1)
                    )
                    available = max(available, int(at or 0))
                lag_ms = max(0, now - available)
        return JobFreshness(
            job=job_id, status=row.status if row else "unknown", current_barrier=row.current_barrier if row else None,
            written_barrier=done or None, ready_barrier=ready or None, lag_s=lag_ms / 1000,
        )


def _bottleneck(
    table: str, io: dict[str, tuple[tuple[str, ...], tuple[str, ...]]], writer: dict[str, str],
    jobs: dict[str, JobFreshness],
) -> str | None:
    """The upstream job of ``table`` with the largest own lag (ties: the most upstream)."""
    upstream: list[str] = []  # breadth-first from the table: later entries are further upstream
    frontier = [table]
    while frontier:
        nxt: list[str] = []
        for t in frontier:
            job_id = writer.get(t)
            if job_id is not None and job_id not in upstream:
                upstream.append(job_id)
                nxt.extend(io[job_id][0])
        frontier = nxt
    best = max(
        ((jobs[j].lag_s, i, j) for i, j in enumerate(upstream) if jobs[j].lag_s > 0), default=None
    )
    return best[2] if best else None


def _committed_and_processed(
    s: Session, ids: dict[str, int], names: dict[int, str]
) -> tuple[dict[str, int], dict[str, int]]:
    """``({table: newest WRITTEN barrier}, {table: newest barrier in any state})`` of the tables ``ids``."""
    written: dict[str, int] = {}
    reached: dict[str, int] = {}
    for tid, state, top in s.execute(
        select(TableBarrierRow.table_id, TableBarrierRow.state, func.max(TableBarrierRow.barrier_id))
        .where(TableBarrierRow.table_id.in_(list(ids.values())))
        .group_by(TableBarrierRow.table_id, TableBarrierRow.state)
    ):
        name = names[tid]
        reached[name] = max(reached.get(name, 0), int(top))
        if state == BarrierState.WRITTEN:
            written[name] = int(top)
    return written, reached
