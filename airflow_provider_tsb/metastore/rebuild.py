"""Restore a topology's barrier history into the metastore from Delta (``tsb db rebuild``).

The metastore is an index of facts that are durable in Delta (docs/design.md "Durability"):

* barriers -- id, timestamp, kind, final flag, run key and the Delta version of every root
  table -- from the topology's barrier log (:mod:`airflow_provider_tsb.delta.barrier_log`);
* WRITTEN states -- (table, barrier) -> Delta version, the writer job and the input versions
  it read -- from each intermediate table's log: the ``tsb.barrier`` / ``tsb.job`` /
  ``tsb.inputs`` commit metadata of the commits of its current lineage (a restore's undone
  commits are skipped, :func:`~airflow_provider_tsb.delta.barriers.iter_lineage`).

A barrier tagged in a table but absent from the log (generated before the barrier log
existed) is derived from the tags: its timestamp from ``tsb.ts``, its root versions from the
``tsb.inputs`` of the jobs that read root tables; the report counts them.

Not restored (not durable anywhere): PROCESSED states of barriers in flight (their jobs redo
them), leases, job heartbeats and per-barrier run timings (the delay view starts empty).
The registrations come first, from the DAG files (:mod:`airflow_provider_tsb.maintenance.rebuild`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from airflow_provider_tsb.delta.barrier_log import BarrierLogEntry, read_barrier_log
from airflow_provider_tsb.delta.barriers import iter_lineage
from airflow_provider_tsb.delta.conventions import parse_tag
from airflow_provider_tsb.delta.log_cleanup import log_start
from airflow_provider_tsb.delta.snapshots import latest_table_or_none
from airflow_provider_tsb.exceptions import DeltaLogError, TopologyError
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.models import (
    BarrierRow,
    JobBarrierRow,
    JobRow,
    TableBarrierRow,
    TableRow,
    TopologyRootRow,
    TopologyRow,
)
from airflow_provider_tsb.metastore.records import BarrierState, TsKind
from airflow_provider_tsb.names import normalize_table_name


@dataclass(frozen=True)
class TopologyRebuild:
    """What :func:`restore_history` restored for one topology.

    Attributes:
        topology: the topology.
        barriers: barrier ids restored, ascending.
        from_tags: the ids among them that the barrier log lacked (derived from job tags).
        written: per intermediate table, the number of WRITTEN (table, barrier) states restored.
        warnings: facts that could not be restored, one sentence each.
    """

    topology: str
    barriers: tuple[int, ...]
    from_tags: tuple[int, ...]
    written: dict[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the report."""
        return {"topology": self.topology, "barriers": len(self.barriers),
                "newest_barrier": self.barriers[-1] if self.barriers else None,
                "barriers_from_tags": list(self.from_tags), "written": dict(self.written),
                "warnings": list(self.warnings)}


@dataclass
class _Tagged:
    version: int
    job_id: str
    inputs: dict[str, int]
    ts_ms: int | None
    committed_at_ms: int | None


def topologies_with_barriers(core: MetastoreCore, topologies: list[str]) -> dict[str, int]:
    """``{topology: newest barrier}`` for those of ``topologies`` whose metastore holds barriers."""
    with core.transaction() as s:
        rows = s.execute(
            select(BarrierRow.topology, func.max(BarrierRow.barrier_id))
            .where(BarrierRow.topology.in_(topologies)).group_by(BarrierRow.topology)
        ).all()
    return {name: int(newest) for name, newest in rows}


def _tags(location: str, warnings: list[str], name: str) -> dict[int, _Tagged]:
    """``{barrier: tag}`` of the current lineage of the table at ``location`` (newest version per barrier)."""
    found: dict[int, _Tagged] = {}
    if latest_table_or_none(location) is None:
        return found
    try:
        for version, info in iter_lineage(location):
            tag = parse_tag(info)
            if tag is None or tag.barrier in found:
                continue
            stamp = info.get("timestamp")
            inputs = {normalize_table_name(k): int(v) for k, v in tag.inputs.items()}
            found[tag.barrier] = _Tagged(version, tag.job_id, inputs, tag.ts_ms,
                                         int(stamp) if stamp is not None else None)
    except DeltaLogError as exc:
        warnings.append(f"table {name!r}: barriers before the oldest commit still in its Delta log are not "
                        f"restored ({exc})")
    start = log_start(location)
    if start:  # the walk ended where metadata cleanup (snapshot expiry) left the log
        warnings.append(f"table {name!r}: its Delta log starts at version {start} (metadata cleanup by snapshot "
                        "expiry); the barriers of older versions, expired, are not restored")
    return found


