"""Registration (FLIP-276 "MetaService" ``/register/source``, ``/register/sink``, ``/unregister``).

Atomic across processes: every registration holds the registry lock, so the union of
registered jobs stays acyclic and single-writer (docs/design.md "Vocabulary").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from airflow_provider_tsb.exceptions import (
    DoubleWriterError,
    TopologyError,
    UnknownTableError,
)
from airflow_provider_tsb.lineage import Job, Table, cycle_error, double_writer_error
from airflow_provider_tsb.metastore import registry_reads as reads
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.domains import assign_domain, join_domain
from airflow_provider_tsb.metastore.locations import check_same_location, check_table_kind, check_table_location
from airflow_provider_tsb.metastore.models import (
    JobBarrierRow,
    JobRow,
    JobSinkRow,
    JobSourceRow,
    RegistryLockRow,
    TableRow,
    TopologyRootRow,
    TopologyRow,
)
from airflow_provider_tsb.metastore.records import (
    DeclaredTopology,
    JobInfo,
    JobStatus,
    TableInfo,
    now_ms,
)
from airflow_provider_tsb.metastore.registration_checks import check_known_topology, check_root_joins
from airflow_provider_tsb.names import normalize_table_name, validate_job_id

if TYPE_CHECKING:  # networkx is slow to import: only the functions that build graphs load it
    import networkx as nx


class RegistryManager:
    """Topologies, tables, jobs and their sources and sinks: registration (FLIP-276
    "MetaService" ``/register/*``, ``/unregister``) and its reads (:mod:`.registry_reads`)."""

    def __init__(self, core: MetastoreCore, location_roots: Sequence[str] | None = None) -> None:
        self._core = core
        #: roots :meth:`register_table` places tables under (``None``: anywhere; :mod:`.locations`)
        self._location_roots = location_roots

    # ------------------------------------------------------------------ reads
    def job(self, job_id: str) -> JobInfo:
        """The registered job ``job_id`` with its sources and sinks.

        Raises:
            UnknownJobError: the job is not registered.
        """
        with self._core.transaction() as s:
            return reads.job(s, job_id, self._core.shown_url())

    def jobs(self, topology: str | None = None) -> list[JobInfo]:
        """All registered jobs (of one topology), ordered by id. Three queries, whatever the count."""
        with self._core.transaction() as s:
            return reads.jobs(s, topology)

    def table(self, name: str, *, required: bool = True) -> TableInfo | None:
        """The registered table ``name`` (``None`` when missing and not ``required``).

        Raises:
            UnknownTableError: the table is not registered and ``required``.
        """
        with self._core.transaction() as s:
            return reads.table(s, name, required=required)

    def topologies_of(self, names: list[str]) -> dict[str, str]:
        """``{canonical table name: topology}`` of the registered tables among ``names``, in one
        query (unregistered names are absent; the REST API's authorization of a read)."""
        with self._core.transaction() as s:
            return reads.topologies_of(s, names)

    def tables(self, topology: str | None = None) -> list[TableInfo]:
        """All registered tables (of one topology; shared root tables included), ordered by name."""
        with self._core.transaction() as s:
            return reads.tables(s, topology)

    def writer_of(self, table: str) -> str | None:
        """Id of the job registered as the writer of ``table`` (``None`` if none)."""
        with self._core.transaction() as s:
            return reads.writer_of(s, table)

    def topologies(self) -> list[str]:
        """Names of all registered topologies."""
        with self._core.transaction() as s:
            return reads.topologies(s)

    def graph(self, topology: str | None = None) -> nx.DiGraph:
        """The registered tables and jobs as a DiGraph (same node scheme as ``Topology.graph``)."""
        with self._core.transaction() as s:
            return reads.graph_of(reads.tables(s, topology), reads.jobs(s, topology))

    def job_io(self, topology: str | None = None) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        """Sources and sinks of every registered job (of one topology) in one query.

        Returns:
            {job id: (source table names, sink table names)}, names sorted.
        """
        with self._core.transaction() as s:
            return reads.job_io(s, topology)

    # ------------------------------------------------------------------ writes
    def register_topology(self, topology: DeclaredTopology) -> None:
        """Register every table and job of a (validated) topology; see :meth:`register_job`.

        Raises:
            TopologyError and subclasses: as :meth:`register_job`.
        """
        topology.validate()
        declared = getattr(topology, "barrier_domain", None)
        if declared:
            self.set_barrier_domain(topology.name, declared)
        for table in topology.root_tables:
            self._register_table(topology.name, table, topology.warehouse, known_topology=False)
        for job in topology.jobs_in_order():
            tables = {name: topology.tables[name] for name in (*job.sources, *job.sinks)}
            self.register_job(topology.name, job, tables, warehouse=topology.warehouse)

    def set_barrier_domain(self, topology: str, domain: str) -> None:
        """Put ``topology`` (registered now if new) and the topologies it shares root tables with
        in barrier domain ``domain`` (:mod:`.domains`; ``Topology(..., barrier_domain=...)``).

        Raises:
            BarrierDomainError: the topology already has barriers in another domain.
            InvalidNameError: ``domain`` is not an identifier.
        """
        validate_job_id(domain, what="barrier domain name")
        with self._core.transaction(write=True) as s:
            self._lock_registry(s)
            self._ensure_topology(s, topology)
            assign_domain(s, topology, domain)

    def register_table(self, topology: str, table: Table, warehouse: str | None = None) -> TableInfo:
        """Register (or find) a table of ``topology``. Idempotent.

        The REST API's checks, before anything is written: a known kind, an absolute location
        of a Delta scheme without ``..`` (under the store's ``location_roots`` when it has
        some), a registered ``topology``, and a new root of a topology with barriers must hold
        a Delta table (every generation reads its version).

        Raises:
            TopologyError: registered with another topology or kind, an unknown kind or
                topology, or a new root of a live topology without a Delta table (names them).
            TableLocationConflictError: registered at another location (names both).
            InvalidLocationError: a relative location, a ``..`` or a scheme no Delta reader opens.
            LocationNotAllowedError: outside the store's ``location_roots`` (``[tsb]
                allowed_location_roots`` through the hook; names the location and the roots).
        """
        return self._register_table(topology, table, warehouse, known_topology=True)

    def _register_table(self, topology: str, table: Table, warehouse: str | None, *, known_topology: bool
                        ) -> TableInfo:
        name = normalize_table_name(table.name)
        check_table_kind(name, table.kind)
        location = check_table_location(name, Table(name, table.kind, table.location).resolved_location(warehouse),
                                        self._location_roots if known_topology else None)
        with self._core.transaction(write=True) as s:
            self._lock_registry(s)
            if known_topology:
                check_known_topology(s, topology, name)
                check_root_joins(s, topology, name, table.kind, location)
            self._ensure_topology(s, topology)
            row = self._upsert_table(s, topology, table, warehouse)
            return reads.table_info(s, row)

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
            TopologyError: a sink is a root table, or a source or sink belongs to another topology.
            UnknownTableError: a source is neither registered nor declared.
        """
        validate_job_id(job.id)
        tables = dict(tables or {})
        try:
            with self._core.transaction(write=True) as s:
                self._lock_registry(s)
                self._ensure_topology(s, topology)
                existing = s.get(JobRow, job.id)
                if existing is not None and existing.topology != topology:
                    raise TopologyError(
                        f"job {job.id!r} is registered in topology {existing.topology!r}, "
                        f"cannot register it in {topology!r}; unregister it first"
                    )
                rows = self._job_tables(s, topology, job, tables, warehouse)
                self._check_single_writer(s, job, rows)
                self._check_acyclic(s, job)
                self._store_job(s, topology, job, existing, rows)
        except IntegrityError as exc:
            # the unique constraint on tsb_job_sink.table_id caught a racing second writer
            raise self._double_writer_from_race(job) from exc
        return self.job(job.id)

    def _job_tables(
        self, s: Session, topology: str, job: Job, tables: Mapping[str, Table], warehouse: str | None
    ) -> dict[str, TableRow]:
        """``{table: row}`` of the job's sinks then sources, registering the missing ones (a sink
        or an undeclared source becomes an intermediate table). TopologyError for a root sink or
        a source of another topology that is not a root table it shares."""
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
            elif row.topology != topology and not self._shares_root(s, topology, row):
                # a job reads the tables of its own topology, and the root tables it shares
                raise TopologyError(f"table {name!r} belongs to topology {row.topology!r}, not {topology!r}"
                                    f" of job {job.id!r}; a job reads the tables of its own topology")
            rows[name] = row
        return rows

    @staticmethod
    def _check_single_writer(s: Session, job: Job, rows: Mapping[str, TableRow]) -> None:
        """TopologyError for a root sink, DoubleWriterError for a sink another job writes."""
        for name in job.sinks:
            if rows[name].kind == "root":
                raise TopologyError(
                    f"table {name!r} is a root table and cannot be a sink of job {job.id!r}"
                )
            writer = s.scalar(
                select(JobSinkRow.job_id).where(JobSinkRow.table_id == rows[name].id)
            )
            if writer is not None and writer != job.id:
                raise double_writer_error(name, (writer, job.id))

    def _check_acyclic(self, s: Session, job: Job) -> None:
        """CycleError if the registered jobs (``job``'s old registration aside) plus ``job`` close a cycle."""
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

    @staticmethod
    def _store_job(
        s: Session, topology: str, job: Job, existing: JobRow | None, rows: Mapping[str, TableRow]
    ) -> None:
        """Insert (or update) the job's row and replace its source and sink rows."""
        ts = now_ms()
        if existing is None:
            s.add(
                JobRow(
                    id=job.id,
                    topology=topology,
                    application=job.application,
                    status=JobStatus.REGISTERED,
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

    def _double_writer_from_race(self, job: Job) -> DoubleWriterError:
        for name in job.sinks:
            writer = self.writer_of(name)
            if writer is not None and writer != job.id:
                return double_writer_error(name, (writer, job.id))
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
            TableLocationConflictError: the table is registered at another ``location``.
            InvalidLocationError: ``location`` is relative or contains ``..``.
        """
        info = self.job(job_id)
        name = normalize_table_name(table)
        if name in info.sinks:
            registered = self.table(name)
            assert registered is not None
            check_same_location(name, registered.location, location)
            return info
        job = Job(job_id, info.application, info.sources, (*info.sinks, name))
        tables = {name: Table(name, "intermediate", location)}
        return self.register_job(info.topology, job, tables)

    def create_topology(self, topology: str) -> None:
        """Register an empty topology named ``topology`` (idempotent); tables and jobs follow.

        Raises:
            InvalidNameError: the name is not an identifier.
        """
        with self._core.transaction(write=True) as s:
            self._lock_registry(s)
            self._ensure_topology(s, topology)

    def create_job(self, topology: str, job_id: str, application: str = "") -> JobInfo:
        """Register a job with no tables yet (the REST API's first ``/register/*`` call)."""
        validate_job_id(job_id)
        with self._core.transaction(write=True) as s:
            self._lock_registry(s)
            self._ensure_topology(s, topology)
            if s.get(JobRow, job_id) is None:
                s.add(
                    JobRow(
                        id=job_id,
                        topology=topology,
                        application=application,
                        status=JobStatus.REGISTERED,
                        registered_at_ms=now_ms(),
                    )
                )
        return self.job(job_id)

    def unregister_job(self, job_id: str) -> bool:
        """FLIP-276 ``/unregister``: remove a job's registration (its tables and data stay).

        Returns:
            True if the job was registered.
        """
        with self._core.transaction(write=True) as s:
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
            validate_job_id(topology, what="topology name")
            row = TopologyRow(name=topology, created_at_ms=now_ms(), lock_version=0)
            s.add(row)
            s.flush()
        return row

    def _upsert_table(self, s: Session, topology: str, table: Table, warehouse: str | None) -> TableRow:
        name = normalize_table_name(table.name)
        location = check_table_location(name, Table(name, table.kind, table.location).resolved_location(warehouse))
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
                freshness_ms=None if table.freshness_s is None else round(table.freshness_s * 1000),
            )
            s.add(row)
            s.flush()
            if kind == "root":
                s.add(TopologyRootRow(topology=topology, table_id=row.id))
                s.flush()
            return row
        if row.topology != topology and row.kind == "root" and table.kind == "root" and row.location == location:
            # a shared root table: the topologies join one barrier domain
            if not self._shares_root(s, topology, row):
                s.add(TopologyRootRow(topology=topology, table_id=row.id))
                s.flush()
            join_domain(s, topology, row.topology, name)
            return row
        if row.topology != topology:
            raise TopologyError(
                f"table {name!r} belongs to topology {row.topology!r}, not {topology!r}; a table belongs "
                "to exactly one topology (only root tables are shared, declared as root tables at the "
                "same location)"
            )
        if row.kind != kind and table.kind != "external":
            raise TopologyError(
                f"table {name!r} is registered as a {row.kind} table and declared now as "
                f"{table.kind}; a table is either a root table or the sink of one job"
            )
        if table.location:
            check_same_location(name, row.location, location)
        if table.event_time_column and row.event_time_column != table.event_time_column:
            row.event_time_column = table.event_time_column
        if table.freshness_s is not None and table.kind == "intermediate":  # a declared target wins
            row.freshness_ms = round(table.freshness_s * 1000)
        return row

    @staticmethod
    def _shares_root(s: Session, topology: str, row: TableRow) -> bool:
        """Whether ``topology`` reads root table ``row`` (its own or a shared one)."""
        return row.kind == "root" and s.get(TopologyRootRow, (topology, row.id)) is not None

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
