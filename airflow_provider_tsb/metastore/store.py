"""The MetaService's state API over the tsb metastore.

:class:`MetaStore` is the one entry point through which the provider's operators, sensors,
triggers, REST API and the Spark apps' catalog read and write the metastore. It implements:

* registration (FLIP-276 "MetaService": ``/register/source``, ``/register/sink``,
  ``/unregister``), atomic across processes: the union of registered jobs stays acyclic and
  single-writer;
* barrier generation (FLIP-276 "Timestamp Barrier"): strictly increasing ids per topology,
  recording the Delta version of every root table in the same transaction, idempotent per run
  key;
* per (table, barrier) states PROCESSED / WRITTEN (DESIGN.md "Barrier states");
* version resolution at READ_COMMITTED, REPEATABLE_READ and AS OF a barrier (FLIP-276 "Data
  Consistency Type") with monotonic reads and leases;
* job heartbeats and per-barrier timings for the delay views.

All times are epoch milliseconds (UTC); versions are Delta table versions; barrier ids are
integers strictly increasing per topology.
"""

from __future__ import annotations

import operator
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, and_, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.exceptions import (
    DoubleWriterError,
    InconsistentReadError,
    MetastoreError,
    TopologyError,
    UnknownBarrierError,
    UnknownJobError,
    UnknownTableError,
)
from airflow_provider_tsb.metastore.engine import create_metastore_engine, transaction
from airflow_provider_tsb.metastore.models import (
    PROCESSED,
    WRITTEN,
    BarrierRow,
    JobBarrierRow,
    JobRow,
    JobSinkRow,
    JobSourceRow,
    LeaseRow,
    LeaseVersionRow,
    RegistryLockRow,
    TableBarrierRow,
    TableRow,
    TopologyRow,
)
from airflow_provider_tsb.names import normalize_table_name, validate_job_id
from airflow_provider_tsb.topology import Job, Table, Topology, build_graph, cycle_error

if TYPE_CHECKING:  # networkx costs ~1 s to import: only the functions that build graphs load it
    import networkx as nx