def _clear(s: Session, topology: str, table_ids: list[int], jobs: list[str]) -> None:
    s.execute(delete(TableBarrierRow).where(TableBarrierRow.table_id.in_(table_ids)))
    s.execute(delete(JobBarrierRow).where(JobBarrierRow.job_id.in_(jobs)))
    s.execute(delete(BarrierRow).where(BarrierRow.topology == topology))


def _lock_and_clear(s: Session, topology: str, barrier_log: str, replace: bool) -> tuple[list[Any], list[str]]:
    """Lock ``topology`` (recording ``barrier_log``), drop what it holds if ``replace``:
    ``(its tables (id, name, kind, location), its job ids)``. TopologyError as restore_history."""
    locked = s.execute(update(TopologyRow).where(TopologyRow.name == topology)
                       .values(lock_version=TopologyRow.lock_version + 1, barrier_log=barrier_log))
    if not locked.rowcount:
        raise TopologyError(f"topology {topology!r} is not registered: register it (from its DAG files) first")
    tables = list(s.execute(select(TableRow.id, TableRow.name, TableRow.kind, TableRow.location)
                            .where(TableRow.topology == topology).order_by(TableRow.name)).all())
    jobs = list(s.scalars(select(JobRow.id).where(JobRow.topology == topology)))
    if s.scalar(select(func.count()).select_from(BarrierRow).where(BarrierRow.topology == topology)):
        if not replace:
            raise TopologyError(f"topology {topology!r} holds barriers in the metastore already; "
                                "rebuild restores into a metastore without them (or replace them)")
        _clear(s, topology, [t.id for t in tables], jobs)
    return tables, jobs


