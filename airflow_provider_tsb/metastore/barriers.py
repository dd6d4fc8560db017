"""Barrier generation and lookup (FLIP-276 "Timestamp Barrier"; FLIP-147 end of input).

Barrier logs: given a topology's barrier log location
(:func:`~airflow_provider_tsb.delta.barrier_log.barrier_log_location`; the hooks pass it),
:meth:`BarrierManager.create` commits the barrier's row there under the topology lock,
before the metastore transaction that makes the barrier visible commits, so a barrier a job can
see is always in the log. The location is recorded, and the barrier is also logged in the logs
recorded by the other topologies of the domain (with the root versions each reads).

Before a new id is used, the topology's intermediate tables and its barrier log are checked
(:mod:`.barrier_history`): an id at or below one already in Delta is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sqlalchemy import and_, bindparam, func, insert, null, or_, select, union_all, update
from sqlalchemy.orm import Session

from airflow_provider_tsb.exceptions import (
    TopologyError,
    UnknownBarrierError,
    UnknownTableError,
)
from airflow_provider_tsb.metastore.barrier_history import check_tables, log_barrier
from airflow_provider_tsb.metastore.base import MIN_INT, MetastoreCore, checked_int
from airflow_provider_tsb.metastore.domains import LockedDomain, lock_domain
from airflow_provider_tsb.metastore.models import (
    BarrierRow,
    TableBarrierRow,
    TableRow,
    TopologyRootRow,
    TopologyRow,
)
from airflow_provider_tsb.metastore.records import (
    BarrierInfo,
    BarrierState,
    TsKind,
    now_ms,
)
from airflow_provider_tsb.names import normalize_table_name


@dataclass(frozen=True)
class _DomainTables:
    """The tables a barrier generation of a domain needs (:func:`_domain_tables`).

    Attributes:
        roots: ``{root table name: table id}`` of the root tables the domain reads.
        locations: ``{root table name: location}``.
        previous: ``{root table name: Delta version}`` recorded at the domain's last barrier.
        read_by: ``{topology: names of the tables it reads as roots}`` (own and shared).
        owned: ``{topology: [(intermediate table name, location)]}``, by name: the tables whose
            barrier tags the new id is checked against (:mod:`.barrier_history`).
    """

    roots: dict[str, int]
    locations: dict[str, str]
    previous: dict[str, int]
    read_by: dict[str, set[str]]
    owned: dict[str, list[tuple[str, str]]]


#: the tables of the domain ``:topologies`` (expanding), by index: those its topologies read as
#: roots, with the version recorded at barrier ``:last`` (``reader`` set), then their own
#: intermediate tables (``reader`` NULL); built once
_DOMAIN_TABLES = union_all(
    select(TableRow.name, TableRow.id, TableRow.kind, TableRow.location, TableRow.topology,
           TopologyRootRow.topology.label("reader"),
           select(TableBarrierRow.version).where(
               TableBarrierRow.table_id == TableRow.id, TableBarrierRow.barrier_id == bindparam("last"),
           ).scalar_subquery().label("previous"))
    .join(TopologyRootRow, TopologyRootRow.table_id == TableRow.id)
    .where(TopologyRootRow.topology.in_(bindparam("topologies", expanding=True))),
    select(TableRow.name, TableRow.id, TableRow.kind, TableRow.location, TableRow.topology,
           null().label("reader"), null().label("previous"))
    .where(TableRow.topology.in_(bindparam("topologies", expanding=True)), TableRow.kind != "root"),
)


def _domain_tables(s: Session, topologies: list[str], last: BarrierRow | None) -> _DomainTables:
    """The tables of ``topologies`` (a domain) that a generation reads and checks, with the root
    versions recorded at barrier ``last``, in one query."""
    rows = s.connection().execute(_DOMAIN_TABLES, {
        "topologies": topologies, "last": last.barrier_id if last is not None else 0,  # ids start at 1
    }).all()
    out = _DomainTables({}, {}, {}, {}, {})
    for row in sorted(rows, key=lambda r: r.name):
        if row.reader is None:
            out.owned.setdefault(row.topology, []).append((row.name, row.location))
            continue
        out.read_by.setdefault(row.reader, set()).add(row.name)
        if row.kind == "root":
            out.roots[row.name], out.locations[row.name] = row.id, row.location
            if row.previous is not None:
                out.previous[row.name] = int(row.previous)
    return out


def _member_logs(s: Session, topology: str, barrier_log: str, recorded: Mapping[str, str | None]) -> dict[str, str]:
    """Barrier log locations to write: ``topology``'s (recorded on its row for the other topologies
    of the domain, when it changed) and those recorded by the other topologies of its domain
    (``recorded``, read when the domain was locked), in name order."""
    if recorded.get(topology) != barrier_log:
        s.execute(update(TopologyRow).where(TopologyRow.name == topology).values(barrier_log=barrier_log))
    logs = {name: log for name, log in recorded.items() if name != topology and log is not None}
    logs[topology] = barrier_log
    return dict(sorted(logs.items()))


def barrier_info(s: Session, row: BarrierRow, created: bool = True) -> BarrierInfo:
    """The :class:`BarrierInfo` of barrier row ``row`` with the root versions its topology reads."""
    read = select(TopologyRootRow.table_id).where(TopologyRootRow.topology == row.topology)
    versions = dict(
        s.execute(
            select(TableRow.name, TableBarrierRow.version)
            .join(TableBarrierRow, TableBarrierRow.table_id == TableRow.id)
            .where(
                TableRow.id.in_(read),
                TableRow.kind == "root",
                TableBarrierRow.barrier_id == row.barrier_id,
            )
        ).all()
    )
    return BarrierInfo(
        row.topology, row.barrier_id, row.ts_ms, row.ts_kind, row.created_at_ms, row.run_key,
        {k: int(v) for k, v in versions.items()}, created, bool(row.final),
    )


class BarrierManager:
    """Barriers of a topology: strictly increasing ids, the root versions recorded at each; the
    same ids across the topologies of a barrier domain (:mod:`.domains`)."""

    def __init__(self, core: MetastoreCore) -> None:
        self._core = core

    def create(
        self, topology: str, root_versions: Mapping[str, int], *, ts_ms: int | None = None,
        ts_kind: TsKind | str = TsKind.SYSTEM, run_key: str | None = None, final: bool = False,
        barrier_log: str | None = None, root_figures: Mapping[str, tuple[int, int]] | None = None,
        read_root_version: Callable[[str, str], int] | None = None, raise_late_watermark: bool = False,
    ) -> BarrierInfo:
        """Generate the next barrier of ``topology`` (FLIP-276 "Timestamp Barrier").

        In one transaction: lock the topologies of ``topology``'s barrier domain, return the
        existing barrier if ``run_key`` was used before (idempotent per DAG run), else insert
        barrier ``max + 1`` in every topology of the domain (same id, timestamp and root
        versions: :mod:`.domains`) and a WRITTEN row with the Delta version of every root table
        of the domain. The new id is checked against Delta first (:mod:`.barrier_history`).

        Args:
            topology: topology name (registered).
            root_versions: {root table: Delta version} read just before the call: every root
                table of the barrier domain (``store.domains.get``), or the topology's
                own with ``read_root_version``.
            ts_ms: barrier timestamp, epoch ms; system time when omitted.
            ts_kind: ``system`` or ``event`` (``ts_ms`` is then the event-time watermark).
            run_key: idempotency key, e.g. the Airflow DAG run id.
            final: the end of a bounded input (FLIP-147): streaming jobs stop after committing it.
            barrier_log: the topology's barrier log, committed to before the barrier is visible
                (module docstring); ``None``: no log (tests, benchmarks).
            root_figures: ``{root table: (live data files, bytes)}`` at its version in
                ``root_versions``, recorded on its WRITTEN row (readers verify them).
            read_root_version: ``(root table, location) -> Delta version``, called under the
                domain's lock for each domain root missing from ``root_versions`` (what it raises
                propagates); ``None``: ``root_versions`` names them all.
            raise_late_watermark: a late event-time ``ts_ms`` is raised to the last, not refused.

        Raises:
            UnknownTableError: a root table is missing from ``root_versions`` or unregistered.
            TopologyError: the topology is unknown, a version goes backwards, an event-time
                timestamp goes back, or ``ts_kind`` is not the domain's time kind (or no kind).
            BarrierHistoryError: the new id is already tagged in a table or held by the barrier
                log (the metastore lost barriers: run ``tsb db rebuild``).
            DeltaLogError: the barrier log commit failed (no barrier is generated).
            OutOfRangeError: a version is not an integer 0..2**63-1, or ``ts_ms`` not one of
                -2**63..2**63-1 (names it).
        """
        versions, ts_ms = _checked_request(root_versions, ts_ms, ts_kind)
        with self._core.transaction(write=True) as s:
            locked = _lock_registered_domain(s, topology)
            domain_topologies = locked.topologies
            created_at = now_ms()  # under the domain's locks: timestamps rise with barrier ids
            found, last = _run_and_last(s, topology, domain_topologies, run_key)
            if found is not None:
                return barrier_info(s, found, created=False)
            tables = _domain_tables(s, domain_topologies, last)
            of_domain = f" (barrier domain {locked.name!r}: {domain_topologies})" if len(domain_topologies) > 1 else ""
            versions = _with_domain_root_versions(topology, of_domain, tables, versions, read_root_version)
            ts = _barrier_timestamp(topology, of_domain, last, ts_ms, ts_kind, created_at, raise_late_watermark)
            _check_roots_go_forward(last, tables, versions)
            barrier = (last.barrier_id if last is not None else 0) + 1
            new = BarrierInfo(topology, barrier, ts, ts_kind, created_at, run_key, {}, final=bool(final))
            _write_domain_barrier(s, new, locked, tables, versions, root_figures, barrier_log, last)
            own = {n: versions[n] for n in sorted(tables.read_by.get(topology, ()))}
            return BarrierInfo(topology, barrier, ts, ts_kind, created_at, run_key, own, final=bool(final))

    def get(self, topology: str, barrier: int) -> BarrierInfo:
        """Barrier ``barrier`` of ``topology`` with its root versions.

        Raises:
            UnknownBarrierError: no such barrier (names the newest one).
        """
        with self._core.transaction() as s:
            row = s.get(BarrierRow, (topology, barrier))
            if row is None:
                newest = s.scalar(select(func.max(BarrierRow.barrier_id)).where(BarrierRow.topology == topology))
                raise UnknownBarrierError(
                    f"barrier {barrier} does not exist in topology {topology!r} "
                    f"(newest barrier: {newest})"
                )
            return barrier_info(s, row)

    def latest(self, topology: str) -> BarrierInfo | None:
        """The newest barrier of ``topology`` (``None`` before the first)."""
        with self._core.transaction() as s:
            row = s.scalar(
                select(BarrierRow).where(BarrierRow.topology == topology)
                .order_by(BarrierRow.barrier_id.desc()).limit(1)
            )
            return barrier_info(s, row) if row is not None else None

    def latest_final(self, topology: str, since_ms: int | None = None) -> BarrierInfo | None:
        """The newest final barrier (FLIP-147 end of input) of ``topology`` generated at or after
        ``since_ms`` (epoch ms; any time if ``None``), or ``None``."""
        with self._core.transaction() as s:
            query = select(BarrierRow).where(BarrierRow.topology == topology, BarrierRow.final.is_(True))
            if since_ms is not None:
                query = query.where(BarrierRow.created_at_ms >= since_ms)
            row = s.scalar(query.order_by(BarrierRow.barrier_id.desc()).limit(1))
            return barrier_info(s, row) if row is not None else None

    def first_of_run(self, topology: str, run_key_prefix: str) -> BarrierInfo | None:
        """The first barrier of ``topology`` whose run key starts with ``run_key_prefix`` (an
        emitter's run keys are ``<dag_id>/<run_id>#<n>``: the first barrier of a DAG run's stretch
        of the stream), or ``None``. Clearing the run's tasks does not change it."""
        with self._core.transaction() as s:
            row = s.scalar(
                select(BarrierRow)
                .where(BarrierRow.topology == topology, BarrierRow.run_key.startswith(run_key_prefix, autoescape=True))
                .order_by(BarrierRow.barrier_id.asc()).limit(1)
            )
            return barrier_info(s, row) if row is not None else None

    def list(
        self, topology: str, *, limit: int = 100, before: int | None = None, after: int | None = None,
        ascending: bool = False,
    ) -> list[BarrierInfo]:
        """Barriers of ``topology``, newest first (oldest first if ``ascending``), at most ``limit``.

        ``before`` / ``after`` bound the barrier ids (exclusive) for paging.

        Raises:
            OutOfRangeError: ``limit`` is not an integer from 0 to 2**63-1.
        """
        limit = checked_int(limit, "limit (the most barriers listed)")
        with self._core.transaction() as s:
            query = select(BarrierRow).where(BarrierRow.topology == topology)
            if before is not None:
                query = query.where(BarrierRow.barrier_id < before)
            if after is not None:
                query = query.where(BarrierRow.barrier_id > after)
            order = BarrierRow.barrier_id.asc() if ascending else BarrierRow.barrier_id.desc()
            query = query.order_by(order).limit(limit)
            return [barrier_info(s, row) for row in s.scalars(query)]