def now_ms() -> int:
    """Current time in epoch milliseconds."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class BarrierInfo:
    """A generated barrier.

    Attributes:
        topology: topology name.
        barrier_id: strictly increasing per topology, from 1.
        ts_ms: barrier timestamp (epoch ms): system time or the event-time watermark.
        ts_kind: ``system`` or ``event``.
        created_at_ms: generation time.
        run_key: idempotency key it was generated for (e.g. the DAG run id).
        root_versions: Delta version of every root table at the barrier, {table: version}.
        created: False when an existing barrier was returned for a repeated run key.
        final: the last barrier of a bounded input (FLIP-147 "end of input"): streaming jobs
            stop once they have committed it.
    """

    topology: str
    barrier_id: int
    ts_ms: int
    ts_kind: str
    created_at_ms: int
    run_key: str | None
    root_versions: dict[str, int]
    created: bool = True
    final: bool = False


@dataclass(frozen=True)
class TableState:
    """State of one barrier in one table (a row of the table's barrier history)."""

    table: str
    barrier_id: int
    state: str
    version: int | None
    job_id: str | None
    processed_at_ms: int | None
    written_at_ms: int | None
    manifest: dict[str, Any] | None = None
    inputs: dict[str, Any] | None = None


@dataclass(frozen=True)
class TableVersion:
    """What to read of one table.

    Attributes:
        table: canonical name.
        location: Delta table location.
        version: Delta version to read (for a PROCESSED table at READ_COMMITTED: the newest
            WRITTEN version below the barrier, to which ``staged`` is applied); ``None`` when
            the table has no version yet.
        barrier_id: barrier the version belongs to (``None`` at READ_UNCOMMITTED when untagged).
        state: ``WRITTEN``, ``PROCESSED`` or ``LATEST`` (READ_UNCOMMITTED).
        staged: the PROCESSED manifest ({"mode": "append"|"overwrite", "files": [...]}) to
            apply on top of ``version``, READ_COMMITTED only.
    """

    table: str
    location: str
    version: int | None
    barrier_id: int | None
    state: str
    staged: dict[str, Any] | None = None


@dataclass(frozen=True)
class Resolution:
    """The answer to "which versions do I read for tables Q at this level?".

    Attributes:
        level: the consistency level resolved.
        barrier_id: the barrier all tables are read at (``None`` for READ_UNCOMMITTED).
        tables: {table name: :class:`TableVersion`} for every table of Q.
        lease_id / lease_expires_at_ms: set when a lease pins the versions.
    """

    level: ConsistencyLevel
    barrier_id: int | None
    tables: dict[str, TableVersion]
    lease_id: str | None = None
    lease_expires_at_ms: int | None = None
    as_of: int | None = None

    @property
    def versions(self) -> dict[str, int | None]:
        """{table: Delta version}."""
        return {name: tv.version for name, tv in self.tables.items()}


@dataclass(frozen=True)
class JobInfo:
    """A registered job with its sources, sinks and liveness."""

    id: str
    topology: str
    application: str
    status: str
    registered_at_ms: int
    last_heartbeat_ms: int | None
    current_barrier: int | None
    sources: tuple[str, ...]
    sinks: tuple[str, ...]
    message: str | None = None

    def is_stale(self, threshold_s: float, now: int | None = None) -> bool:
        """Registered and running but silent for more than ``threshold_s`` seconds (a zombie)."""
        if self.status != "running":
            return False
        last = self.last_heartbeat_ms or self.registered_at_ms
        return ((now or now_ms()) - last) > threshold_s * 1000


@dataclass(frozen=True)
class JobBarrierTiming:
    """One job's run of one barrier (epoch ms), as recorded by the app or the operator."""

    job_id: str
    barrier_id: int
    status: str
    started_at_ms: int | None
    finished_at_ms: int | None
    attempts: int


@dataclass(frozen=True)
class TableInfo:
    """A registered table."""

    id: int
    name: str
    topology: str
    kind: str
    location: str
    event_time_column: str | None
    writer: str | None = None
    readers: tuple[str, ...] = field(default_factory=tuple)


class MetaStore:
    """The metastore API (see module docstring).

    Args:
        url: SQLAlchemy URL of the metastore, or an existing :class:`~sqlalchemy.Engine`.

    Every method runs in its own transaction. Methods raise :class:`MetastoreError` when the
    schema is missing (run ``tsb db migrate``) and the ``Unknown*Error`` family when a name
    is not registered.
    """

    def __init__(self, url: str | Engine) -> None:
        self.engine: Engine = url if isinstance(url, Engine) else create_metastore_engine(url)
        self.url = self.engine.url.render_as_string(hide_password=False)

    # ------------------------------------------------------------------ schema
    def migrate(self) -> str:
        """Create or upgrade the schema to the newest Alembic revision; returns the revision."""
        from airflow_provider_tsb.metastore.migrate import upgrade

        return upgrade(self.engine)

    def check(self) -> str:
        """Return the current revision; raise :class:`MetastoreError` if not up to date."""
        from airflow_provider_tsb.metastore.migrate import check

        return check(self.engine)

    def dispose(self) -> None:
        """Close pooled connections."""
        self.engine.dispose()

    def _tx(self, write: bool = False):  # noqa: ANN202 - context manager
        return _GuardedTransaction(self.engine, write)

    # ------------------------------------------------------------ registration
    def register_topology(self, topology: Topology) -> None:
        """Register every table and job of a (validated) topology; see :meth:`register_job`.

        Raises:
            TopologyError and subclasses: as :meth:`register_job`.
        """
        topology.validate()
        for table in topology.root_tables:
            self.register_table(topology.name, table, topology.warehouse)
        for job in topology.jobs_in_order():
            tables = {name: topology.tables[name] for name in (*job.sources, *job.sinks)}
            self.register_job(topology.name, job, tables, warehouse=topology.warehouse)

    def register_table(self, topology: str, table: Table, warehouse: str | None = None) -> TableInfo:
        """Register (or find) a table of ``topology``. Idempotent.

        Raises:
            TopologyError: the table is registered already with another topology, kind or
                location (names the table and both definitions).
        """
        with self._tx(write=True) as s:
            self._lock_registry(s)
            self._ensure_topology(s, topology)
            row = self._upsert_table(s, topology, table, warehouse)
            return self._table_info(s, row)

    def register_job(
        self,
        topology: str,
        job: Job,
        tables: Mapping[str, Table] | None = None,
        *,
        warehouse: str | None = None,
    ) -> JobInfo:
        """Register a job with its sources and sinks, atomically.

        In one transaction holding the registry lock: insert missing tables, check that every
        sink has no other writer and is not a root table, and that the union of all registered
        jobs plus this one is acyclic. Re-registering the same job with the same tables is a
        no-op; with different tables the registration is replaced.

        Args:
            topology: topology name.
            job: the job (id, application, sources, sinks).
            tables: table declarations for the job's tables (kind and location); tables not
                given must be registered already or become intermediate tables at the default
                location.
            warehouse: warehouse for tables without an explicit location.

        Returns:
            The registered job.

        Raises:
            DoubleWriterError: a sink has another writer (names the table and both jobs).
            CycleError: the registration would close a cycle (shows the cycle path).
            TopologyError: a sink is a root table, or a table belongs to another topology.
            UnknownTableError: a source is neither registered nor declared.
        """
        validate_job_id(job.id)
        tables = dict(tables or {})
        try:
            with self._tx(write=True) as s:
                self._lock_registry(s)
                self._ensure_topology(s, topology)
                existing = s.get(JobRow, job.id)
                if existing is not None and existing.topology != topology:
                    raise TopologyError(
                        f"job {job.id!r} is registered in topology {existing.topology!r}, "
                        f"cannot register it in {topology!r}; unregister it first"
                    )
                rows: dict[str, TableRow] = {}
                for name in job.sinks:
                    decl = tables.get(name) or Table(name, "intermediate")
                    known = s.scalar(select(TableRow.kind).where(TableRow.name == name))
                    if decl.kind == "root" or known == "root":
                        raise TopologyError(
                            f"table {name!r} is a root table and cannot be a sink of job {job.id!r}"
                        )
                    rows[name] = self._upsert_table(s, topology, decl, warehouse)
                for name in job.sources:
                    decl = tables.get(name)
                    row = s.scalar(select(TableRow).where(TableRow.name == name))
                    if row is None:
                        if decl is None or decl.kind == "external":
                            decl = Table(name, "intermediate", decl.location if decl else None)
                        row = self._upsert_table(s, topology, decl, warehouse)
                    rows[name] = row
                for name in job.sinks:
                    if rows[name].kind == "root":
                        raise TopologyError(
                            f"table {name!r} is a root table and cannot be a sink of job {job.id!r}"
                        )
                    writer = s.scalar(
                        select(JobSinkRow.job_id).where(JobSinkRow.table_id == rows[name].id)
                    )
                    if writer is not None and writer != job.id:
                        first, second = sorted((writer, job.id))
                        raise DoubleWriterError(
                            f"table {name!r} has two writer jobs, {first!r} and {second!r}; "
                            "every non-root table has exactly one writer job",
                            name,
                            (first, second),
                        )
                graph = self._registered_graph(s, exclude_job=job.id)
                jnode = f"job:{job.id}"
                graph.add_node(jnode)
                for name in job.sources:
                    graph.add_edge(f"table:{name}", jnode)
                for name in job.sinks:
                    graph.add_edge(jnode, f"table:{name}")
                cycle = cycle_error(graph)
                if cycle is not None:
                    raise cycle
                ts = now_ms()
                if existing is None:
                    s.add(
                        JobRow(
                            id=job.id,
                            topology=topology,
                            application=job.application,
                            status="registered",
                            registered_at_ms=ts,
                        )
                    )
                else:
                    existing.application = job.application
                s.execute(delete(JobSourceRow).where(JobSourceRow.job_id == job.id))
                s.execute(delete(JobSinkRow).where(JobSinkRow.job_id == job.id))
                s.flush()
                for name in job.sources:
                    s.add(JobSourceRow(job_id=job.id, table_id=rows[name].id))
                for name in job.sinks:
                    s.add(JobSinkRow(job_id=job.id, table_id=rows[name].id))
                s.flush()
        except IntegrityError as exc:
            # the unique constraint on tsb_job_sink.table_id caught a racing second writer
            raise self._double_writer_from_race(job) from exc
        return self.job(job.id)

    def _double_writer_from_race(self, job: Job) -> DoubleWriterError:
        for name in job.sinks:
            writer = self.writer_of(name)
            if writer is not None and writer != job.id:
                first, second = sorted((writer, job.id))
                return DoubleWriterError(
                    f"table {name!r} has two writer jobs, {first!r} and {second!r}; "
                    "every non-root table has exactly one writer job",
                    name,
                    (first, second),
                )
        return DoubleWriterError(
            f"job {job.id!r} lost a registration race for its sinks {list(job.sinks)}; retry",
            job.sinks[0] if job.sinks else "",
            (job.id, "?"),
        )

    def register_source(self, job_id: str, table: str) -> JobInfo:
        """FLIP-276 ``/register/source``: add ``table`` to the sources of a registered job.

        Raises:
            UnknownJobError: the job is not registered.
            UnknownTableError / CycleError: as :meth:`register_job`.
        """
        info = self.job(job_id)
        name = normalize_table_name(table)
        if self.table(name, required=False) is None:
            raise UnknownTableError(
                f"cannot register source {name!r} for job {job_id!r}: the table is not "
                "registered; register the job that writes it (or the root table) first"
            )
        if name in info.sources:
            return info
        job = Job(job_id, info.application, (*info.sources, name), info.sinks)
        return self.register_job(info.topology, job)

    def register_sink(self, job_id: str, table: str, location: str | None = None) -> JobInfo:
        """FLIP-276 ``/register/sink``: add ``table`` to the sinks of a registered job.

        Raises:
            UnknownJobError, DoubleWriterError, CycleError, TopologyError: as :meth:`register_job`.
        """
        info = self.job(job_id)
        name = normalize_table_name(table)
        if name in info.sinks:
            return info
        job = Job(job_id, info.application, info.sources, (*info.sinks, name))
        tables = {name: Table(name, "intermediate", location)}
        return self.register_job(info.topology, job, tables)

    def create_job(self, topology: str, job_id: str, application: str = "") -> JobInfo:
        """Register a job with no tables yet (the REST API's first ``/register/*`` call)."""
        validate_job_id(job_id)
        with self._tx(write=True) as s:
            self._lock_registry(s)
            self._ensure_topology(s, topology)
            if s.get(JobRow, job_id) is None:
                s.add(
                    JobRow(
                        id=job_id,
                        topology=topology,
                        application=application,
                        status="registered",
                        registered_at_ms=now_ms(),
                    )
                )
        return self.job(job_id)

    def unregister_job(self, job_id: str) -> bool:
        """FLIP-276 ``/unregister``: remove a job's registration (its tables and data stay).

        Returns:
            True if the job was registered.
        """
        with self._tx(write=True) as s:
            self._lock_registry(s)
            s.execute(delete(JobSourceRow).where(JobSourceRow.job_id == job_id))
            s.execute(delete(JobSinkRow).where(JobSinkRow.job_id == job_id))
            s.execute(delete(JobBarrierRow).where(JobBarrierRow.job_id == job_id))
            result = s.execute(delete(JobRow).where(JobRow.id == job_id))
            return bool(result.rowcount)

    def _lock_registry(self, s: Session) -> None:
        # The first statement of every registration writes the single lock row: on SQLite the
        # transaction already holds the write lock (BEGIN IMMEDIATE); on PostgreSQL this row lock
        # serialises registrations, so the cycle check below sees a graph no one else changes.
        result = s.execute(
            update(RegistryLockRow).where(RegistryLockRow.id == 1).values(version=RegistryLockRow.version + 1)
        )
        if not result.rowcount:
            try:
                with s.begin_nested():
                    s.add(RegistryLockRow(id=1, version=1))
            except IntegrityError:
                pass
            s.execute(
                update(RegistryLockRow)
                .where(RegistryLockRow.id == 1)
                .values(version=RegistryLockRow.version + 1)
            )

    def _ensure_topology(self, s: Session, topology: str) -> TopologyRow:
        row = s.get(TopologyRow, topology)
        if row is None:
            validate_job_id(topology)
            row = TopologyRow(name=topology, created_at_ms=now_ms(), lock_version=0)
            s.add(row)
            s.flush()
        return row

    def _upsert_table(self, s: Session, topology: str, table: Table, warehouse: str | None) -> TableRow:
        name = normalize_table_name(table.name)
        location = Table(name, table.kind, table.location).resolved_location(warehouse)
        row = s.scalar(select(TableRow).where(TableRow.name == name))
        kind = "root" if table.kind == "root" else "intermediate"
        if row is None:
            row = TableRow(
                name=name,
                topology=topology,
                kind=kind,
                location=location,
                event_time_column=table.event_time_column,
                created_at_ms=now_ms(),
            )
            s.add(row)
            s.flush()
            return row
        if row.topology != topology:
            raise TopologyError(
                f"table {name!r} belongs to topology {row.topology!r}, not {topology!r}; "
                "a table belongs to exactly one topology"
            )
        if row.kind != kind and table.kind != "external":
            raise TopologyError(
                f"table {name!r} is registered as a {row.kind} table and declared now as "
                f"{table.kind}; a table is either a root table or the sink of one job"
            )
        if table.location and row.location != location:
            raise TopologyError(
                f"table {name!r} is registered at location {row.location!r} and declared now at "
                f"{location!r}; move the table or fix the declaration"
            )
        if table.event_time_column and row.event_time_column != table.event_time_column:
            row.event_time_column = table.event_time_column
        return row

    def _registered_graph(self, s: Session, exclude_job: str | None = None) -> nx.DiGraph:
        names = dict(s.execute(select(TableRow.id, TableRow.name)).all())
        import networkx as nx

        graph = nx.DiGraph()
        for job_id, table_id in s.execute(select(JobSourceRow.job_id, JobSourceRow.table_id)):
            if job_id != exclude_job:
                graph.add_edge(f"table:{names[table_id]}", f"job:{job_id}")
        for job_id, table_id in s.execute(select(JobSinkRow.job_id, JobSinkRow.table_id)):
            if job_id != exclude_job:
                graph.add_edge(f"job:{job_id}", f"table:{names[table_id]}")
        return graph

    # ------------------------------------------------------------------ reading registrations
    def job(self, job_id: str) -> JobInfo:
        """The registered job ``job_id``.

        Raises:
            UnknownJobError: the job is not registered.
        """
        with self._tx() as s:
            row = s.get(JobRow, job_id)
            if row is None:
                raise UnknownJobError(
                    f"job {job_id!r} is not registered in the tsb metastore ({self._shown_url()}); "
                    "register it (the job operator does) before using it"
                )
            return self._job_info(s, row)

    def jobs(self, topology: str | None = None) -> list[JobInfo]:
        """All registered jobs (of one topology), ordered by id. Three queries, whatever the count."""
        with self._tx() as s:
            query = select(JobRow).order_by(JobRow.id)
            if topology:
                query = query.where(JobRow.topology == topology)
            rows = list(s.scalars(query))
            ids = [r.id for r in rows]
            sources: dict[str, list[str]] = {i: [] for i in ids}
            sinks: dict[str, list[str]] = {i: [] for i in ids}
            for link, out in ((JobSourceRow, sources), (JobSinkRow, sinks)):
                pairs = s.execute(
                    select(link.job_id, TableRow.name).join(TableRow, TableRow.id == link.table_id)
                    .where(link.job_id.in_(ids)).order_by(TableRow.name)
                )
                for job_id, name in pairs:
                    out[job_id].append(name)
            return [self._job_info(s, r, tuple(sources[r.id]), tuple(sinks[r.id])) for r in rows]

    def _job_info(
        self, s: Session, row: JobRow, sources: tuple[str, ...] | None = None, sinks: tuple[str, ...] | None = None
    ) -> JobInfo:
        if sources is not None and sinks is not None:
            return self._job_info_of(row, sources, sinks)
        sources = s.scalars(
            select(TableRow.name).join(JobSourceRow, JobSourceRow.table_id == TableRow.id)
            .where(JobSourceRow.job_id == row.id).order_by(TableRow.name)
        ).all()
        sinks = s.scalars(
            select(TableRow.name).join(JobSinkRow, JobSinkRow.table_id == TableRow.id)
            .where(JobSinkRow.job_id == row.id).order_by(TableRow.name)
        ).all()
        return self._job_info_of(row, tuple(sources), tuple(sinks))

    @staticmethod
    def _job_info_of(row: JobRow, sources: tuple[str, ...], sinks: tuple[str, ...]) -> JobInfo:
        return JobInfo(
            id=row.id,
            topology=row.topology,
            application=row.application,
            status=row.status,
            registered_at_ms=row.registered_at_ms,
            last_heartbeat_ms=row.last_heartbeat_ms,
            current_barrier=row.current_barrier,
            sources=sources,
            sinks=sinks,
            message=row.message,
        )

    def table(self, name: str, *, required: bool = True) -> TableInfo | None:
        """The registered table ``name`` (``None`` when missing and not ``required``).

        Raises:
            UnknownTableError: the table is not registered and ``required``.
        """
        canonical = normalize_table_name(name)
        with self._tx() as s:
            row = s.scalar(select(TableRow).where(TableRow.name == canonical))
            if row is None:
                if required:
                    raise UnknownTableError(
                        f"table {canonical!r} is not registered in the tsb metastore; "
                        "check the name or register the topology that declares it"
                    )
                return None
            return self._table_info(s, row)

    def tables(self, topology: str | None = None) -> list[TableInfo]:
        """All registered tables (of one topology), ordered by name. Three queries, whatever the count."""
        with self._tx() as s:
            query = select(TableRow).order_by(TableRow.name)
            if topology:
                query = query.where(TableRow.topology == topology)
            rows = list(s.scalars(query))
            ids = [r.id for r in rows]
            writers = dict(
                s.execute(
                    select(JobSinkRow.table_id, JobSinkRow.job_id).where(JobSinkRow.table_id.in_(ids))
                ).all()
            )
            readers: dict[int, list[str]] = {i: [] for i in ids}
            for table_id, job_id in s.execute(
                select(JobSourceRow.table_id, JobSourceRow.job_id)
                .where(JobSourceRow.table_id.in_(ids)).order_by(JobSourceRow.job_id)
            ):
                readers[table_id].append(job_id)
            return [
                TableInfo(r.id, r.name, r.topology, r.kind, r.location, r.event_time_column,
                          writers.get(r.id), tuple(readers[r.id]))
                for r in rows
            ]

    def _table_info(self, s: Session, row: TableRow) -> TableInfo:
        writer = s.scalar(select(JobSinkRow.job_id).where(JobSinkRow.table_id == row.id))
        readers = s.scalars(
            select(JobSourceRow.job_id).where(JobSourceRow.table_id == row.id).order_by(JobSourceRow.job_id)
        ).all()
        return TableInfo(
            id=row.id,
            name=row.name,
            topology=row.topology,
            kind=row.kind,
            location=row.location,
            event_time_column=row.event_time_column,
            writer=writer,
            readers=tuple(readers),
        )

    def writer_of(self, table: str) -> str | None:
        """Id of the job registered as the writer of ``table`` (``None`` if none)."""
        canonical = normalize_table_name(table)
        with self._tx() as s:
            return s.scalar(
                select(JobSinkRow.job_id)
                .join(TableRow, TableRow.id == JobSinkRow.table_id)
                .where(TableRow.name == canonical)
            )

    def topologies(self) -> list[str]:
        """Names of all registered topologies."""
        with self._tx() as s:
            return list(s.scalars(select(TopologyRow.name).order_by(TopologyRow.name)))

    def graph(self, topology: str | None = None) -> nx.DiGraph:
        """The registered tables and jobs as a DiGraph (same node scheme as ``Topology.graph``)."""
        tables = [
            Table(t.name, "root" if t.kind == "root" else "intermediate", t.location)
            for t in self.tables(topology)
        ]
        jobs = [Job(j.id, j.application, j.sources, j.sinks) for j in self.jobs(topology)]
        return build_graph(tables, jobs)

    # ------------------------------------------------------------------ barriers
    def create_barrier(
        self,
        topology: str,
        root_versions: Mapping[str, int],
        *,
        ts_ms: int | None = None,
        ts_kind: str = "system",
        run_key: str | None = None,
        final: bool = False,
    ) -> BarrierInfo:
        """Generate the next barrier of ``topology`` (FLIP-276 "Timestamp Barrier").

        In one transaction: lock the topology, return the existing barrier if ``run_key`` was
        used before (idempotent per DAG run), else insert barrier ``max + 1`` and a WRITTEN row
        with the Delta version of every root table.

        Args:
            topology: topology name (registered).
            root_versions: {root table: Delta version} read just before the call; must name
                every registered root table of the topology.
            ts_ms: barrier timestamp, epoch ms; system time when omitted.
            ts_kind: ``system`` or ``event`` (``ts_ms`` is then the event-time watermark).
            run_key: idempotency key, e.g. the Airflow DAG run id.
            final: mark the barrier as the end of a bounded input (FLIP-147): streaming jobs
                stop after committing it. Later barriers may still be generated (a new stretch).

        Raises:
            UnknownTableError: a root table is missing from ``root_versions`` or unregistered.
            TopologyError: the topology is unknown, a version goes backwards, or an event-time
                timestamp is below the previous barrier's.
        """
        if ts_kind not in ("system", "event"):
            raise ValueError(f"ts_kind must be 'system' or 'event', got {ts_kind!r}")
        versions = {normalize_table_name(k): int(v) for k, v in root_versions.items()}
        with self._tx(write=True) as s:
            locked = s.execute(
                update(TopologyRow)
                .where(TopologyRow.name == topology)
                .values(lock_version=TopologyRow.lock_version + 1)
            )
            created_at = now_ms()  # under the topology lock: timestamps rise with barrier ids
            if not locked.rowcount:
                raise TopologyError(
                    f"topology {topology!r} is not registered; register its tables and jobs "
                    "(the barrier operator does it from the DAG file's Topology) first"
                )
            if run_key is not None:
                found = s.scalar(
                    select(BarrierRow).where(BarrierRow.topology == topology, BarrierRow.run_key == run_key)
                )
                if found is not None:
                    return self._barrier_info(s, found, created=False)
            roots = dict(
                s.execute(
                    select(TableRow.name, TableRow.id).where(
                        TableRow.topology == topology, TableRow.kind == "root"
                    )
                ).all()
            )
            missing = sorted(set(roots) - set(versions))
            if missing:
                raise UnknownTableError(
                    f"barrier generation for topology {topology!r} lacks the Delta version of root "
                    f"table(s) {missing}; every root table's version is recorded at each barrier"
                )
            unknown = sorted(set(versions) - set(roots))
            if unknown:
                raise UnknownTableError(
                    f"{unknown} are not registered root tables of topology {topology!r}"
                )
            last = s.scalar(
                select(BarrierRow).where(BarrierRow.topology == topology)
                .order_by(BarrierRow.barrier_id.desc()).limit(1)
            )
            ts = int(ts_ms if ts_ms is not None else created_at)
            if last is not None and ts_ms is None and ts_kind == "system" and last.ts_kind == "system":
                ts = max(ts, last.ts_ms)  # a clock step back never orders a barrier before its predecessor
            if last is not None:
                if ts_kind == "event" and last.ts_kind == "event" and ts < last.ts_ms:
                    raise TopologyError(
                        f"event-time barrier for topology {topology!r} would go backwards: "
                        f"watermark {ts} < {last.ts_ms} of barrier {last.barrier_id}"
                    )
                prev = dict(
                    s.execute(
                        select(TableBarrierRow.table_id, TableBarrierRow.version).where(
                            TableBarrierRow.barrier_id == last.barrier_id,
                            TableBarrierRow.table_id.in_(list(roots.values())),
                        )
                    ).all()
                )
                for name, table_id in roots.items():
                    if table_id in prev and prev[table_id] is not None and versions[name] < prev[table_id]:
                        raise TopologyError(
                            f"root table {name!r} is at Delta version {versions[name]}, below version "
                            f"{prev[table_id]} recorded at barrier {last.barrier_id}; a root table "
                            "must not be restored under a running topology"
                        )
            barrier_id = (last.barrier_id if last is not None else 0) + 1
            row = BarrierRow(
                topology=topology,
                barrier_id=barrier_id,
                ts_ms=ts,
                ts_kind=ts_kind,
                created_at_ms=created_at,
                run_key=run_key,
                final=bool(final),
            )
            s.add(row)
            s.flush()
            if roots:
                s.execute(
                    insert(TableBarrierRow),
                    [
                        {
                            "table_id": table_id,
                            "barrier_id": barrier_id,
                            "state": WRITTEN,
                            "version": versions[name],
                            "written_at_ms": created_at,
                            "processed_at_ms": created_at,
                        }
                        for name, table_id in roots.items()
                    ],
                )
            return BarrierInfo(topology, barrier_id, ts, ts_kind, created_at, run_key, versions, final=bool(final))

    def _barrier_info(self, s: Session, row: BarrierRow, created: bool = True) -> BarrierInfo:
        versions = dict(
            s.execute(
                select(TableRow.name, TableBarrierRow.version)
                .join(TableBarrierRow, TableBarrierRow.table_id == TableRow.id)
                .where(
                    TableRow.topology == row.topology,
                    TableRow.kind == "root",
                    TableBarrierRow.barrier_id == row.barrier_id,
                )
            ).all()
        )
        return BarrierInfo(
            row.topology, row.barrier_id, row.ts_ms, row.ts_kind, row.created_at_ms, row.run_key,
            {k: int(v) for k, v in versions.items()}, created, bool(row.final),
        )

    def barrier(self, topology: str, barrier_id: int) -> BarrierInfo:
        """Barrier ``barrier_id`` of ``topology`` with its root versions.

        Raises:
            UnknownBarrierError: no such barrier (names the newest one).
        """
        with self._tx() as s:
            row = s.get(BarrierRow, (topology, barrier_id))
            if row is None:
                newest = s.scalar(select(func.max(BarrierRow.barrier_id)).where(BarrierRow.topology == topology))
                raise UnknownBarrierError(
                    f"barrier {barrier_id} does not exist in topology {topology!r} "
                    f"(newest barrier: {newest})"
                )
            return self._barrier_info(s, row)

    def latest_barrier(self, topology: str) -> BarrierInfo | None:
        """The newest barrier of ``topology`` (``None`` before the first)."""
        with self._tx() as s:
            row = s.scalar(
                select(BarrierRow).where(BarrierRow.topology == topology)
                .order_by(BarrierRow.barrier_id.desc()).limit(1)
            )
            return self._barrier_info(s, row) if row is not None else None

    def latest_final_barrier(self, topology: str, since_ms: int | None = None) -> BarrierInfo | None:
        """The newest final barrier (FLIP-147 end of input) of ``topology`` generated at or after
        ``since_ms`` (epoch ms; any time if ``None``), or ``None``."""
        with self._tx() as s:
            query = select(BarrierRow).where(BarrierRow.topology == topology, BarrierRow.final.is_(True))
            if since_ms is not None:
                query = query.where(BarrierRow.created_at_ms >= since_ms)
            row = s.scalar(query.order_by(BarrierRow.barrier_id.desc()).limit(1))
            return self._barrier_info(s, row) if row is not None else None

    def barriers(
        self, topology: str, *, limit: int = 100, before: int | None = None, after: int | None = None,
        ascending: bool = False,
    ) -> list[BarrierInfo]:
        """Barriers of ``topology``, newest first (oldest first if ``ascending``), at most ``limit``.

        ``before`` / ``after`` bound the barrier ids (exclusive) for paging.
        """
        with self._tx() as s:
            query = select(BarrierRow).where(BarrierRow.topology == topology)
            if before is not None:
                query = query.where(BarrierRow.barrier_id < before)
            if after is not None:
                query = query.where(BarrierRow.barrier_id > after)
            order = BarrierRow.barrier_id.asc() if ascending else BarrierRow.barrier_id.desc()
            query = query.order_by(order).limit(limit)
            return [self._barrier_info(s, row) for row in s.scalars(query)]

    # ------------------------------------------------------------------ table states
    def _table_id(self, s: Session, table: str) -> int:
        canonical = normalize_table_name(table)
        table_id = s.scalar(select(TableRow.id).where(TableRow.name == canonical))
        if table_id is None:
            raise UnknownTableError(
                f"table {canonical!r} is not registered in the tsb metastore; check the name or "
                "register the topology that declares it"
            )
        return table_id

    def record_processed(
        self,
        table: str,
        barrier_id: int,
        job_id: str,
        manifest: Mapping[str, Any],
        inputs: Mapping[str, int] | None = None,
    ) -> None:
        """Mark barrier ``barrier_id`` PROCESSED in ``table`` with its staged-file manifest.

        A WRITTEN row is never downgraded (a replay after the commit is a no-op).
        """
        ts = now_ms()
        with self._tx(write=True) as s:
            table_id = self._table_id(s, table)
            row = s.get(TableBarrierRow, (table_id, barrier_id))
            if row is None:
                s.add(
                    TableBarrierRow(
                        table_id=table_id, barrier_id=barrier_id, state=PROCESSED, version=None,
                        job_id=job_id, processed_at_ms=ts, manifest=dict(manifest),
                        inputs=dict(inputs or {}),
                    )
                )
            elif row.state == PROCESSED:
                row.manifest = dict(manifest)
                row.processed_at_ms = ts
                row.job_id = job_id
                row.inputs = dict(inputs or {})

    def record_written(
        self,
        table: str,
        barrier_id: int,
        version: int,
        job_id: str | None = None,
        *,
        inputs: Mapping[str, int] | None = None,
        written_at_ms: int | None = None,
    ) -> None:
        """Mark barrier ``barrier_id`` WRITTEN in ``table`` at Delta ``version``. Idempotent.

        Raises:
            TopologyError: the barrier is WRITTEN already at another version (the Delta log
                and the metastore disagree; rebuild the index from the log).
            UnknownBarrierError: ``barrier_id`` was never generated for the table's topology.
            ValueError: ``version`` is negative.
        """
        try:
            version = operator.index(version)
        except TypeError:
            version = -1
        if version < 0:
            raise ValueError(
                f"table {table!r}, barrier {barrier_id}: a Delta version is an integer >= 0, got {version!r}"
            )
        ts = written_at_ms or now_ms()
        with self._tx(write=True) as s:
            table_id = self._table_id(s, table)
            topology = s.scalar(select(TableRow.topology).where(TableRow.id == table_id))
            generated = s.scalar(
                select(BarrierRow.barrier_id).where(
                    BarrierRow.topology == topology, BarrierRow.barrier_id == barrier_id
                )
            )
            if generated is None:
                raise UnknownBarrierError(
                    f"barrier {barrier_id} was never generated for topology {topology!r} (table "
                    f"{normalize_table_name(table)!r}); only generated barriers can be WRITTEN"
                )
            row = s.get(TableBarrierRow, (table_id, barrier_id))
            if row is None:
                s.add(
                    TableBarrierRow(
                        table_id=table_id, barrier_id=barrier_id, state=WRITTEN, version=version,
                        job_id=job_id, processed_at_ms=ts, written_at_ms=ts,
                        inputs=dict(inputs or {}) or None,
                    )
                )
            elif row.state == WRITTEN:
                if row.version != version:
                    raise TopologyError(
                        f"barrier {barrier_id} of table {normalize_table_name(table)!r} is WRITTEN at "
                        f"Delta version {row.version} in the metastore but {version} was reported"
                    )
            else:
                row.state = WRITTEN
                row.version = version
                row.written_at_ms = ts
                row.manifest = None
                row.job_id = job_id or row.job_id
                if inputs:
                    row.inputs = dict(inputs)

    def clear_processed(self, table: str, barrier_id: int | None = None) -> int:
        """Forget PROCESSED (uncommitted) rows of ``table`` (all, or one barrier) after a failure.

        Returns:
            Number of rows removed.
        """
        with self._tx(write=True) as s:
            table_id = self._table_id(s, table)
            query = delete(TableBarrierRow).where(
                TableBarrierRow.table_id == table_id, TableBarrierRow.state == PROCESSED
            )
            if barrier_id is not None:
                query = query.where(TableBarrierRow.barrier_id == barrier_id)
            return s.execute(query).rowcount or 0

    def rollback_table(self, table: str, to_barrier: int) -> int:
        """Forget every state of ``table`` above ``to_barrier`` (after a Delta restore).

        Returns:
            Number of rows removed.
        """
        with self._tx(write=True) as s:
            table_id = self._table_id(s, table)
            return s.execute(
                delete(TableBarrierRow).where(
                    TableBarrierRow.table_id == table_id, TableBarrierRow.barrier_id > to_barrier
                )
            ).rowcount or 0

    def table_state(self, table: str, barrier_id: int) -> TableState | None:
        """State of ``barrier_id`` in ``table``, or ``None`` if neither PROCESSED nor WRITTEN."""
        with self._tx() as s:
            table_id = self._table_id(s, table)
            row = s.get(TableBarrierRow, (table_id, barrier_id))
            return _state(normalize_table_name(table), row) if row is not None else None

    def version_at(self, table: str, barrier_id: int) -> int | None:
        """Delta version of ``table`` WRITTEN at ``barrier_id`` (``None`` if not WRITTEN). One seek."""
        state = self.table_state(table, barrier_id)
        return state.version if state is not None and state.state == WRITTEN else None

    def newest_written(self, table: str) -> TableState | None:
        """The newest WRITTEN barrier of ``table`` (``None`` if none). One index seek."""
        with self._tx() as s:
            table_id = self._table_id(s, table)
            row = s.scalar(
                select(TableBarrierRow)
                .where(TableBarrierRow.table_id == table_id, TableBarrierRow.state == WRITTEN)
                .order_by(TableBarrierRow.barrier_id.desc()).limit(1)
            )
            return _state(normalize_table_name(table), row) if row is not None else None

    def table_history(
        self, table: str, *, limit: int = 100, before: int | None = None
    ) -> list[TableState]:
        """Barrier states of ``table``, newest first, at most ``limit`` (paged by ``before``)."""
        with self._tx() as s:
            table_id = self._table_id(s, table)
            query = select(TableBarrierRow).where(TableBarrierRow.table_id == table_id)
            if before is not None:
                query = query.where(TableBarrierRow.barrier_id < before)
            query = query.order_by(TableBarrierRow.barrier_id.desc()).limit(limit)
            name = normalize_table_name(table)
            return [_state(name, row) for row in s.scalars(query)]

    def written_versions(self, tables: Sequence[str], barrier_ids: Sequence[int]) -> dict[tuple[str, int], int]:
        """Delta versions WRITTEN for every (table, barrier) pair that has one, in one query.

        Returns:
            {(canonical table name, barrier id): Delta version}; missing pairs are not WRITTEN.
        """
        return {key: version for key, (version, _) in self.written_entries(tables, barrier_ids).items()}

    def written_entries(
        self, tables: Sequence[str], barrier_ids: Sequence[int]
    ) -> dict[tuple[str, int], tuple[int, int | None]]:
        """Delta version and WRITTEN time of every (table, barrier) pair that has one, in one query.

        Returns:
            {(canonical table name, barrier id): (Delta version, written_at epoch ms)}.
        """
        names = [normalize_table_name(t) for t in tables]
        if not names or not barrier_ids:
            return {}
        with self._tx() as s:
            rows = s.execute(
                select(
                    TableRow.name, TableBarrierRow.barrier_id, TableBarrierRow.version, TableBarrierRow.written_at_ms
                )
                .join(TableBarrierRow, TableBarrierRow.table_id == TableRow.id)
                .where(
                    TableRow.name.in_(names),
                    TableBarrierRow.barrier_id.in_(list(barrier_ids)),
                    TableBarrierRow.state == WRITTEN,
                )
            ).all()
            return {(name, int(b)): (int(v), w) for name, b, v, w in rows if v is not None}

    def states_at(self, topology: str, barrier_ids: Sequence[int]) -> list[TableState]:
        """Every table state of ``topology`` at the given barriers (for delay views)."""
        if not barrier_ids:
            return []
        with self._tx() as s:
            rows = s.execute(
                select(TableRow.name, TableBarrierRow)
                .join(TableBarrierRow, TableBarrierRow.table_id == TableRow.id)
                .where(TableRow.topology == topology, TableBarrierRow.barrier_id.in_(list(barrier_ids)))
            ).all()
            return [_state(name, row) for name, row in rows]

    # ------------------------------------------------------------------ jobs at runtime
    def heartbeat(
        self, job_id: str, *, status: str | None = None, barrier_id: int | None = None,
        message: str | None = None,
    ) -> None:
        """Record that ``job_id`` is alive (and optionally its status and current barrier).

        Raises:
            UnknownJobError: the job is not registered.
        """
        with self._tx(write=True) as s:
            values: dict[str, Any] = {"last_heartbeat_ms": now_ms()}
            if status is not None:
                values["status"] = status
            if barrier_id is not None:
                values["current_barrier"] = barrier_id
            if message is not None:
                values["message"] = message
            result = s.execute(update(JobRow).where(JobRow.id == job_id).values(**values))
            if not result.rowcount:
                raise UnknownJobError(f"job {job_id!r} is not registered; cannot record its heartbeat")

    def record_job_barrier(
        self, job_id: str, barrier_id: int, *, status: str,
        started_at_ms: int | None = None, finished_at_ms: int | None = None,
    ) -> None:
        """Record the timing of ``job_id`` for ``barrier_id`` (running/succeeded/failed)."""
        with self._tx(write=True) as s:
            row = s.get(JobBarrierRow, (job_id, barrier_id))
            if row is None:
                s.add(
                    JobBarrierRow(
                        job_id=job_id, barrier_id=barrier_id, status=status,
                        started_at_ms=started_at_ms, finished_at_ms=finished_at_ms, attempts=1,
                    )
                )
            else:
                if status == "running" and row.status != "running":
                    row.attempts += 1
                row.status = status
                if started_at_ms is not None:
                    row.started_at_ms = started_at_ms
                if finished_at_ms is not None:
                    row.finished_at_ms = finished_at_ms

    def job_barriers(self, job_ids: Sequence[str], barrier_ids: Sequence[int]) -> list[JobBarrierTiming]:
        """Recorded timings of ``job_ids`` at ``barrier_ids`` (one query), ordered by job and barrier."""
        if not job_ids or not barrier_ids:
            return []
        with self._tx() as s:
            rows = s.scalars(
                select(JobBarrierRow)
                .where(JobBarrierRow.job_id.in_(list(job_ids)), JobBarrierRow.barrier_id.in_(list(barrier_ids)))
                .order_by(JobBarrierRow.job_id, JobBarrierRow.barrier_id)
            ).all()
            return [
                JobBarrierTiming(r.job_id, int(r.barrier_id), r.status, r.started_at_ms, r.finished_at_ms, r.attempts)
                for r in rows
            ]

    def job_barrier_statuses(self, job_id: str, barrier_ids: Sequence[int]) -> dict[int, str]:
        """{barrier id: status} of the timings recorded for ``job_id`` at ``barrier_ids``."""
        return {t.barrier_id: t.status for t in self.job_barriers([job_id], barrier_ids)}

    # ------------------------------------------------------------------ version resolution
    def resolve(
        self,
        tables: Iterable[str],
        level: ConsistencyLevel | str = ConsistencyLevel.REPEATABLE_READ,
        *,
        as_of: int | None = None,
        min_barrier: int | None = None,
        lease_seconds: float | None = None,
        lease_holder: str | None = None,
    ) -> Resolution:
        """Resolve the Delta version of each table of Q at a consistency level.

        Only the tables in Q constrain the answer (FLIP-276 "Data Consistency Type").

        * REPEATABLE_READ: the newest barrier WRITTEN in every table of Q (COMMIT over Q).
        * READ_COMMITTED: the newest barrier PROCESSED or WRITTEN in every table (PRECOMMIT);
          a PROCESSED table returns its previous WRITTEN version plus the staged manifest.
        * AS OF ``as_of``: that barrier, which must be COMMIT over Q.
        * READ_UNCOMMITTED is resolved by :class:`~airflow_provider_tsb.versions.VersionResolver`
          (it needs the Delta logs); here it returns each table's newest WRITTEN row.

        Cost: per table one index seek for its newest barrier, then one primary-key lookup per
        table to confirm the candidate; independent of the length of the barrier history
        (a fallback scan runs only when a table skipped barriers).

        Args:
            tables: names of Q (``catalog.database.table``).
            level: a :class:`ConsistencyLevel` or its name.
            as_of: barrier id for time travel (REPEATABLE_READ only).
            min_barrier: the client's last seen barrier: the answer is never older
                (monotonic reads).
            lease_seconds: pin the returned versions for this many seconds (snapshot expiry
                keeps them).
            lease_holder: free text naming who holds the lease.

        Raises:
            UnknownTableError: a table is not registered.
            InconsistentReadError: no barrier satisfies the level over Q, ``as_of`` is not
                COMMIT over Q (names the tables that lack it and what they have), or
                ``min_barrier`` is no longer available (after a rollback).
            TopologyError: the tables belong to different topologies (barriers are per topology).
        """
        level = ConsistencyLevel.parse(level)
        names = list(dict.fromkeys(normalize_table_name(t) for t in tables))
        if not names:
            raise ValueError("resolve() needs at least one table")
        if as_of is not None and level is not ConsistencyLevel.REPEATABLE_READ:
            raise ValueError("as_of is time travel to a COMMIT barrier: use level REPEATABLE_READ")
        states = (WRITTEN,) if level is not ConsistencyLevel.READ_COMMITTED else (PROCESSED, WRITTEN)
        with self._tx(write=lease_seconds is not None) as s:
            rows = s.execute(
                select(TableRow.id, TableRow.name, TableRow.location, TableRow.topology).where(
                    TableRow.name.in_(names)
                )
            ).all()
            by_name = {r.name: r for r in rows}
            missing = [n for n in names if n not in by_name]
            if missing:
                raise UnknownTableError(
                    f"table(s) {missing} are not registered in the tsb metastore; check the names"
                )
            topologies = {r.topology for r in rows}
            if len(topologies) > 1:
                raise TopologyError(
                    f"tables {names} belong to different topologies {sorted(topologies)}; barriers "
                    "are per topology, so resolve each topology's tables separately"
                )
            ids = [by_name[n].id for n in names]
            if as_of is not None:
                barrier = as_of
                found = self._rows_at(s, ids, barrier)
                lacking = [n for n in names if by_name[n].id not in found or found[by_name[n].id].state != WRITTEN]
                if lacking:
                    newest = self._newest(s, [by_name[n].id for n in lacking], (WRITTEN,))
                    detail = ", ".join(
                        f"{n} has barrier {newest.get(by_name[n].id)}" for n in lacking
                    )
                    raise InconsistentReadError(
                        f"barrier {as_of} is not COMMIT over {names}: not WRITTEN in {lacking} "
                        f"(newest WRITTEN: {detail})"
                    )
            else:
                newest = self._newest(s, ids, states)
                empty = [n for n in names if newest.get(by_name[n].id) is None]
                if empty:
                    raise InconsistentReadError(
                        f"no barrier is {'PRECOMMIT' if level is ConsistencyLevel.READ_COMMITTED else 'COMMIT'} "
                        f"over {names}: table(s) {empty} have no "
                        f"{'PROCESSED or WRITTEN' if level is ConsistencyLevel.READ_COMMITTED else 'WRITTEN'} "
                        "barrier yet; wait for the first barrier to be committed"
                    )
                barrier = min(v for v in newest.values() if v is not None)
                found = self._rows_at(s, ids, barrier)
                if any(i not in found or found[i].state not in states for i in ids):
                    barrier = self._newest_common(s, ids, states, barrier)
                    if barrier is None:
                        raise InconsistentReadError(
                            f"no barrier is WRITTEN in all of {names} (their barrier histories "
                            "do not overlap)"
                        )
                    found = self._rows_at(s, ids, barrier)
            if min_barrier is not None and barrier < min_barrier:
                raise InconsistentReadError(
                    f"the newest barrier consistent over {names} at {level.value} is {barrier}, "
                    f"older than the last seen barrier {min_barrier}: a job failed and rolled back; "
                    "monotonic reads refuse to go backwards, retry once it has recovered"
                )
            result: dict[str, TableVersion] = {}
            for name in names:
                r = by_name[name]
                row = found[r.id]
                if row.state == WRITTEN:
                    result[name] = TableVersion(name, r.location, row.version, barrier, WRITTEN)
                else:
                    base = s.scalar(
                        select(TableBarrierRow.version)
                        .where(
                            TableBarrierRow.table_id == r.id,
                            TableBarrierRow.state == WRITTEN,
                            TableBarrierRow.barrier_id < barrier,
                        )
                        .order_by(TableBarrierRow.barrier_id.desc()).limit(1)
                    )
                    result[name] = TableVersion(
                        name, r.location, base, barrier, PROCESSED, staged=dict(row.manifest or {})
                    )
            lease_id = expires = None
            if lease_seconds is not None:
                lease_id, expires = self._create_lease(
                    s, {by_name[n].id: tv.version for n, tv in result.items()}, lease_seconds, lease_holder
                )
            return Resolution(level, barrier, result, lease_id, expires, as_of)

    def _newest(self, s: Session, ids: Sequence[int], states: Sequence[str]) -> dict[int, int | None]:
        # one round trip, one index seek per (table, state): max over a B-tree prefix
        columns = []
        for table_id in ids:
            per_state = [
                select(func.max(TableBarrierRow.barrier_id))
                .where(TableBarrierRow.table_id == table_id, TableBarrierRow.state == st)
                .scalar_subquery()
                for st in states
            ]
            columns.extend(per_state)
        values = s.execute(select(*columns)).one()
        out: dict[int, int | None] = {}
        k = len(states)
        for i, table_id in enumerate(ids):
            found = [v for v in values[i * k : (i + 1) * k] if v is not None]
            out[table_id] = max(found) if found else None
        return out

    def _rows_at(self, s: Session, ids: Sequence[int], barrier: int) -> dict[int, TableBarrierRow]:
        rows = s.scalars(
            select(TableBarrierRow).where(
                TableBarrierRow.barrier_id == barrier, TableBarrierRow.table_id.in_(list(ids))
            )
        ).all()
        return {row.table_id: row for row in rows}

    def _newest_common(
        self, s: Session, ids: Sequence[int], states: Sequence[str], at_most: int
    ) -> int | None:
        return s.scalar(
            select(TableBarrierRow.barrier_id)
            .where(
                TableBarrierRow.table_id.in_(list(ids)),
                TableBarrierRow.state.in_(list(states)),
                TableBarrierRow.barrier_id <= at_most,
            )
            .group_by(TableBarrierRow.barrier_id)
            .having(func.count() == len(ids))
            .order_by(TableBarrierRow.barrier_id.desc())
            .limit(1)
        )

    # ------------------------------------------------------------------ leases
    def _create_lease(
        self, s: Session, versions: Mapping[int, int | None], seconds: float, holder: str | None
    ) -> tuple[str, int]:
        if seconds <= 0:
            raise ValueError(f"lease_seconds must be positive, got {seconds}")
        lease_id = str(uuid.uuid4())
        created = now_ms()
        expires = created + int(seconds * 1000)
        s.add(LeaseRow(id=lease_id, holder=holder, created_at_ms=created, expires_at_ms=expires))
        s.flush()
        for table_id, version in versions.items():
            if version is not None:
                s.add(LeaseVersionRow(lease_id=lease_id, table_id=table_id, version=version))
        return lease_id, expires

    def create_lease(
        self, versions: Mapping[str, int], seconds: float, holder: str | None = None
    ) -> tuple[str, int]:
        """Pin {table: Delta version} for ``seconds``; returns (lease id, expiry epoch ms)."""
        with self._tx(write=True) as s:
            ids = {self._table_id(s, name): int(v) for name, v in versions.items()}
            return self._create_lease(s, ids, seconds, holder)

    def release_lease(self, lease_id: str) -> bool:
        """End a lease early. Returns True if it existed."""
        with self._tx(write=True) as s:
            s.execute(delete(LeaseVersionRow).where(LeaseVersionRow.lease_id == lease_id))
            return bool(s.execute(delete(LeaseRow).where(LeaseRow.id == lease_id)).rowcount)

    def expire_leases(self, now: int | None = None) -> int:
        """Delete leases whose expiry has passed. Returns how many were removed."""
        cutoff = now if now is not None else now_ms()
        with self._tx(write=True) as s:
            expired = s.scalars(select(LeaseRow.id).where(LeaseRow.expires_at_ms <= cutoff)).all()
            if expired:
                s.execute(delete(LeaseVersionRow).where(LeaseVersionRow.lease_id.in_(expired)))
                s.execute(delete(LeaseRow).where(LeaseRow.id.in_(expired)))
            return len(expired)

    def leased_versions(self, table: str, now: int | None = None) -> set[int]:
        """Delta versions of ``table`` pinned by live leases (snapshot expiry must keep them)."""
        cutoff = now if now is not None else now_ms()
        with self._tx() as s:
            table_id = self._table_id(s, table)
            return set(
                s.scalars(
                    select(LeaseVersionRow.version)
                    .join(LeaseRow, LeaseRow.id == LeaseVersionRow.lease_id)
                    .where(and_(LeaseVersionRow.table_id == table_id, LeaseRow.expires_at_ms > cutoff))
                ).all()
            )

    def _shown_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    # ------------------------------------------------------------------ MetaService read views
    # (appended for the REST API, READ_UNCOMMITTED resolution and the delay view)
    def barriers_at_versions(self, versions: Mapping[str, int | None]) -> dict[str, int | None]:
        """The barrier each (table, Delta version) is tagged with in the metastore.

        Args:
            versions: {table name: Delta version} (``None`` versions map to ``None``).

        Returns:
            {canonical table name: newest barrier WRITTEN at exactly that version, or ``None``}.
            A root table holds the same version at several barriers when nothing was ingested
            between them; the newest one is returned. One index seek per table
            (``ix_tsb_table_barrier_version``).

        Raises:
            UnknownTableError: a table is not registered.
        """
        names = {normalize_table_name(k): v for k, v in versions.items()}
        out: dict[str, int | None] = {}
        with self._tx() as s:
            for name, version in names.items():
                table_id = self._table_id(s, name)
                if version is None:
                    out[name] = None
                    continue
                out[name] = s.scalar(
                    select(func.max(TableBarrierRow.barrier_id)).where(
                        TableBarrierRow.table_id == table_id,
                        TableBarrierRow.version == int(version),
                        TableBarrierRow.state == WRITTEN,
                    )
                )
        return out

    def newest_written_by_table(self, topology: str) -> dict[str, TableState]:
        """The newest WRITTEN state of every table of ``topology`` that has one.

        Returns:
            {table name: :class:`TableState`} (tables without a WRITTEN barrier are absent).
            Cost: one index seek per table (max over the ``(table_id, state, barrier_id)``
            prefix) plus one primary-key lookup per table, independent of the history length.
        """
        from sqlalchemy.orm import aliased

        inner = aliased(TableBarrierRow)
        with self._tx() as s:
            newest = (
                select(func.max(inner.barrier_id))
                .where(inner.table_id == TableRow.id, inner.state == WRITTEN)
                .correlate(TableRow)
                .scalar_subquery()
            )
            # one join: per table an index seek for its newest WRITTEN barrier, then a primary-key
            # lookup (a row-value IN list would make SQLite scan the whole state table)
            rows = s.execute(
                select(TableRow.name, TableBarrierRow)
                .join(
                    TableBarrierRow,
                    and_(TableBarrierRow.table_id == TableRow.id, TableBarrierRow.barrier_id == newest),
                )
                .where(TableRow.topology == topology)
            ).all()
            return {name: _state(name, row) for name, row in rows}

    def barrier_timings(
        self, topology: str, *, limit: int = 20, before: int | None = None
    ) -> tuple[list[tuple[int, int, int]], list[tuple[str, str, int, str, int | None, int | None]]]:
        """Raw material of the delay view for the newest ``limit`` barriers of ``topology``.

        Returns:
            ``(barriers, states)``: ``barriers`` = [(barrier id, barrier ts ms, created at ms)],
            newest first; ``states`` = [(table name, table kind, barrier id, state,
            processed_at_ms, written_at_ms)] for those barriers. Cost: one index range on the
            barriers plus one primary-key seek per (table, barrier), bounded by ``limit``.
        """
        with self._tx() as s:
            query = select(BarrierRow.barrier_id, BarrierRow.ts_ms, BarrierRow.created_at_ms).where(
                BarrierRow.topology == topology
            )
            if before is not None:
                query = query.where(BarrierRow.barrier_id < before)
            barriers = [tuple(r) for r in s.execute(query.order_by(BarrierRow.barrier_id.desc()).limit(limit))]
            if not barriers:
                return [], []
            ids = [b[0] for b in barriers]
            states = s.execute(
                select(
                    TableRow.name, TableRow.kind, TableBarrierRow.barrier_id, TableBarrierRow.state,
                    TableBarrierRow.processed_at_ms, TableBarrierRow.written_at_ms,
                )
                .join(TableBarrierRow, TableBarrierRow.table_id == TableRow.id)
                .where(TableRow.topology == topology, TableBarrierRow.barrier_id.in_(ids))
            ).all()
            return barriers, [tuple(r) for r in states]  # type: ignore[misc]

    def job_io(self, topology: str | None = None) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        """Sources and sinks of every registered job (of one topology) in two queries.

        Returns:
            {job id: (source table names, sink table names)}, names sorted.
        """
        with self._tx() as s:
            jobs = select(JobRow.id)
            if topology:
                jobs = jobs.where(JobRow.topology == topology)
            out: dict[str, tuple[list[str], list[str]]] = {j: ([], []) for j in s.scalars(jobs)}
            for link, slot in ((JobSourceRow, 0), (JobSinkRow, 1)):
                rows = s.execute(
                    select(link.job_id, TableRow.name).join(TableRow, TableRow.id == link.table_id)
                    .where(link.job_id.in_(list(out)))
                ).all()
                for job_id, name in rows:
                    out[job_id][slot].append(name)
            return {j: (tuple(sorted(a)), tuple(sorted(b))) for j, (a, b) in out.items()}


class _GuardedTransaction:
    """:func:`transaction` that turns a missing schema into an actionable MetastoreError."""

    def __init__(self, engine: Engine, write: bool) -> None:
        self._cm = transaction(engine, write=write)
        self._engine = engine

    def __enter__(self) -> Session:
        try:
            return self._cm.__enter__()
        except OperationalError as exc:
            raise _metastore_error(self._engine, exc) from exc

    def __exit__(self, *exc_info: Any) -> bool | None:
        try:
            suppressed = self._cm.__exit__(*exc_info)
        except (OperationalError, ProgrammingError) as exc:
            raise _metastore_error(self._engine, exc) from exc
        if isinstance(exc_info[1], OperationalError | ProgrammingError):
            raise _metastore_error(self._engine, exc_info[1]) from exc_info[1]
        return suppressed


def _metastore_error(engine: Engine, exc: Exception) -> MetastoreError:
    shown = engine.url.render_as_string(hide_password=True)
    text = str(getattr(exc, "orig", exc))
    if "no such table" in text or "does not exist" in text and "relation" in text:
        return MetastoreError(
            f"the tsb metastore at {shown} has no schema (or an old one): run `tsb db migrate` "
            f"(database said: {text.strip()})"
        )
    return MetastoreError(f"the tsb metastore at {shown} failed: {text.strip()}")


def _state(name: str, row: TableBarrierRow) -> TableState:
    return TableState(
        table=name,
        barrier_id=row.barrier_id,
        state=row.state,
        version=row.version,
        job_id=row.job_id,
        processed_at_ms=row.processed_at_ms,
        written_at_ms=row.written_at_ms,
        manifest=row.manifest,
        inputs=row.inputs,
    )
