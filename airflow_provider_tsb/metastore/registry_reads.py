"""Reads of the registry: registered jobs, tables, topologies and their graph.

Functions taking a session, so a manager can read the registry inside its own transaction;
:class:`~airflow_provider_tsb.metastore.registry.RegistryManager` exposes them, each in a
transaction of its own, next to the writes (registration, FLIP-276 "MetaService"
``/register/*``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import CompoundSelect, bindparam, literal, or_, select, union_all
from sqlalchemy.orm import Session

from airflow_provider_tsb.exceptions import UnknownJobError, UnknownTableError
from airflow_provider_tsb.lineage import Job, Table, build_graph
from airflow_provider_tsb.metastore.models import (
    JobRow,
    JobSinkRow,
    JobSourceRow,
    RegistryLockRow,
    TableRow,
    TopologyRootRow,
    TopologyRow,
)
from airflow_provider_tsb.metastore.records import JobInfo, TableInfo
from airflow_provider_tsb.names import normalize_table_name

if TYPE_CHECKING:  # networkx is slow to import: only the functions that build graphs load it
    import networkx as nx


def job(s: Session, job_id: str, shown_url: str = "") -> JobInfo:
    """The registered job ``job_id``.

    Raises:
        UnknownJobError: the job is not registered (the message shows ``shown_url``).
    """
    row = s.get(JobRow, job_id)
    if row is None:
        raise UnknownJobError(
            f"job {job_id!r} is not registered in the tsb metastore ({shown_url}); "
            "register it (the job operator does) before using it"
        )
    return job_info(s, row)


def jobs(s: Session, topology: str | None = None) -> list[JobInfo]:
    """All registered jobs (of one topology), ordered by id. Three queries, whatever the count."""
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
    return [_job_info_of(r, tuple(sources[r.id]), tuple(sinks[r.id])) for r in rows]


def job_info(s: Session, row: JobRow) -> JobInfo:
    """The :class:`JobInfo` of job row ``row`` with its sources and sinks (two queries)."""
    sources = s.scalars(
        select(TableRow.name).join(JobSourceRow, JobSourceRow.table_id == TableRow.id)
        .where(JobSourceRow.job_id == row.id).order_by(TableRow.name)
    ).all()
    sinks = s.scalars(
        select(TableRow.name).join(JobSinkRow, JobSinkRow.table_id == TableRow.id)
        .where(JobSinkRow.job_id == row.id).order_by(TableRow.name)
    ).all()
    return _job_info_of(row, tuple(sources), tuple(sinks))


def _job_info_of(row: JobRow, sources: tuple[str, ...], sinks: tuple[str, ...]) -> JobInfo:
    return JobInfo(
        id=row.id, topology=row.topology, application=row.application, status=row.status,
        registered_at_ms=row.registered_at_ms, last_heartbeat_ms=row.last_heartbeat_ms,
        current_barrier=row.current_barrier, sources=sources, sinks=sinks, message=row.message,
    )


def topologies_of(s: Session, names: list[str]) -> dict[str, str]:
    """``{canonical table name: its topology}`` of the registered tables among ``names`` (one
    query; unregistered names are absent)."""
    canonical = list(dict.fromkeys(normalize_table_name(n) for n in names))
    rows = s.execute(select(TableRow.name, TableRow.topology).where(TableRow.name.in_(canonical)))
    return {name: topology for name, topology in rows}


def table(s: Session, name: str, *, required: bool = True) -> TableInfo | None:
    """The registered table ``name`` (``None`` when missing and not ``required``).

    Raises:
        UnknownTableError: the table is not registered and ``required``.
    """
    canonical = normalize_table_name(name)
    row = s.scalar(select(TableRow).where(TableRow.name == canonical))
    if row is None:
        if required:
            raise UnknownTableError(
                f"table {canonical!r} is not registered in the tsb metastore; "
                "check the name or register the topology that declares it"
            )
        return None
    return table_info(s, row)


def tables(s: Session, topology: str | None = None) -> list[TableInfo]:
    """All registered tables (of one topology), ordered by name. Three queries, whatever the count."""
    query = select(TableRow).order_by(TableRow.name)
    if topology:  # its own tables and the root tables it shares (metastore/domains.py)
        shared = select(TopologyRootRow.table_id).where(TopologyRootRow.topology == topology)
        query = query.where(or_(TableRow.topology == topology, TableRow.id.in_(shared)))
    rows = list(s.scalars(query))
    ids = [r.id for r in rows]
    writers = dict(
        s.execute(select(JobSinkRow.table_id, JobSinkRow.job_id).where(JobSinkRow.table_id.in_(ids))).all()
    )
    readers: dict[int, list[str]] = {i: [] for i in ids}
    for table_id, job_id in s.execute(
        select(JobSourceRow.table_id, JobSourceRow.job_id)
        .where(JobSourceRow.table_id.in_(ids)).order_by(JobSourceRow.job_id)
    ):
        readers[table_id].append(job_id)
    return [
        TableInfo(r.id, r.name, r.topology, r.kind, r.location, r.event_time_column,
                  writers.get(r.id), tuple(readers[r.id]), _seconds(r.freshness_ms))
        for r in rows
    ]


def table_info(s: Session, row: TableRow) -> TableInfo:
    """The :class:`TableInfo` of table row ``row`` with its writer and readers (two queries)."""
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
        freshness_s=_seconds(row.freshness_ms),
    )


def writer_of(s: Session, table: str) -> str | None:
    """Id of the job registered as the writer of ``table`` (``None`` if none)."""
    canonical = normalize_table_name(table)
    return s.scalar(
        select(JobSinkRow.job_id).join(TableRow, TableRow.id == JobSinkRow.table_id).where(TableRow.name == canonical)
    )


def topologies(s: Session) -> list[str]:
    """Names of all registered topologies."""
    return list(s.scalars(select(TopologyRow.name).order_by(TopologyRow.name)))


def registry_version(s: Session) -> int:
    """The registry's version: a counter every registration bumps (topologies, tables, jobs,
    sources, sinks, barrier domains), ``0`` before the first. Equal versions read the same
    registry, so a reader may keep what it derived from it (the sharing server's shares).
    Cost: one primary-key read."""
    return int(s.scalar(select(RegistryLockRow.version).where(RegistryLockRow.id == 1)) or 0)


def graph_of(table_infos: list[TableInfo], job_infos: list[JobInfo]) -> nx.DiGraph:
    """The tables and jobs as a DiGraph (same node scheme as ``Topology.graph``)."""
    nodes = [Table(t.name, "root" if t.kind == "root" else "intermediate", t.location) for t in table_infos]
    return build_graph(nodes, [Job(j.id, j.application, j.sources, j.sinks) for j in job_infos])


def _job_io_statement(of_topology: bool) -> CompoundSelect:
    parts = []
    for link, slot in ((JobSourceRow, 0), (JobSinkRow, 1)):
        part = (
            select(JobRow.id, literal(slot).label("slot"), TableRow.name)
            .outerjoin(link, link.job_id == JobRow.id)
            .outerjoin(TableRow, TableRow.id == link.table_id)
        )
        parts.append(part.where(JobRow.topology == bindparam("topology")) if of_topology else part)
    return union_all(*parts)


#: :func:`job_io`'s statements, of one topology and of all (built once)
JOB_IO = {True: _job_io_statement(True), False: _job_io_statement(False)}


def job_io(s: Session, topology: str | None = None) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Sources and sinks of every registered job (of one topology) in one query (a job with
    neither is listed too: outer joins).

    Returns:
        {job id: (source table names, sink table names)}, names sorted.
    """
    out: dict[str, tuple[list[str], list[str]]] = {}
    for job_id, slot, name in s.execute(JOB_IO[bool(topology)], {"topology": topology} if topology else {}).all():
        lists = out.setdefault(job_id, ([], []))
        if name is not None:
            lists[slot].append(name)
    return {j: (tuple(sorted(a)), tuple(sorted(b))) for j, (a, b) in out.items()}


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000