def _other_kind_message(topology: str, of_domain: str, last: BarrierRow, ts_kind: str) -> str:
    article = "an" if ts_kind == TsKind.EVENT else "a"
    return (
        f"topology {topology!r}{of_domain} has {last.ts_kind}-time barriers (barrier {last.barrier_id} is "
        f"{last.ts_kind}-time): {article} {ts_kind}-time barrier is refused, since a topology has one barrier time "
        f"kind and its barrier timestamps must stay comparable; generate it with ts_kind={last.ts_kind!r} "
        f"(`tsb barrier create` takes the topology's kind by default; the DAG's TsbTopologyTaskGroup or "
        f"TsbBarrierOperator must say ts_kind={last.ts_kind!r})"
    )


# ---------------------------------------------------------------- the steps of create_barrier
def _checked_request(
    root_versions: Mapping[str, int], ts_ms: int | None, ts_kind: TsKind | str
) -> tuple[dict[str, int], int | None]:
    """``({normalized root table: Delta version}, ts_ms)`` of a barrier request, checked before
    any transaction (TopologyError for a wrong ``ts_kind``, OutOfRangeError for a non-int64: a barrier
    timestamp may be negative, event time before 1970)."""
    if ts_kind not in (TsKind.SYSTEM, TsKind.EVENT):
        raise TopologyError(f"ts_kind must be 'system' or 'event', got {ts_kind!r}")
    versions = {
        normalize_table_name(k): checked_int(v, f"the Delta version of root table {k!r}")
        for k, v in root_versions.items()
    }
    if ts_ms is not None:
        ts_ms = checked_int(ts_ms, "ts_ms (the barrier timestamp, epoch ms)", minimum=MIN_INT)
    return versions, ts_ms


