"""Leases: Delta versions pinned for a reader or a running job so snapshot expiry keeps them.

A lease is taken in one transaction that locks its tables' rows (share mode) and refuses a
version snapshot expiry has already marked expired; expiry marks under the same lock before it
vacuums (:mod:`.expiry`). So a lease that was granted keeps its files until it ends or expires.
A reader's lease pins one version per table; a running job's input lease pins the range of
versions its epoch reads, and is renewed while the job runs (a crashed job's lease lapses by
itself). See docs/design.md "Snapshot expiry".
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Mapping

from sqlalchemy import and_, delete, func, insert, select, update
from sqlalchemy.orm import Session

from airflow_provider_tsb.consistency import check_lease_seconds
from airflow_provider_tsb.exceptions import OutOfRangeError
from airflow_provider_tsb.metastore.base import MAX_INT, MetastoreCore, table_id_of
from airflow_provider_tsb.metastore.expiry import check_not_expired, expiries, lock_tables
from airflow_provider_tsb.metastore.models import (
    LeaseRow,
    LeaseVersionRow,
)
from airflow_provider_tsb.metastore.records import (
    TableExpiry,
    VersionRange,
    merge_ranges,
    now_ms,
)

#: what a lease pins of one table: a Delta version, or a closed range ``(from, to)`` of them
Pinned = int | VersionRange


def _range(value: Pinned, table: str | None = None) -> VersionRange:
    """``value`` as a closed range ``(from, to)`` of Delta versions.

    Raises:
        OutOfRangeError: not a version (an integer from 0 to 2**63-1) or a range ``(from, to)`` of
            them with ``from <= to`` (names ``table`` when given, and the value).
    """
    bounds = list(value) if isinstance(value, tuple | list) else [value, value]
    try:
        if len(bounds) != 2 or any(isinstance(b, bool) for b in bounds):
            raise TypeError
        lo, hi = (operator.index(b) for b in bounds)
    except TypeError:
        lo, hi = -1, -1
    if not 0 <= lo <= hi <= MAX_INT:
        of = f" of table {table!r}" if table is not None else ""
        raise OutOfRangeError(f"a lease pins Delta versions{of} as a version (an integer from 0 to {MAX_INT}) or a "
                              f"range (from, to) of them with from <= to, got {value!r}")
    return lo, hi


def _check_seconds(seconds: float) -> None:
    check_lease_seconds(seconds)


def lease_versions(
    s: Session, versions: Mapping[int, Pinned | None], seconds: float, holder: str | None,
    *, locked: Mapping[int, TableExpiry | None] | None = None,
) -> tuple[str, int]:
    """Lease ``{table id: Delta version or (from, to)}`` in the caller's write transaction ``s``.

    Locks the tables' rows in share mode and refuses an expired version under that lock (see
    module doc); ``None`` versions are skipped. Used by :meth:`LeaseManager.create` and by
    resolution, which leases what it answers in the same transaction. Two inserts (the lease
    and its versions, SQLAlchemy Core: no unit of work).

    Args:
        locked: ``{table id: expiry marks or None}`` when the caller already locked these
            tables' rows in share mode in ``s`` and read their marks under that lock (the
            resolution of a leased read does both in its first query); the lock and the marks
            are then not taken again.

    Returns:
        ``(lease id, expiry epoch ms)``.

    Raises:
        ExpiredVersionError: a version is already marked expired.
        OutOfRangeError: ``seconds`` is not positive and finite, or a range is invalid.
        ValueError: ``locked`` lacks a table of ``versions``.
    """
    _check_seconds(seconds)
    ranges = {table_id: _range(v) for table_id, v in versions.items() if v is not None}
    if locked is None:
        lock_tables(s, ranges)
        found: Mapping[int, TableExpiry | None] = expiries(s, list(ranges))
    else:
        unlocked = sorted(set(ranges) - set(locked))
        if unlocked:
            raise ValueError(f"lease_versions: table ids {unlocked} are not among the tables the caller locked")
        found = locked
    for table_id, (lo, hi) in sorted(ranges.items()):
        check_not_expired(s, table_id, found.get(table_id), lo, hi, what="lease's version")
    lease_id = str(uuid.uuid4())
    created = now_ms()
    expires = created + int(seconds * 1000)
    row = {"id": lease_id, "holder": holder, "created_at_ms": created, "expires_at_ms": expires}
    s.execute(insert(LeaseRow), [row])
    if ranges:
        s.execute(insert(LeaseVersionRow), [
            {"lease_id": lease_id, "table_id": table_id, "version": hi, "from_version": lo if lo != hi else None}
            for table_id, (lo, hi) in ranges.items()
        ])
    return lease_id, expires


def narrow_lease(s: Session, lease_id: str, ranges: Mapping[int, VersionRange]) -> bool:
    """Narrow lease ``lease_id`` to ``{table id: (from, to)}`` in the caller's write transaction
    ``s``: a table left out is no longer pinned, a range given must lie inside the one pinned.
    No expiry check is needed (a lease only ever pins versions expiry had to keep). Used by a
    batch run's input lease as its barriers are done (:mod:`airflow_provider_tsb.spark.input_leases`).

    Returns:
        False when the lease is gone (lapsed and removed, or released).

    Raises:
        ValueError: a range is not inside the lease's range of its table, or names a table the
            lease does not pin (a lease never widens: it would skip the expiry check).
    """
    rows = s.scalars(select(LeaseVersionRow).where(LeaseVersionRow.lease_id == lease_id))
    pinned = {row.table_id: row for row in rows}
    if not pinned:
        return False
    for table_id, value in ranges.items():
        lo, hi = _range(value)
        row = pinned.get(table_id)
        held = (row.version if row.from_version is None else row.from_version, row.version) if row else None
        if held is None or lo < held[0] or hi > held[1]:
            raise ValueError(f"lease {lease_id}: cannot narrow table id {table_id} to {(lo, hi)}: the lease pins "
                             f"{held if held is not None else 'nothing of it'}, and a lease never widens")
    for table_id, row in pinned.items():
        if table_id not in ranges:
            s.delete(row)
            continue
        lo, hi = _range(ranges[table_id])
        row.version, row.from_version = hi, (lo if lo != hi else None)
    return True


def end_lease(s: Session, lease_id: str) -> bool:
    """End lease ``lease_id`` in the caller's write transaction ``s``; True if it existed (a
    lapsed lease may already have been removed by :meth:`LeaseManager.expire`)."""
    s.execute(delete(LeaseVersionRow).where(LeaseVersionRow.lease_id == lease_id))
    return bool(s.execute(delete(LeaseRow).where(LeaseRow.id == lease_id)).rowcount)


class LeaseManager:
    """Create, renew, release, expire and list leases (FLIP-276 "MetaService": snapshots in use)."""

    def __init__(self, core: MetastoreCore) -> None:
        self._core = core

    def create(
        self, versions: Mapping[str, Pinned], seconds: float, holder: str | None = None
    ) -> tuple[str, int]:
        """Pin ``{table: Delta version or (from, to) range}`` for ``seconds``.

        Returns:
            ``(lease id, expiry epoch ms)``.

        Raises:
            ExpiredVersionError: a version is already marked expired by snapshot expiry (names
                the table, the barrier and the retention).
            UnknownTableError: a table is not registered.
            OutOfRangeError: ``seconds`` is not positive and finite, or a version or range is
                invalid (names the table).
        """
        _check_seconds(seconds)
        checked = {name: None if v is None else _range(v, name) for name, v in versions.items()}
        with self._core.transaction(write=True) as s:
            ids = {table_id_of(s, name): v for name, v in checked.items()}
            return lease_versions(s, ids, seconds, holder)

    def renew(self, lease_id: str, seconds: float) -> int | None:
        """Extend a live lease to end ``seconds`` from now; returns the new expiry (epoch ms).

        Returns ``None`` when the lease is gone or has lapsed: a lapsed lease is not revived,
        since expiry may already have removed its versions.
        """
        _check_seconds(seconds)
        at = now_ms()
        expires = at + int(seconds * 1000)
        with self._core.transaction(write=True) as s:
            done = s.execute(
                update(LeaseRow).where(LeaseRow.id == lease_id, LeaseRow.expires_at_ms > at)
                .values(expires_at_ms=expires)
            ).rowcount
            return expires if done else None

    def narrow(self, lease_id: str, versions: Mapping[str, Pinned]) -> bool:
        """Narrow a lease to ``{table: Delta version or (from, to)}`` (:func:`narrow_lease`).

        Returns:
            False when the lease is gone.

        Raises:
            UnknownTableError: a table is not registered.
            OutOfRangeError: a version or range is invalid (names the table).
            ValueError: a range would widen the lease.
        """
        checked = {name: _range(v, name) for name, v in versions.items()}
        with self._core.transaction(write=True) as s:
            ids = {table_id_of(s, name): v for name, v in checked.items()}
            return narrow_lease(s, lease_id, ids)

    def release(self, lease_id: str) -> bool:
        """End a lease early. Returns True if it existed."""
        with self._core.transaction(write=True) as s:
            return end_lease(s, lease_id)

    def expire(self, now: int | None = None) -> int:
        """Delete leases whose expiry has passed. Returns how many were removed."""
        cutoff = now if now is not None else now_ms()
        with self._core.transaction(write=True) as s:
            expired = s.scalars(select(LeaseRow.id).where(LeaseRow.expires_at_ms <= cutoff)).all()
            if expired:
                s.execute(delete(LeaseVersionRow).where(LeaseVersionRow.lease_id.in_(expired)))
                s.execute(delete(LeaseRow).where(LeaseRow.id.in_(expired)))
            return len(expired)

    def leased_ranges(self, table: str, now: int | None = None) -> list[VersionRange]:
        """Version ranges of ``table`` pinned by live leases: sorted, disjoint, closed."""
        cutoff = now if now is not None else now_ms()
        with self._core.transaction() as s:
            table_id = table_id_of(s, table)
            rows = s.execute(
                select(LeaseVersionRow.from_version, LeaseVersionRow.version)
                .join(LeaseRow, LeaseRow.id == LeaseVersionRow.lease_id)
                .where(and_(LeaseVersionRow.table_id == table_id, LeaseRow.expires_at_ms > cutoff))
            ).all()
        return merge_ranges((v if f is None else f, v) for f, v in rows)

    def held_versions(self, holder_prefix: str, now: int | None = None) -> int:
        """How many Delta versions the live leases whose holder starts with ``holder_prefix`` pin,
        over every table (a range counts each of its versions): one aggregate query."""
        cutoff = now if now is not None else now_ms()
        width = LeaseVersionRow.version - func.coalesce(LeaseVersionRow.from_version, LeaseVersionRow.version) + 1
        with self._core.transaction() as s:
            held = s.scalar(
                select(func.coalesce(func.sum(width), 0))
                .join(LeaseRow, LeaseRow.id == LeaseVersionRow.lease_id)
                .where(LeaseRow.holder.startswith(holder_prefix, autoescape=True), LeaseRow.expires_at_ms > cutoff)
            )
        return int(held or 0)

    def leased_versions(self, table: str, now: int | None = None) -> set[int]:
        """Delta versions of ``table`` pinned by live leases (snapshot expiry must keep them)."""
        return {v for lo, hi in self.leased_ranges(table, now) for v in range(lo, hi + 1)}