def _barrier_and_root_rows(
    topology: str, entries: dict[int, BarrierLogEntry], roots: dict[str, int], warnings: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The barrier rows of ``entries`` and the WRITTEN rows of the root versions recorded at each
    (root tables the topology no longer reads are warned about, not restored)."""
    barrier_rows: list[dict[str, Any]] = []
    root_rows: list[dict[str, Any]] = []
    for b, e in sorted(entries.items()):
        barrier_rows.append({"topology": topology, "barrier_id": b, "ts_ms": e.ts_ms, "ts_kind": e.ts_kind,
                             "created_at_ms": e.created_at_ms, "run_key": e.run_key, "final": e.final})
        unknown = sorted(set(e.root_versions) - set(roots))
        if unknown:
            warnings.append(f"barrier {b}: root table(s) {unknown} of the barrier log are not root tables of "
                            f"topology {topology!r} now; their versions are not restored")
        root_rows.extend(
            {"table_id": roots[name], "barrier_id": b, "state": BarrierState.WRITTEN, "version": v,
             "processed_at_ms": e.created_at_ms, "written_at_ms": e.created_at_ms}
            for name, v in e.root_versions.items() if name in roots
        )
    return barrier_rows, root_rows


def _sink_rows(
    tagged: dict[str, dict[int, _Tagged]], entries: dict[int, BarrierLogEntry], sink_ids: dict[str, int],
    warnings: list[str],
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The WRITTEN rows of the barriers tagged in the intermediate tables, and ``{table: how
    many}`` (tags of barriers no entry describes are warned about, not restored)."""
    written: dict[str, int] = {}
    sink_rows: list[dict[str, Any]] = []
    for name, tags in tagged.items():
        orphans = sorted(b for b in tags if b not in entries)
        if orphans:
            warnings.append(f"table {name!r} is tagged with barrier(s) {orphans} that neither the barrier log "
                            "nor the other tables describe; they are not restored")
        kept = {b: t for b, t in tags.items() if b in entries}
        written[name] = len(kept)
        sink_rows.extend(
            {"table_id": sink_ids[name], "barrier_id": b, "state": BarrierState.WRITTEN, "version": t.version,
             "job_id": t.job_id or None, "processed_at_ms": t.committed_at_ms, "written_at_ms": t.committed_at_ms,
             "inputs": t.inputs}
            for b, t in sorted(kept.items())
        )
    return sink_rows, written


def _insert_history(
    s: Session, barrier_rows: list[dict[str, Any]], root_rows: list[dict[str, Any]],
    sink_rows: list[dict[str, Any]], roots: dict[str, int],
) -> None:
    """Insert the restored barriers and table states."""
    if barrier_rows:
        s.execute(insert(BarrierRow), barrier_rows)
    if root_rows:  # a shared root table's rows may come from another topology of the domain already
        held = set(s.execute(select(TableBarrierRow.table_id, TableBarrierRow.barrier_id).where(
            TableBarrierRow.table_id.in_(list(roots.values())))).all())
        root_rows = [r for r in root_rows if (r["table_id"], r["barrier_id"]) not in held]
    for rows in (root_rows, sink_rows):
        if rows:
            s.execute(insert(TableBarrierRow), rows)


def restore_history(core: MetastoreCore, topology: str, barrier_log: str, *, replace: bool = False) -> TopologyRebuild:
    """Restore the barriers and WRITTEN states of registered ``topology`` from Delta.

    Args:
        core: the metastore's core (its tables and jobs registered already).
        topology: the topology name.
        barrier_log: location of its barrier log.
        replace: drop the barriers, table states and job timings the metastore holds for the
            topology first (otherwise it must hold none).

    Raises:
        TopologyError: the topology is not registered, or holds barriers and not ``replace``.
        DeltaLogError: the barrier log cannot be read.
    """
    warnings: list[str] = []
    with core.transaction(write=True) as s:
        tables, jobs = _lock_and_clear(s, topology, barrier_log, replace)
        roots = dict(s.execute(  # its own root tables and the ones it shares (metastore/domains.py)
            select(TableRow.name, TableRow.id).join(TopologyRootRow, TopologyRootRow.table_id == TableRow.id)
            .where(TopologyRootRow.topology == topology, TableRow.kind == "root")).all())
        sinks = {t.name: t for t in tables if t.kind != "root"}
        logged = {e.barrier: e for e in read_barrier_log(barrier_log)}
        tagged = {name: _tags(t.location, warnings, name) for name, t in sinks.items()}
        derived = _derive(topology, logged, tagged, set(roots), warnings)
        entries = {**derived, **logged}
        barrier_rows, root_rows = _barrier_and_root_rows(topology, entries, roots, warnings)
        sink_rows, written = _sink_rows(tagged, entries, {n: t.id for n, t in sinks.items()}, warnings)
        _insert_history(s, barrier_rows, root_rows, sink_rows, roots)
        for job in jobs:
            heads = [b for tags in tagged.values() for b, t in tags.items() if t.job_id == job and b in entries]
            if heads:
                s.execute(update(JobRow).where(JobRow.id == job).values(current_barrier=max(heads)))
    return TopologyRebuild(topology, tuple(sorted(entries)), tuple(sorted(derived)), written, tuple(warnings))


def _derive(
    topology: str, logged: dict[int, BarrierLogEntry], tagged: dict[str, dict[int, _Tagged]], roots: set[str],
    warnings: list[str],
) -> dict[int, BarrierLogEntry]:
    """Barriers tagged in tables but missing from the log, rebuilt from the tags' ``tsb.ts`` and
    the root versions the jobs read (``tsb.inputs``)."""
    derived: dict[int, BarrierLogEntry] = {}
    missing = sorted({b for tags in tagged.values() for b in tags} - set(logged))
    for b in missing:
        tags = [tags[b] for tags in tagged.values() if b in tags]
        versions = {name: v for t in tags for name, v in t.inputs.items() if name in roots}
        ts = next((t.ts_ms for t in tags if t.ts_ms is not None), None)
        stamp = min((t.committed_at_ms for t in tags if t.committed_at_ms is not None), default=0)
        if set(versions) != roots:
            warnings.append(f"barrier {b} of topology {topology!r} is not in the barrier log and no job tag records "
                            f"the version of root table(s) {sorted(roots - set(versions))} at it")
        derived[b] = BarrierLogEntry(topology, b, ts if ts is not None else stamp, TsKind.SYSTEM, False,
                                     stamp, None, versions)
    return derived