def _lock_registered_domain(s: Session, topology: str) -> LockedDomain:
    """Lock the topologies of ``topology``'s barrier domain and return it; TopologyError if
    ``topology`` is not registered."""
    locked = lock_domain(s, topology)
    if locked is None:
        raise TopologyError(
            f"topology {topology!r} is not registered; register its tables and jobs "
            "(the barrier operator does it from the DAG file's Topology) first"
        )
    return locked


#: the barrier ``:topology`` generated for ``:run_key`` and the newest barrier of the domain
#: ``:topologies`` (expanding); built once
_RUN_AND_LAST = select(BarrierRow).where(
    BarrierRow.topology.in_(bindparam("topologies", expanding=True)),
    or_(
        BarrierRow.barrier_id == select(func.max(BarrierRow.barrier_id))
        .where(BarrierRow.topology.in_(bindparam("topologies", expanding=True))).scalar_subquery(),
        and_(BarrierRow.topology == bindparam("topology"), BarrierRow.run_key == bindparam("run_key")),
    ),
)


def _run_and_last(
    s: Session, topology: str, domain_topologies: list[str], run_key: str | None
) -> tuple[BarrierRow | None, BarrierRow | None]:
    """``(the barrier of topology generated for run_key before, the domain's newest barrier)``, in
    one query; each ``None`` when there is none (idempotency per DAG run)."""
    rows = s.scalars(_RUN_AND_LAST, {"topologies": domain_topologies, "topology": topology, "run_key": run_key}).all()
    found = next((r for r in rows if run_key is not None and r.topology == topology and r.run_key == run_key), None)
    last = max(rows, key=lambda r: (r.barrier_id, r.topology == topology), default=None)
    return found, last


