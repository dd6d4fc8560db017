"""Version resolution at the four levels of FLIP-276 "Data Consistency Type", in one place.

:meth:`ResolutionManager.resolve` is a sequence of named steps, each a function taking the
session of the read's one transaction (so a step's SQL is visible and the whole read stays one
transaction, one round trip per step):

1. :func:`registered`: the tables of Q as registered (one query), in one barrier domain;
2. :func:`~.expiry.expiries`: the expiry marks (in step 1's query, :func:`registered_with_expiries`,
   unless a leased read locked the rows in step 1);
3. the barrier: :func:`pinned_barrier` for AS OF, else :func:`candidate_barrier` (one index seek
   per table and state) and :func:`confirm` (one primary-key lookup per table; a fallback scan
   only when a table skipped barriers);
4. :func:`check_monotonic`: ``min_barrier`` (monotonic reads);
5. :func:`table_versions`: the Delta version of each table (a PROCESSED table: its previous
   WRITTEN version plus the staged manifest), never an expired one;
6. :func:`with_lease`: pin the answer (:func:`~.leases.lease_versions`) in the same transaction.

READ_UNCOMMITTED reads each table's latest version from its Delta log
(:meth:`ResolutionManager.latest_versions`); :class:`~.staleness.StalenessResolver` bounds staleness.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from sqlalchemy import Row, Select, bindparam, func, select
from sqlalchemy.orm import Session

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.consistency import ConsistencyLevel, ReadOptions, table_list
from airflow_provider_tsb.exceptions import (
    InconsistentReadError,
    InvalidReadOptionError,
    TopologyError,
    UnknownTableError,
)
from airflow_provider_tsb.metastore.barrier_history import unknown_barrier_error
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.domains import domain_name
from airflow_provider_tsb.metastore.expiry import check_not_expired, expired_error, expiries, expiry_of
from airflow_provider_tsb.metastore.leases import LeaseManager, lease_versions
from airflow_provider_tsb.metastore.models import (
    TableBarrierRow,
    TableExpiryRow,
    TableRow,
)
from airflow_provider_tsb.metastore.records import (
    LATEST,
    BarrierState,
    CommitState,
    Resolution,
    TableExpiry,
    TableInfo,
    TableVersion,
)
from airflow_provider_tsb.metastore.registry import RegistryManager
from airflow_provider_tsb.metastore.table_states import TableStateManager
from airflow_provider_tsb.names import normalize_table_name


class Resolver(Protocol):
    """Anything that resolves tables Q at a level: :class:`ResolutionManager`, or a wrapper of one
    (:class:`~.staleness.StalenessResolver`)."""

    def resolve(
        self, tables: Iterable[str], level: ReadOptions | ConsistencyLevel | str | None = None, **options: Any
    ) -> Resolution: ...


@dataclass(frozen=True)
class ReadSet:
    """The tables of Q as registered (:func:`registered`).

    Attributes:
        names: canonical names of Q, in the caller's order, without duplicates.
        rows: {name: row with ``id``, ``name``, ``location``, ``topology``}.
        topology: the topology of the first row the database returned (for error messages).
        ids: table ids of Q, in the order of ``names``.
    """

    names: list[str]
    rows: dict[str, Row[Any]]
    topology: str
    ids: list[int]


def canonical_names(tables: Iterable[str]) -> list[str]:
    """Canonical names of Q without duplicates, in order.

    Raises:
        InvalidReadOptionError: Q is empty, or one string instead of a list of names.
    """
    names = list(dict.fromkeys(normalize_table_name(t) for t in table_list(tables)))
    if not names:
        raise InvalidReadOptionError("read option tables: resolve() needs at least one table name, got none")
    return names


def states_read(level: ConsistencyLevel) -> tuple[str, ...]:
    """The table states a barrier may be in to be read at ``level``: WRITTEN, and at
    READ_COMMITTED also PROCESSED (PRECOMMIT over Q)."""
    if level is ConsistencyLevel.READ_COMMITTED:
        return (BarrierState.PROCESSED, BarrierState.WRITTEN)
    return (BarrierState.WRITTEN,)


#: the statement of :func:`registered` (built once), and the same locking the rows in share mode
#: in id order, as :func:`~.expiry.lock_tables` does (PostgreSQL locks them as the sorted scan returns them)
REGISTERED = select(TableRow.id, TableRow.name, TableRow.location, TableRow.topology)
REGISTERED = REGISTERED.where(TableRow.name.in_(bindparam("names", expanding=True)))
REGISTERED_LOCKED = REGISTERED.order_by(TableRow.id).with_for_update(read=True)


def registered(s: Session, names: list[str], *, lock: bool = False) -> ReadSet:
    """Step 1: the tables of Q as registered (one query), all in one barrier domain; with
    ``lock`` (a leased read, in a write transaction) their rows locked in share mode: the lock
    snapshot expiry marks under (metastore/expiry.py).

    Raises:
        UnknownTableError: a table is not registered.
        TopologyError: the tables belong to topologies of different barrier domains.
    """
    return read_set(s, names, s.execute(REGISTERED_LOCKED if lock else REGISTERED, {"names": names}).all())


#: the statement of :func:`registered_with_expiries` (built once)
REGISTERED_WITH_EXPIRIES = (
    select(TableRow.id, TableRow.name, TableRow.location, TableRow.topology, TableExpiryRow)
    .outerjoin(TableExpiryRow, TableExpiryRow.table_id == TableRow.id)
    .where(TableRow.name.in_(bindparam("names", expanding=True)))
)


def registered_with_expiries(s: Session, names: list[str]) -> tuple[ReadSet, dict[int, TableExpiry]]:
    """Steps 1 and 2 of a read without a lease in one query: the tables of Q as registered
    (:func:`registered`) and their expiry marks (:func:`~.expiry.expiries`), an outer join.
    Raises as :func:`registered`."""
    rows = s.execute(REGISTERED_WITH_EXPIRIES, {"names": names}).all()
    marks = {r.id: expiry_of(r.name, r.TableExpiryRow) for r in rows if r.TableExpiryRow is not None}
    return read_set(s, names, rows), marks


def read_set(s: Session, names: list[str], rows: Sequence[Row[Any]]) -> ReadSet:
    """The :class:`ReadSet` of Q from its ``tsb_table`` rows (``id``, ``name``, ``location``,
    ``topology``). Raises as :func:`registered`."""
    by_name = {r.name: r for r in rows}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise UnknownTableError(f"table(s) {missing} are not registered in the tsb metastore; check the names")
    topologies = sorted({r.topology for r in rows})
    if len(topologies) > 1:
        domains = {t: domain_name(s, t) for t in topologies}
        if len(set(domains.values())) > 1:
            raise TopologyError(
                f"tables {names} belong to topologies {topologies} of different barrier domains "
                f"{dict(sorted(domains.items()))}; barrier ids mean the same root versions only "
                "within one domain, so resolve each domain's tables separately (topologies that "
                "share a root table, or declare one barrier_domain, share barriers)"
            )
    return ReadSet(names, by_name, rows[0].topology, [by_name[n].id for n in names])


def newest_barriers(s: Session, ids: Sequence[int], states: Sequence[str]) -> dict[int, int | None]:
    """``{table id: newest barrier in one of ``states``}`` (``None``: none), in one round trip:
    one index seek per (table, state), a max over a B-tree prefix."""
    columns = []
    for table_id in ids:
        columns.extend(
            select(func.max(TableBarrierRow.barrier_id))
            .where(TableBarrierRow.table_id == table_id, TableBarrierRow.state == st)
            .scalar_subquery()
            for st in states
        )
    values = s.execute(select(*columns)).one()
    out: dict[int, int | None] = {}
    k = len(states)
    for i, table_id in enumerate(ids):
        found = [v for v in values[i * k : (i + 1) * k] if v is not None]
        out[table_id] = max(found) if found else None
    return out


def rows_at(s: Session, ids: Sequence[int], barrier: int) -> dict[int, TableBarrierRow]:
    """``{table id: state row}`` of the tables that have ``barrier`` (one primary-key lookup each)."""
    at = select(TableBarrierRow).where(TableBarrierRow.barrier_id == barrier, TableBarrierRow.table_id.in_(list(ids)))
    return {row.table_id: row for row in s.scalars(at).all()}


@lru_cache(maxsize=256)
def consistent_rows_statement(tables: int, states: tuple[str, ...], dialect: str) -> Select[Any]:
    """The statement of :func:`newest_consistent_rows` for ``tables`` tables (bound parameters
    ``t0``, ``t1``, ... and ``ids``), built once per shape: building it cost more than running it."""
    pick_max, pick_min = (func.greatest, func.least) if dialect != "sqlite" else (func.max, func.min)
    per_table = []
    for i in range(tables):
        newest = [
            select(func.max(TableBarrierRow.barrier_id))
            .where(TableBarrierRow.table_id == bindparam(f"t{i}"), TableBarrierRow.state == st)
            .scalar_subquery()
            for st in states
        ]
        per_table.append(newest[0] if len(newest) == 1 else pick_max(*newest))
    candidate = per_table[0] if len(per_table) == 1 else pick_min(*per_table)
    return select(TableBarrierRow).where(
        TableBarrierRow.table_id.in_(bindparam("ids", expanding=True)), TableBarrierRow.barrier_id == candidate
    )
CACHES.on_clear("metastore.statements", consistent_rows_statement.cache_clear)


def newest_consistent_rows(
    s: Session, ids: Sequence[int], states: Sequence[str]
) -> tuple[int, dict[int, TableBarrierRow]] | None:
    """Step 3 in one round trip when nothing is unusual: the rows of the tables at the candidate
    barrier (the oldest of the tables' newest barriers in ``states``: :func:`newest_barriers`
    computed inside the statement, an index seek per table and state), if every table has it in
    one of ``states``; else ``None`` (a table skipped barriers or has none: the caller takes
    the step-by-step path, :func:`candidate_barrier` and :func:`confirm`, which explains)."""
    statement = consistent_rows_statement(len(ids), tuple(states), s.get_bind().dialect.name)
    params: dict[str, Any] = {f"t{i}": table_id for i, table_id in enumerate(ids)}
    rows = s.scalars(statement, {**params, "ids": list(ids)}).all()
    found = {row.table_id: row for row in rows}
    if not rows or any(i not in found or found[i].state not in states for i in ids):
        return None
    return rows[0].barrier_id, found


def newest_common(s: Session, ids: Sequence[int], states: Sequence[str], at_most: int) -> int | None:
    """The newest barrier at most ``at_most`` in one of ``states`` in every table (the fallback scan)."""
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


def pinned_barrier(s: Session, q: ReadSet, as_of: int) -> tuple[int, dict[int, TableBarrierRow]]:
    """Step 3, AS OF: barrier ``as_of`` and its rows, which must be COMMIT over Q.

    Raises:
        UnknownBarrierError: ``as_of`` was never generated in the tables' topology.
        InconsistentReadError: ``as_of`` is not WRITTEN in every table (names them and what they have).
    """
    written = BarrierState.WRITTEN
    found = rows_at(s, q.ids, as_of)
    lacking = [n for n in q.names if q.rows[n].id not in found or found[q.rows[n].id].state != written]
    if lacking:
        unknown = unknown_barrier_error(s, q.topology, as_of)
        if unknown is not None:
            raise unknown
        newest = newest_barriers(s, [q.rows[n].id for n in lacking], (written,))
        detail = ", ".join(f"{n} has barrier {newest.get(q.rows[n].id)}" for n in lacking)
        raise InconsistentReadError(
            f"barrier {as_of} is not COMMIT over {q.names}: not WRITTEN in {lacking} (newest WRITTEN: {detail})"
        )
    return as_of, found


def candidate_barrier(s: Session, q: ReadSet, level: ConsistencyLevel) -> int:
    """Step 3: the candidate barrier: the oldest of the tables' newest barriers readable at
    ``level`` (:func:`states_read`); one index seek per (table, state).

    Raises:
        InconsistentReadError: a table has no such barrier yet.
    """
    newest = newest_barriers(s, q.ids, states_read(level))
    empty = [n for n in q.names if newest.get(q.rows[n].id) is None]
    if empty:
        committed = level is not ConsistencyLevel.READ_COMMITTED
        wanted = CommitState.COMMIT if committed else CommitState.PRECOMMIT
        what = BarrierState.WRITTEN if committed else f"{BarrierState.PROCESSED} or {BarrierState.WRITTEN}"
        raise InconsistentReadError(
            f"no barrier is {wanted} over {q.names}: table(s) {empty} have no {what} barrier yet; wait for the "
            "first barrier to be committed"
        )
    return min(v for v in newest.values() if v is not None)


def confirm(
    s: Session, q: ReadSet, candidate: int, level: ConsistencyLevel
) -> tuple[int, dict[int, TableBarrierRow]]:
    """Step 3: the candidate's rows when every table has it at ``level``; else (a table skipped
    barriers) the newest barrier below it that every table has, by one grouped scan.

    Raises:
        InconsistentReadError: the tables' barrier histories do not overlap.
    """
    states = states_read(level)
    found = rows_at(s, q.ids, candidate)
    if all(i in found and found[i].state in states for i in q.ids):
        return candidate, found
    barrier = newest_common(s, q.ids, states, candidate)
    if barrier is None:
        raise InconsistentReadError(
            f"no barrier is WRITTEN in all of {q.names} (their barrier histories do not overlap)"
        )
    return barrier, rows_at(s, q.ids, barrier)


def check_monotonic(q: ReadSet, level: ConsistencyLevel, barrier: int, min_barrier: int | None) -> None:
    """Step 4: monotonic reads: refuse ``barrier`` when it is below ``min_barrier``.

    Raises:
        InconsistentReadError: the answer would go backwards (after a rollback).
    """
    if min_barrier is not None and barrier < min_barrier:
        raise InconsistentReadError(
            f"the newest barrier consistent over {q.names} at {level.value} is {barrier}, "
            f"older than the last seen barrier {min_barrier}: a job failed and rolled back; "
            "monotonic reads refuse to go backwards, retry once it has recovered"
        )


def table_versions(
    s: Session, q: ReadSet, barrier: int, found: Mapping[int, TableBarrierRow], marks: Mapping[int, TableExpiry]
) -> dict[str, TableVersion]:
    """Step 5: what to read of each table at ``barrier``: a WRITTEN table's version; a PROCESSED
    table's previous WRITTEN version (one seek) plus its staged manifest.

    Raises:
        ExpiredVersionError: a version to read is expired (names the table, barrier, retention).
    """
    result: dict[str, TableVersion] = {}
    for name in q.names:
        r, row = q.rows[name], found[q.rows[name].id]
        if row.state == BarrierState.WRITTEN:
            mark = marks.get(r.id)
            if row.version is not None and mark is not None and mark.is_expired(row.version):
                raise expired_error(s, r.id, mark, row.version, barrier=barrier)
            result[name] = TableVersion(name, r.location, row.version, barrier, BarrierState.WRITTEN,
                                        file_count=row.file_count, size_bytes=row.size_bytes)
            continue
        base = s.scalar(
            select(TableBarrierRow)
            .where(
                TableBarrierRow.table_id == r.id,
                TableBarrierRow.state == BarrierState.WRITTEN,
                TableBarrierRow.barrier_id < barrier,
            )
            .order_by(TableBarrierRow.barrier_id.desc()).limit(1)
        )
        if base is not None and base.version is not None:
            check_not_expired(s, r.id, marks.get(r.id), base.version)
        result[name] = TableVersion(
            name, r.location, base.version if base is not None else None, barrier, BarrierState.PROCESSED,
            staged=dict(row.manifest or {}), file_count=base.file_count if base is not None else None,
            size_bytes=base.size_bytes if base is not None else None,
        )
    return result


def with_lease(
    s: Session, q: ReadSet, result: Mapping[str, TableVersion], opts: ReadOptions, marks: Mapping[int, TableExpiry]
) -> tuple[str | None, int | None]:
    """Step 6: lease the answer's versions for ``opts.lease_seconds`` (nothing when ``None``)
    under step 1's share locks, with the ``marks`` read under them. Returns ``(lease id, expiry
    epoch ms)``, or ``(None, None)``."""
    if opts.lease_seconds is None:
        return None, None
    versions = {q.rows[n].id: tv.version for n, tv in result.items()}
    locked = {table_id: marks.get(table_id) for table_id in q.ids}
    return lease_versions(s, versions, opts.lease_seconds, opts.lease_holder, locked=locked)


def resolve_in(s: Session, names: list[str], opts: ReadOptions) -> Resolution:
    """Steps 1-6 in transaction ``s`` (a write transaction when ``opts.lease_seconds`` is set);
    READ_COMMITTED, REPEATABLE_READ and AS OF. Raises as :meth:`ResolutionManager.resolve`."""
    if opts.lease_seconds is not None:
        # the marks in a statement of their own: one joined to the locking read would see them as
        # of its start, before expiry's lock was released (test_race_writer_expiry_readers)
        q = registered(s, names, lock=True)
        marks = expiries(s, q.ids)
    else:
        q, marks = registered_with_expiries(s, names)
    fast = None if opts.as_of is not None else newest_consistent_rows(s, q.ids, states_read(opts.level))
    if opts.as_of is not None:
        barrier, found = pinned_barrier(s, q, opts.as_of)
    elif fast is not None:
        barrier, found = fast
    else:
        barrier, found = confirm(s, q, candidate_barrier(s, q, opts.level), opts.level)
    check_monotonic(q, opts.level, barrier, opts.min_barrier)
    result = table_versions(s, q, barrier, found, marks)
    lease_id, expires = with_lease(s, q, result, opts, marks)
    return Resolution(opts.level, barrier, result, lease_id, expires, opts.as_of)


class ResolutionManager:
    """Which Delta version of each table of Q to read: READ_UNCOMMITTED, READ_COMMITTED,
    REPEATABLE_READ or AS OF a barrier (see module doc for the steps).

    Args:
        core: the metastore's engine and transactions.
        registry: the tables' locations (READ_UNCOMMITTED).
        table_states: the barriers at the latest versions (READ_UNCOMMITTED).
        leases: the lease of a READ_UNCOMMITTED answer.
    """

    def __init__(
        self, core: MetastoreCore, registry: RegistryManager, table_states: TableStateManager, leases: LeaseManager
    ) -> None:
        self._core = core
        self._registry = registry
        self._table_states = table_states
        self._leases = leases

    def resolve(
        self,
        tables: Iterable[str],
        level: ReadOptions | ConsistencyLevel | str | None = None,
        **options: Any,
    ) -> Resolution:
        """Resolve the Delta version of each table of Q at a consistency level.

        Only the tables in Q constrain the answer (FLIP-276 "Data Consistency Type").

        * READ_UNCOMMITTED: each table at its latest Delta version, read from the Delta log
          with delta-rs, tagged with the barrier the metastore records at that version when
          there is one (state :data:`LATEST`). Fast; may mix barriers.
        * READ_COMMITTED: the newest barrier PRECOMMIT over Q (PROCESSED or WRITTEN in every
          table); a PROCESSED table returns its previous WRITTEN version plus the staged manifest.
        * REPEATABLE_READ: the newest barrier COMMIT over Q (WRITTEN in every table).
        * AS OF ``as_of``: that barrier, which must be COMMIT over Q.

        Cost: per table one index seek for its newest barrier, then one primary-key lookup per
        table to confirm the candidate; independent of the length of the barrier history
        (a fallback scan runs only when a table skipped barriers). READ_UNCOMMITTED adds one
        delta-rs log read per table.

        Args:
            tables: names of Q (``catalog.database.table``).
            level: a :class:`~airflow_provider_tsb.consistency.ReadOptions`, or a
                :class:`ConsistencyLevel` or its name (default REPEATABLE_READ).
            **options: :class:`ReadOptions` fields overriding those of ``level``: ``as_of``
                (barrier id, REPEATABLE_READ only), ``min_barrier`` (monotonic reads: the
                answer is never older; ignored at READ_UNCOMMITTED), ``lease_seconds`` (pin the
                returned versions for this many seconds), ``lease_holder``.

        Returns:
            A :class:`Resolution`; at READ_UNCOMMITTED its ``barrier`` is ``None`` and a
            table's ``version`` is ``None`` when its Delta table does not exist yet.

        Raises:
            UnknownTableError: a table is not registered.
            UnknownBarrierError: ``as_of`` was never generated in the tables' topology.
            InconsistentReadError: no barrier satisfies the level over Q, ``as_of`` is not
                COMMIT over Q (names the tables that lack it and what they have), or
                ``min_barrier`` is no longer available (after a rollback).
            TopologyError: the tables belong to topologies of different barrier domains (barrier
                ids are per domain: :mod:`.domains`).
            ExpiredVersionError: the barrier (``as_of``, or the newest one consistent over Q)
                was expired by snapshot expiry in a table of Q (names the table, the barrier and
                the retention ``keep_barriers``); an expired version is never answered.
            ValueError: Q is empty, or the options are invalid (see :class:`ReadOptions`).
            DeltaLogError: READ_UNCOMMITTED could not read a table's Delta log.
        """
        opts = ReadOptions.of(level, **options)
        names = canonical_names(tables)
        if opts.level is ConsistencyLevel.READ_UNCOMMITTED:
            return self.latest_versions(names, opts)
        with self._core.transaction(write=opts.lease_seconds is not None) as s:
            return resolve_in(s, names, opts)

    def latest_versions(self, names: list[str], opts: ReadOptions) -> Resolution:
        """READ_UNCOMMITTED: each table's latest Delta version (one delta-rs log read per table),
        tagged with the barrier the metastore records at it; leased when ``opts.lease_seconds``.

        Raises:
            UnknownTableError: a table is not registered.
            DeltaLogError: a table's Delta log could not be read.
        """
        from airflow_provider_tsb.delta.log import latest_version, normalize_location, table_exists

        infos: dict[str, TableInfo] = {}
        for name in names:
            info = self._registry.table(name)  # required: raises instead of answering None
            assert info is not None
            infos[name] = info
        locations = {name: normalize_location(info.location) for name, info in infos.items()}
        versions = {name: latest_version(loc) if table_exists(loc) else None for name, loc in locations.items()}
        barriers = self._table_states.barriers_at_versions(versions)
        result = {
            name: TableVersion(name, infos[name].location, versions[name], barriers.get(name), LATEST)
            for name in names
        }
        lease_id = expires = None
        pinned = {name: v for name, v in versions.items() if v is not None}
        if opts.lease_seconds is not None and pinned:
            lease_id, expires = self._leases.create(pinned, opts.lease_seconds, opts.lease_holder)
        return Resolution(opts.level, None, result, lease_id, expires, None)
