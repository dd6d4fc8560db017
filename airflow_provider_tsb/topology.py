"""Topology declaration: the bipartite DAG tables -> jobs -> tables.

A :class:`Topology` is declared in an Airflow DAG file. It holds root tables (written from
outside the topology, e.g. by ingestion) and ETL jobs (one Spark application each, reading
source tables and writing sink tables). Validation is pure and side-effect free, so it runs
while the DAG file is parsed; an invalid topology shows in Airflow as an import error carrying
the message. The same rules are enforced again, atomically and across DAG files, when a job
registers in the metastore (:meth:`airflow_provider_tsb.metastore.registry.RegistryManager.register_job`).

Rules (docs/design.md "Vocabulary"; FLIP-276 "MetaService" registration):

* every table name is ``catalog.database.table`` of identifiers;
* a table is either a root table or the sink of exactly one job (single writer);
* every source of a job is a root table, a sink of a job, or declared external
  (written by a job of another DAG file of the same topology);
* every job has at least one sink;
* the graph is acyclic;
* a root table may be declared by several topologies (a shared root) at one location: they
  then share one barrier domain (:mod:`airflow_provider_tsb.metastore.domains`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from airflow_provider_tsb.exceptions import (
    InvalidNameError,
    TopologyError,
    UnknownTableError,
)
from airflow_provider_tsb.lineage import (
    Job,
    Table,
    TableKind,
    build_graph,
    cycle_error,
    default_warehouse,
    double_writer_error,
    find_cycle_error,
    freshness_seconds,
    lexicographic_order,
    node_label,
    predecessors,
)
from airflow_provider_tsb.names import normalize_table_name, validate_job_id

if TYPE_CHECKING:  # networkx is slow to import: only the functions that build graphs load it
    import networkx as nx

__all__ = [
    "Job", "Table", "TableKind", "Topology", "build_graph", "cycle_error", "declared_topologies",
    "default_warehouse", "forget_declared_topologies", "node_label", "validate_union",
]

_DECLARED: list[Topology] = []


class Topology:
    """A topology of ETL jobs over Delta tables, declared in a DAG file.

    Example::

        topo = Topology("wordcount")
        topo.root_table("tsb.raw.words")
        topo.job("count_words", "spark_apps/wordcount/word_count.py",
                 sources=["tsb.raw.words"], sinks=["tsb.mart.word_count"])
        topo.validate()

    Declaring never touches the filesystem or a database. Every topology object created is
    remembered (see :func:`declared_topologies`) so ``tsb topology validate`` can find the
    topologies of a DAG file.
    """

    def __init__(
        self, name: str, *, warehouse: str | None = None, freshness: timedelta | float | None = None,
        barrier_domain: str | None = None,
    ) -> None:
        """Create an empty topology.

        Args:
            name: topology name (identifier, may contain '-'); barrier ids are per topology.
            warehouse: directory for tables without an explicit location
                (default :func:`default_warehouse`).
            freshness: default freshness target (timedelta or seconds) of every sink table
                that does not declare its own (README "Freshness targets").
            barrier_domain: the barrier domain to join (FLIP-276 "Data Consistency
                Management"): topologies of one domain share barrier ids, so the
                same barrier id means the same root versions and their tables can be read
                together. ``None``: the topology's own domain, which it leaves for the domain of
                any topology it shares a root table with (derived at registration).

        Raises:
            InvalidNameError: the name is not a valid identifier.
            TopologyError: ``freshness`` is not a finite duration > 0.
        """
        if not name:
            raise InvalidNameError("topology name must not be empty")
        validate_job_id(name, what="topology name")
        self.name = name
        self.warehouse = warehouse
        self.freshness_s = freshness_seconds(freshness, f"topology {name!r}")
        if barrier_domain is not None:
            validate_job_id(barrier_domain, what="barrier domain name")
        self.barrier_domain = barrier_domain
        self.tables: dict[str, Table] = {}
        self.jobs: dict[str, Job] = {}
        self._declaration_errors: list[TopologyError] = []
        _DECLARED.append(self)

    # -- declaration ---------------------------------------------------------------------
    def root_table(
        self, name: str, *, location: str | None = None, event_time_column: str | None = None
    ) -> str:
        """Declare a root table (written from outside the topology). Returns its canonical name.

        Raises:
            InvalidNameError: the name is invalid.
            TopologyError: the table was already declared with another kind or location.
        """
        canonical = normalize_table_name(name)
        self._add_table(Table(canonical, "root", location, event_time_column))
        return canonical

    def external_table(self, name: str, *, location: str | None = None) -> str:
        """Declare a table of this topology written by a job of another DAG file.

        Use it when a topology is split across DAG files (one per team): the consuming file
        declares the producing team's sink as external and gates on it with
        :class:`~airflow_provider_tsb.sensors.barrier_committed.TsbBarrierCommittedSensor`.
        """
        canonical = normalize_table_name(name)
        self._add_table(Table(canonical, "external", location))
        return canonical

    def table(
        self, name: str, *, location: str | None = None, freshness: timedelta | float | None = None
    ) -> str:
        """Set the location and/or freshness target of an intermediate (sink) table.

        Args:
            freshness: freshness target (timedelta or seconds; default: the topology's): the
                table's lag behind the newest generated barrier must stay under it (Snowflake
                ``TARGET_LAG``; :mod:`airflow_provider_tsb.metastore.freshness`).

        Returns:
            The canonical table name.

        Raises:
            TopologyError: ``freshness`` is not a finite duration > 0.
        """
        canonical = normalize_table_name(name)
        target = freshness_seconds(freshness, f"table {canonical!r}")
        self._add_table(Table(canonical, "intermediate", location, freshness_s=target or self.freshness_s))
        return canonical

    def job(
        self,
        job_id: str,
        application: str,
        *,
        sources: Sequence[str],
        sinks: Sequence[str],
        application_args: Sequence[str] = (),
        conf: Mapping[str, str] | None = None,
    ) -> Job:
        """Declare an ETL job. Sinks become intermediate tables of the topology.

        Raises:
            InvalidNameError: the job id or a table name is invalid.
            TopologyError: the job id is declared twice, or ``sources`` or ``sinks`` is one string
                instead of a list of names.
        """
        validate_job_id(job_id)
        if job_id in self.jobs:
            raise TopologyError(f"topology {self.name!r}: job {job_id!r} is declared twice")
        for field_name, names in (("sources", sources), ("sinks", sinks)):
            if isinstance(names, str):  # iterating it would read each character as a table name
                raise TopologyError(f"topology {self.name!r}: job {job_id!r}: {field_name} must be a list of table "
                                    f"names, got the string {names!r}: pass [{names!r}]")
        job = Job(
            id=job_id,
            application=application,
            sources=tuple(normalize_table_name(s) for s in sources),
            sinks=tuple(normalize_table_name(s) for s in sinks),
            application_args=tuple(application_args),
            conf=dict(conf or {}),
        )
        for sink in job.sinks:
            if sink not in self.tables:
                self.tables[sink] = Table(sink, "intermediate", freshness_s=self.freshness_s)
        self.jobs[job_id] = job
        return job

    def _add_table(self, table: Table) -> None:
        existing = self.tables.get(table.name)
        if existing is None or existing == table:
            self.tables[table.name] = table
            return
        if existing.kind == "intermediate" and table.kind == "intermediate":
            self.tables[table.name] = Table(
                table.name, "intermediate", table.location or existing.location,
                freshness_s=table.freshness_s or existing.freshness_s,
            )
            return
        if existing.kind == "intermediate" and table.kind == "root":
            # a sink later declared as root: validate() reports it naming the writer job
            self.tables[table.name] = table
            return
        raise TopologyError(
            f"topology {self.name!r}: table {table.name!r} is declared twice, as {existing.kind} "
            f"(location {existing.location!r}) and as {table.kind} (location {table.location!r})"
        )

    # -- views ---------------------------------------------------------------------------
    @property
    def root_tables(self) -> list[Table]:
        """Root tables, in declaration order."""
        return [t for t in self.tables.values() if t.kind == "root"]

    def location(self, table: str) -> str:
        """Resolved location of a table of this topology.

        Raises:
            UnknownTableError: the table is not part of the topology.
        """
        canonical = normalize_table_name(table)
        if canonical not in self.tables:
            raise UnknownTableError(
                f"table {canonical!r} is not part of topology {self.name!r}; "
                f"known tables: {', '.join(sorted(self.tables)) or '(none)'}"
            )
        return self.tables[canonical].resolved_location(self.warehouse)

    def writer_of(self, table: str) -> str | None:
        """Id of the job that writes ``table``, or ``None`` for root/external tables."""
        canonical = normalize_table_name(table)
        for job in self.jobs.values():
            if canonical in job.sinks:
                return job.id
        return None

    @property
    def graph(self) -> nx.DiGraph:
        """The topology as a networkx DiGraph.

        Nodes are ``table:<name>`` (attrs ``kind='table'``, ``role``, ``name``) and
        ``job:<id>`` (attrs ``kind='job'``, ``name``); edges go source -> job -> sink.
        """
        return build_graph(self.tables.values(), self.jobs.values())

    def jobs_in_order(self) -> list[Job]:
        """Jobs in a topological order of the graph (upstream first, ties by id).

        Raises:
            TopologyError: the topology is invalid (see :meth:`validate`).
        """
        self.validate()
        order = lexicographic_order(predecessors(self.tables.values(), self.jobs.values()))
        return [self.jobs[n.split(":", 1)[1]] for n in order if n.startswith("job:")]

    # -- validation ----------------------------------------------------------------------
    def errors(self) -> list[TopologyError]:
        """Every validation error of this topology (empty when valid). Pure."""
        return validate_union([self])

    def validate(self) -> Topology:
        """Raise the first validation error, or return ``self`` when valid.

        Raises:
            CycleError, DoubleWriterError, UnknownTableError, TopologyError: see module doc.
        """
        errors = self.errors()
        if errors:
            raise errors[0]
        return self

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, tables={len(self.tables)}, jobs={len(self.jobs)})"


def validate_union(topologies: Sequence[Topology]) -> list[TopologyError]:
    """Validate the union of several topology declarations (e.g. all DAG files of a folder).

    Tables and jobs with the same names are merged, so a double writer split across two DAG
    files, or a cycle closed by another file, is caught. Pure: no I/O.

    Returns:
        Every error found, in a stable order (empty when the union is valid).
    """
    errors: list[TopologyError] = []
    tables, jobs = _merge_declarations(topologies, errors)
    writers = _check_sinks(tables, jobs, errors)
    _check_sources(tables, jobs, writers, errors)
    cycle = find_cycle_error(predecessors(tables.values(), jobs.values()))
    if cycle is not None:
        errors.append(cycle)
    return errors


def _merge_declarations(
    topologies: Sequence[Topology], errors: list[TopologyError]
) -> tuple[dict[str, Table], dict[str, Job]]:
    """The union's tables and jobs by name (a root declaration wins over an external or
    intermediate one); appends to ``errors`` a shared root declared differently and a job
    declared twice with different definitions."""
    tables: dict[str, Table] = {}
    owners: dict[str, str] = {}
    jobs: dict[str, Job] = {}
    job_topology: dict[str, str] = {}
    by_name = {topo.name: topo for topo in topologies}
    for topo in topologies:
        for table in topo.tables.values():
            prev = tables.get(table.name)
            if prev is None or prev.kind in ("external", "intermediate") and table.kind == "root":
                tables[table.name] = table
                owners[table.name] = topo.name
            elif prev.kind == "root" and table.kind == "root" and owners[table.name] != topo.name:
                error = _shared_root_error(table.name, topo, by_name[owners[table.name]])
                if error is not None:
                    errors.append(error)
        for job in topo.jobs.values():
            if job.id in jobs and jobs[job.id] != job:
                errors.append(
                    TopologyError(
                        f"job {job.id!r} is declared twice with different definitions "
                        f"(topologies {job_topology[job.id]!r} and {topo.name!r})"
                    )
                )
                continue
            jobs[job.id] = job
            job_topology[job.id] = topo.name
    return tables, jobs


def _check_sinks(tables: dict[str, Table], jobs: dict[str, Job], errors: list[TopologyError]) -> dict[str, str]:
    """``{table: its writer job}``; appends to ``errors`` a job without sink, a root table as a
    sink and a table with two writers."""
    writers: dict[str, str] = {}
    for job in jobs.values():
        if not job.sinks:
            errors.append(
                TopologyError(
                    f"job {job.id!r} has no sink table; every ETL job must write at least one table"
                )
            )
        for sink in job.sinks:
            table = tables.get(sink)
            if table is not None and table.kind == "root":
                errors.append(
                    TopologyError(
                        f"table {sink!r} is declared as a root table and is also a sink of job "
                        f"{job.id!r}; a root table is written only from outside the topology"
                    )
                )
            if sink in writers and writers[sink] != job.id:
                errors.append(double_writer_error(sink, (writers[sink], job.id)))
            else:
                writers[sink] = job.id
    return writers


def _check_sources(
    tables: dict[str, Table], jobs: dict[str, Job], writers: dict[str, str], errors: list[TopologyError]
) -> None:
    """Appends to ``errors`` a source that no job writes and that is not a root or external table."""
    for job in jobs.values():
        for source in job.sources:
            if source in writers:
                continue
            table = tables.get(source)
            if table is None or table.kind == "intermediate":
                errors.append(
                    UnknownTableError(
                        f"job {job.id!r} reads unknown table {source!r}: declare it with "
                        "root_table() if it is ingested from outside, external_table() if a job "
                        "of another DAG file writes it, or add the job that writes it"
                    )
                )


def _shared_root_error(name: str, topo: Topology, owner: Topology) -> TopologyError | None:
    """Two topologies may declare one root table (a shared root) at one location and in one
    barrier domain; anything else is an error naming both topologies."""
    here, there = topo.location(name), owner.location(name)
    if here != there:
        return TopologyError(
            f"root table {name!r} is declared by topologies {owner.name!r} at {there!r} and "
            f"{topo.name!r} at {here!r}; topologies that share a root table must declare the same location"
        )
    if topo.barrier_domain and owner.barrier_domain and topo.barrier_domain != owner.barrier_domain:
        return TopologyError(
            f"topologies {owner.name!r} (barrier domain {owner.barrier_domain!r}) and {topo.name!r} "
            f"(barrier domain {topo.barrier_domain!r}) share root table {name!r}, so they must share "
            "barriers: declare the same barrier_domain, or none on one of them"
        )
    return None


def declared_topologies() -> list[Topology]:
    """Topologies created in this process so far (used by ``tsb topology validate``)."""
    return list(_DECLARED)


def forget_declared_topologies() -> None:
    """Clear the list returned by :func:`declared_topologies` (used between DAG files)."""
    _DECLARED.clear()
