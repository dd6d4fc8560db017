"""Version resolution at the four levels of FLIP-276 "Data Consistency Type", in one place."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from airflow_provider_tsb.consistency import ConsistencyLevel, ReadOptions
from airflow_provider_tsb.exceptions import (
    InconsistentReadError,
    TopologyError,
    UnknownTableError,
)
from airflow_provider_tsb.metastore.barrier_history import unknown_barrier_error
from airflow_provider_tsb.metastore.domains import domain_name
from airflow_provider_tsb.metastore.leases import LeaseManager
from airflow_provider_tsb.metastore.models import (
    TableBarrierRow,
    TableRow,
)
from airflow_provider_tsb.metastore.records import (
    LATEST,
    BarrierState,
    CommitState,
    Resolution,
    TableVersion,
)
from airflow_provider_tsb.metastore.registry import RegistryManager
from airflow_provider_tsb.metastore.table_states import TableStateManager
from airflow_provider_tsb.names import normalize_table_name


class ResolutionManager(RegistryManager, TableStateManager, LeaseManager):
    """Which Delta version of each table of Q to read: READ_UNCOMMITTED, READ_COMMITTED,
    REPEATABLE_READ or AS OF a barrier (uses the registry, table states and leases)."""

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
        names = list(dict.fromkeys(normalize_table_name(t) for t in tables))
        if not names:
            raise ValueError("resolve() needs at least one table")
        if opts.level is ConsistencyLevel.READ_UNCOMMITTED:
            return self._resolve_latest(names, opts)
        level, as_of, min_barrier = opts.level, opts.as_of, opts.min_barrier
        lease_seconds, lease_holder = opts.lease_seconds, opts.lease_holder
        written, processed = BarrierState.WRITTEN, BarrierState.PROCESSED
        states = (written,) if level is not ConsistencyLevel.READ_COMMITTED else (processed, written)
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
            ids = [by_name[n].id for n in names]
            if lease_seconds is not None:
                self._lock_tables(s, ids)  # the lock snapshot expiry marks under (metastore/expiry.py)
            expiries = self._expiries(s, ids)
            if as_of is not None:
                barrier = as_of
                found = self._rows_at(s, ids, barrier)
                lacking = [n for n in names if by_name[n].id not in found or found[by_name[n].id].state != written]
                if lacking:
                    unknown = unknown_barrier_error(s, rows[0].topology, as_of)
                    if unknown is not None:
                        raise unknown
                    newest = self._newest(s, [by_name[n].id for n in lacking], (written,))
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
                    wanted = CommitState.PRECOMMIT if level is ConsistencyLevel.READ_COMMITTED else CommitState.COMMIT
                    raise InconsistentReadError(
                        f"no barrier is {wanted} "
                        f"over {names}: table(s) {empty} have no "
                        f"{f'{processed} or {written}' if level is ConsistencyLevel.READ_COMMITTED else written} "
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
                if row.state == BarrierState.WRITTEN:
                    if row.version is not None and r.id in expiries and expiries[r.id].is_expired(row.version):
                        raise self._expired_error(s, r.id, expiries[r.id], row.version, barrier=barrier)
                    result[name] = TableVersion(name, r.location, row.version, barrier, BarrierState.WRITTEN)
                else:
                    base = s.scalar(
                        select(TableBarrierRow.version)
                        .where(
                            TableBarrierRow.table_id == r.id,
                            TableBarrierRow.state == BarrierState.WRITTEN,
                            TableBarrierRow.barrier_id < barrier,
                        )
                        .order_by(TableBarrierRow.barrier_id.desc()).limit(1)
                    )
                    if base is not None:
                        self._check_not_expired(s, r.id, expiries.get(r.id), base)
                    result[name] = TableVersion(
                        name, r.location, base, barrier, BarrierState.PROCESSED, staged=dict(row.manifest or {})
                    )
            lease_id = expires = None
            if lease_seconds is not None:
                lease_id, expires = self._create_lease(
                    s, {by_name[n].id: tv.version for n, tv in result.items()}, lease_seconds, lease_holder
                )
            return Resolution(level, barrier, result, lease_id, expires, as_of)

    def _resolve_latest(self, names: list[str], opts: ReadOptions) -> Resolution:
        """READ_UNCOMMITTED: each table's latest Delta version, tagged with its barrier if any."""
        from airflow_provider_tsb.delta.log import latest_version, normalize_location, table_exists

        infos = {name: self.table(name) for name in names}
        locations = {name: normalize_location(info.location) for name, info in infos.items()}
        versions = {name: latest_version(loc) if table_exists(loc) else None for name, loc in locations.items()}
        barriers = self.barriers_at_versions(versions)
        result = {
            name: TableVersion(name, infos[name].location, versions[name], barriers.get(name), LATEST)
            for name in names
        }
        lease_id = expires = None
        pinned = {name: v for name, v in versions.items() if v is not None}
        if opts.lease_seconds is not None and pinned:
            lease_id, expires = self.create_lease(pinned, opts.lease_seconds, opts.lease_holder)
        return Resolution(opts.level, None, result, lease_id, expires, None)

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