def _check_every_root_versioned(
    topology: str, of_domain: str, roots: Mapping[str, int], versions: Mapping[str, int]
) -> None:
    """UnknownTableError unless ``versions`` names exactly the domain's root tables ``roots``."""
    missing = sorted(set(roots) - set(versions))
    if missing:
        raise UnknownTableError(
            f"barrier generation for topology {topology!r}{of_domain} lacks the Delta version of root "
            f"table(s) {missing}; every root table's version is recorded at each barrier"
        )
    unknown = sorted(set(versions) - set(roots))
    if unknown:
        raise UnknownTableError(
            f"{unknown} are not registered root tables of topology {topology!r}{of_domain}"
        )


def _barrier_timestamp(
    topology: str, of_domain: str, last: BarrierRow | None, ts_ms: int | None, ts_kind: TsKind | str,
    created_at: int, raise_late_watermark: bool = False,
) -> int:
    """The new barrier's timestamp (epoch ms): ``ts_ms``, else ``created_at`` never below the
    previous system-time barrier's. TopologyError if the barrier time kind changes or an
    event-time watermark goes backwards (unless ``raise_late_watermark``: raised to the last)."""
    if raise_late_watermark and ts_ms is not None and last is not None and last.ts_kind == TsKind.EVENT:
        ts_ms = max(ts_ms, last.ts_ms)
    if last is not None and last.ts_kind != ts_kind:
        raise TopologyError(_other_kind_message(topology, of_domain, last, str(ts_kind)))
    ts = int(ts_ms if ts_ms is not None else created_at)
    if last is not None and ts_ms is None and ts_kind == TsKind.SYSTEM and last.ts_kind == TsKind.SYSTEM:
        ts = max(ts, last.ts_ms)  # a clock step back never orders a barrier before its predecessor
    if last is not None and ts_kind == TsKind.EVENT and last.ts_kind == TsKind.EVENT and ts < last.ts_ms:
        raise TopologyError(
            f"event-time barrier for topology {topology!r} would go backwards: "
            f"watermark {ts} < {last.ts_ms} of barrier {last.barrier_id}"
        )
    return ts


def _check_roots_go_forward(last: BarrierRow | None, tables: _DomainTables, versions: Mapping[str, int]) -> None:
    """TopologyError if a root table's Delta version is below the one recorded at barrier ``last``."""
    for name, previous in tables.previous.items():
        if last is not None and versions[name] < previous:
            raise TopologyError(
                f"root table {name!r} is at Delta version {versions[name]}, below version "
                f"{previous} recorded at barrier {last.barrier_id}; a root table "
                "must not be restored under a running topology"
            )


def _write_domain_barrier(
    s: Session, new: BarrierInfo, domain: LockedDomain, tables: _DomainTables, versions: Mapping[str, int],
    figures: Mapping[str, tuple[int, int]] | None, barrier_log: str | None, last: BarrierRow | None,
) -> None:
    """Check the new id against each topology's Delta history (:mod:`.barrier_history`), insert
    barrier ``new`` in the domain with its root versions (and ``figures``), then commit it to the
    barrier logs: the last step before the metastore commit (module docstring, "Barrier logs").
    ``last``: the domain's barrier before."""
    for member in domain.topologies:
        check_tables(member, new.barrier, tables.owned.get(member, []))
    _insert_domain_barrier(s, new, domain.topologies)
    _record_root_versions(s, new.barrier, tables.roots, versions, new.created_at_ms, figures or {})
    if barrier_log is not None:
        _log_domain_barrier(s, new, barrier_log, domain, versions, tables.read_by, last is not None)


def _insert_domain_barrier(s: Session, new: BarrierInfo, domain_topologies: list[str]) -> None:
    """Insert barrier ``new`` in every topology of the domain (the run key on ``new.topology``'s
    row only), in one statement."""
    s.connection().execute(insert(BarrierRow.__table__), [  # one barrier, the same in every topology of the domain
        {
            "topology": member, "barrier_id": new.barrier, "ts_ms": new.ts_ms, "ts_kind": str(new.ts_kind),
            "created_at_ms": new.created_at_ms, "run_key": new.run_key if member == new.topology else None,
            "final": bool(new.final),
        }
        for member in domain_topologies
    ])


def _with_domain_root_versions(
    topology: str, of_domain: str, tables: _DomainTables, versions: Mapping[str, int],
    read_root_version: Callable[[str, str], int] | None,
) -> dict[str, int]:
    """``versions`` plus the Delta version ``read_root_version`` (if given) reads for each root
    table of the domain (``tables.roots``) it lacks, at the table's registered location; then
    checked to name every root table of the domain (:func:`_check_every_root_versioned`)."""
    out = dict(versions)
    if read_root_version is not None:
        for name in tables.roots:
            if name not in out:
                location = tables.locations[name]
                out[name] = checked_int(read_root_version(name, location), f"the Delta version of root table {name!r}")
    _check_every_root_versioned(topology, of_domain, tables.roots, out)
    return out


def _record_root_versions(
    s: Session, barrier: int, roots: Mapping[str, int], versions: Mapping[str, int], created_at: int,
    figures: Mapping[str, tuple[int, int]],
) -> None:
    """A WRITTEN row with the Delta version of every root table of the domain at ``barrier``
    (with its live-file figures where ``figures`` has them)."""
    if roots:
        s.connection().execute(
            insert(TableBarrierRow.__table__),
            [
                {
                    "table_id": table_id,
                    "barrier_id": barrier,
                    "state": BarrierState.WRITTEN,
                    "version": versions[name],
                    "written_at_ms": created_at,
                    "processed_at_ms": created_at,
                    "file_count": figures[name][0] if name in figures else None,
                    "size_bytes": figures[name][1] if name in figures else None,
                }
                for name, table_id in roots.items()
            ],
        )


def _log_domain_barrier(
    s: Session, new: BarrierInfo, barrier_log: str, domain: LockedDomain,
    versions: Mapping[str, int], read_by: Mapping[str, set[str]], domain_had_barriers: bool,
) -> None:
    """Commit barrier ``new`` to ``new.topology``'s barrier log (``barrier_log``, recorded on its
    row) and to those recorded by the other topologies of its domain, each with the root
    versions that topology reads. ``domain_had_barriers``: the domain had a barrier before."""
    from airflow_provider_tsb.delta.barrier_log import BarrierLogEntry  # deltalake: not at DAG parse time

    logs = _member_logs(s, new.topology, barrier_log, domain.barrier_logs)
    if not domain_had_barriers:
        had: set[str] = set()
    elif domain.topologies == [new.topology]:  # a domain of one: its barriers are the topology's
        had = {new.topology}
    else:
        had = set(s.scalars(select(BarrierRow.topology).distinct().where(
            BarrierRow.topology.in_(list(logs)), BarrierRow.barrier_id < new.barrier)))
    for member, location in logs.items():
        entry = BarrierLogEntry(
            member, new.barrier, new.ts_ms, str(new.ts_kind), bool(new.final), new.created_at_ms,
            new.run_key if member == new.topology else None,
            {n: versions[n] for n in sorted(read_by.get(member, ()))},
        )
        log_barrier(location, entry, first=member not in had)
