"""Expiry marks: which Delta versions snapshot expiry has expired, written before it vacuums.

Snapshot expiry (:mod:`airflow_provider_tsb.maintenance.expiry`) and lease creation
(:mod:`.leases`) meet here, under one lock per table: the table's ``tsb_table`` row.

* Expiry, in one transaction, locks the row exclusively (``SELECT ... FOR NO KEY UPDATE`` on
  PostgreSQL, which excludes leases and other expiries but not the inserts whose foreign key
  references the row: a barrier's WRITTEN rows do not wait for expiry; SQLite's ``BEGIN
  IMMEDIATE`` serialises all writers), reads the live leases, the
  newest ``keep_barriers`` WRITTEN barriers and what registered reader jobs still have to read,
  and writes the table's marks (:class:`~airflow_provider_tsb.metastore.records.TableExpiry`).
  Only then does vacuum delete files.
* A lease locks the rows of its tables in share mode and refuses, in the same transaction, a
  version already marked expired (:class:`~airflow_provider_tsb.exceptions.ExpiredVersionError`).

So a lease either commits before the marks (expiry sees it and keeps its versions) or after
them (it is refused): no live lease loses its files. Resolution reads the marks too and never
answers with an expired version (docs/design.md "Snapshot expiry"; the races of
apache/paimon#6978 and #5819).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from airflow_provider_tsb.exceptions import ExpiredVersionError, UnknownTableError
from airflow_provider_tsb.maintenance.retention import RetentionPolicy
from airflow_provider_tsb.metastore.base import MetastoreCore, table_id_of
from airflow_provider_tsb.metastore.models import (
    BarrierRow,
    JobSinkRow,
    JobSourceRow,
    LeaseRow,
    LeaseVersionRow,
    TableBarrierRow,
    TableExpiryRow,
    TableRow,
)
from airflow_provider_tsb.metastore.records import (
    BarrierState,
    ExpiryPlan,
    TableExpiry,
    VersionRange,
    intersect_ranges,
    merge_ranges,
    now_ms,
)
from airflow_provider_tsb.names import normalize_table_name


def expiry_of(name: str, row: TableExpiryRow) -> TableExpiry:
    """The :class:`TableExpiry` of table ``name`` from its ``tsb_table_expiry`` row."""
    return TableExpiry(
        table=name,
        horizon=int(row.horizon),
        kept=tuple((int(a), int(b)) for a, b in row.kept or []),
        keep_barriers=int(row.keep_barriers),
        expired_at_ms=int(row.expired_at_ms),
        retention=dict(row.retention) if row.retention else None,
    )


def lock_tables(s: Session, table_ids: Iterable[int], *, exclusive: bool = False) -> None:
    """Lock the ``tsb_table`` rows: share mode for leases, exclusive for expiry.

    In id order, so two lease transactions never deadlock. On SQLite a write transaction
    already holds the database's write lock (``BEGIN IMMEDIATE``) and this is a no-op read.
    """
    ids = sorted(set(table_ids))
    if ids:
        s.execute(
            select(TableRow.id).where(TableRow.id.in_(ids)).order_by(TableRow.id)
            .with_for_update(read=not exclusive, key_share=exclusive)  # module doc
        ).all()


def expiries(s: Session, table_ids: Sequence[int]) -> dict[int, TableExpiry]:
    """``{table id: expiry marks}`` of those of ``table_ids`` that snapshot expiry marked (one query)."""
    rows = s.execute(
        select(TableExpiryRow, TableRow.name)
        .join(TableRow, TableRow.id == TableExpiryRow.table_id)
        .where(TableExpiryRow.table_id.in_(list(table_ids)))
    ).all()
    return {row.table_id: expiry_of(name, row) for row, name in rows}


def check_not_expired(
    s: Session, table_id: int, expiry: TableExpiry | None, lo: int, hi: int | None = None,
    *, what: str = "version",
) -> None:
    """Raise :class:`ExpiredVersionError` if a version of ``[lo, hi]`` is expired."""
    if expiry is None:
        return
    bad = expiry.first_expired(lo, hi)
    if bad is not None:
        raise expired_error(s, table_id, expiry, bad, what=what)


def expired_error(
    s: Session, table_id: int, expiry: TableExpiry, version: int, *, what: str = "version",
    barrier: int | None = None,
) -> ExpiredVersionError:
    if barrier is None:
        barrier = s.scalar(
            select(func.max(TableBarrierRow.barrier_id)).where(
                TableBarrierRow.table_id == table_id, TableBarrierRow.version == version,
                TableBarrierRow.state == BarrierState.WRITTEN,
            )
        )
    oldest = oldest_readable_barrier(s, table_id, expiry)
    at = f"barrier {barrier} (Delta version {version})" if barrier is not None else f"Delta version {version}"
    policy = RetentionPolicy.of(expiry.retention or expiry.keep_barriers)
    return ExpiredVersionError(
        f"{at} of table {expiry.table!r} has expired: snapshot expiry keeps {policy.describe()} of "
        f"each table (keep_barriers={expiry.keep_barriers}"
        + (f", retention {policy.to_dict()}" if policy.window_ms else "")
        + "), the versions live leases pin and those registered jobs have still to read, and "
        f"vacuum deletes the files of the rest; the oldest barrier still readable in "
        f"{expiry.table!r} is {oldest}. Read a newer barrier; to read old ones, raise "
        f"keep_barriers or take a lease (lease_seconds) while the {what} is still kept",
        table=expiry.table, version=version, barrier=barrier, keep_barriers=expiry.keep_barriers,
    )


def oldest_readable_barrier(s: Session, table_id: int, expiry: TableExpiry) -> int | None:
    """The oldest WRITTEN barrier whose version is not expired (one seek per kept range)."""
    candidates = []
    for lo, hi in [*expiry.kept, (expiry.horizon, None)]:
        query = select(func.min(TableBarrierRow.barrier_id)).where(
            TableBarrierRow.table_id == table_id, TableBarrierRow.state == BarrierState.WRITTEN,
            TableBarrierRow.version >= lo,
        )
        if hi is not None:
            query = query.where(TableBarrierRow.version <= hi)
        found = s.scalar(query)
        if found is not None:
            candidates.append(int(found))
    return min(candidates, default=None)


class ExpiryManager:
    """Expiry marks per table and the lock that ties them to lease creation (see module doc)."""

    def __init__(self, core: MetastoreCore) -> None:
        self._core = core

    # ------------------------------------------------------------------ reads
    def get(self, table: str) -> TableExpiry | None:
        """The expiry marks of ``table`` (``None``: never expired).

        Raises:
            UnknownTableError: the table is not registered.
        """
        with self._core.transaction() as s:
            table_id = table_id_of(s, table)
            return expiries(s, [table_id]).get(table_id)

    def expired_barriers(self, table: str) -> list[int]:
        """The WRITTEN barriers of ``table`` whose Delta version is expired, oldest first."""
        with self._core.transaction() as s:
            table_id = table_id_of(s, table)
            expiry = expiries(s, [table_id]).get(table_id)
            if expiry is None:
                return []
            rows = s.execute(
                select(TableBarrierRow.barrier_id, TableBarrierRow.version).where(
                    TableBarrierRow.table_id == table_id, TableBarrierRow.state == BarrierState.WRITTEN,
                    TableBarrierRow.version < expiry.horizon,
                ).order_by(TableBarrierRow.barrier_id)
            ).all()
            return [int(b) for b, v in rows if v is not None and expiry.is_expired(int(v))]

    # ------------------------------------------------------------------ marking
    def mark_expired(
        self, table: str, retention: RetentionPolicy | int, latest_version: int, *, consumers: bool = True,
        dry_run: bool = False,
    ) -> ExpiryPlan:
        """Mark the versions of ``table`` that an expiry at ``latest_version`` removes; the plan.

        In one transaction holding the table's lock (see module doc): kept are the versions
        of the WRITTEN barriers the retention policy keeps (the newest ``keep_last``, and the
        hourly and daily tiers by barrier timestamp), every range a live lease pins, and
        (``consumers``) every version from the oldest one a registered reader job of the table
        still has to read (the version at the barrier its sinks are at: apache/paimon#5819's
        consumer); everything below ``latest_version`` else is marked expired. Marks only grow:
        a version once expired stays expired.

        Args:
            table: table name.
            retention: a :class:`RetentionPolicy`, or the newest WRITTEN barriers kept (>= 1).
            latest_version: the Delta version vacuum will run at (loaded before this call).
            consumers: keep what registered reader jobs have still to read.
            dry_run: compute the plan without writing the marks.

        Raises:
            ValueError: ``keep_barriers`` < 1 or ``latest_version`` < 0.
            UnknownTableError: the table is not registered.
        """
        policy = RetentionPolicy.of(retention)
        keep_barriers = policy.keep_last
        if latest_version < 0:
            raise ValueError(f"latest_version must be >= 0, got {latest_version}")
        canonical = normalize_table_name(table)
        with self._core.transaction(write=not dry_run) as s:
            trow = _lock_table(s, canonical, dry_run)
            table_id = trow.id
            at = now_ms()
            leased = _leased_ranges(s, table_id, at)
            newest = self._retained(s, table_id, policy)
            floor = self._consumer_floor(s, table_id) if consumers else None
            prev_row = s.get(TableExpiryRow, table_id)
            prev = expiry_of(canonical, prev_row) if prev_row is not None else None
            horizon = latest_version if floor is None else min(latest_version, floor)
            if prev is not None:
                horizon = max(horizon, prev.horizon)
            wanted = [(int(v), int(v)) for _, v in newest] + self._newest_epochs(s, table_id, newest[:keep_barriers])
            wanted += list(leased)
            kept = intersect_ranges(wanted, [(0, horizon - 1)]) if horizon > 0 else []
            if prev is not None:
                kept = intersect_ranges(kept, [*prev.kept, (prev.horizon, max(prev.horizon, horizon))])
            newly = _count_newly_expired(prev, horizon, kept)
            expiry = TableExpiry(canonical, horizon, tuple(kept), keep_barriers, at, policy.to_dict())
            gone = self._newly_expired_barriers(s, table_id, prev, expiry)
            if not dry_run:
                _write_marks(s, table_id, prev_row, expiry)
            keep_versions = sorted(
                {v for a, b in kept for v in range(a, b + 1)} | set(range(horizon, latest_version + 1))
            )
            return ExpiryPlan(
                expiry=expiry, location=trow.location, latest_version=latest_version,
                keep_versions=tuple(keep_versions), newly_expired=newly, newly_expired_barriers=tuple(gone),
                kept_barriers=tuple(int(b) for b, _ in newest), leased=tuple(leased), consumer_floor=floor,
            )

    def _retained(self, s: Session, table_id: int, policy: RetentionPolicy) -> list[tuple[int, int]]:
        """``(barrier, version)`` of the WRITTEN barriers ``policy`` keeps, newest first."""
        written = (TableBarrierRow.table_id == table_id, TableBarrierRow.state == BarrierState.WRITTEN,
                   TableBarrierRow.version.is_not(None))
        pairs = select(TableBarrierRow.barrier_id, TableBarrierRow.version).where(*written)
        newest = s.execute(pairs.order_by(TableBarrierRow.barrier_id.desc()).limit(policy.keep_last)).all()
        if not policy.window_ms or not newest:
            return [(int(b), int(v)) for b, v in newest]
        topology = select(TableRow.topology).where(TableRow.id == table_id).scalar_subquery()
        timed = (
            select(TableBarrierRow.barrier_id, TableBarrierRow.version, BarrierRow.ts_ms)
            .join(BarrierRow, (BarrierRow.barrier_id == TableBarrierRow.barrier_id) & (BarrierRow.topology == topology))
            .where(*written)
        )
        newest_ts = s.scalar(select(func.max(timed.subquery().c.ts_ms)))
        rows = s.execute(timed.where(BarrierRow.ts_ms > (newest_ts or 0) - policy.window_ms - 1)).all()
        versions = {int(b): int(v) for b, v, _ in rows} | {int(b): int(v) for b, v in newest}
        keep = policy.kept((int(b), int(ts)) for b, _, ts in rows) | {int(b) for b, _ in newest}
        return sorted(((b, versions[b]) for b in keep), reverse=True)

    def _newest_epochs(self, s: Session, table_id: int, newest: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The versions of the epochs of the ``newest`` kept barriers (``(barrier, version)``,
        newest first), as one range: from the version after the barrier before them to the
        newest's. A rerun of a kept barrier reads its epoch's changes, and a root table's epoch
        can hold commits no barrier names whose files a later commit of the same epoch removed
        (an ingest's auto compaction, :func:`~airflow_provider_tsb.delta.roots.append_rows`):
        without the range, vacuum would delete them. A sink commits once per barrier, so for it
        the range adds no version."""
        if not newest:
            return []
        before = s.scalar(
            select(TableBarrierRow.version).where(
                TableBarrierRow.table_id == table_id, TableBarrierRow.state == BarrierState.WRITTEN,
                TableBarrierRow.version.is_not(None), TableBarrierRow.barrier_id < newest[-1][0],
            ).order_by(TableBarrierRow.barrier_id.desc()).limit(1)
        )
        return [(0 if before is None else int(before) + 1, int(newest[0][1]))]

    def _newly_expired_barriers(
        self, s: Session, table_id: int, prev: TableExpiry | None, now: TableExpiry
    ) -> list[int]:
        """WRITTEN barriers whose version ``now`` expires and ``prev`` did not."""
        low = 0 if prev is None else min([prev.horizon, *(a for a, _ in prev.kept)])
        rows = s.execute(
            select(TableBarrierRow.barrier_id, TableBarrierRow.version).where(
                TableBarrierRow.table_id == table_id, TableBarrierRow.state == BarrierState.WRITTEN,
                TableBarrierRow.version >= low, TableBarrierRow.version < now.horizon,
            ).order_by(TableBarrierRow.barrier_id)
        ).all()
        return [int(b) for b, v in rows
                if now.is_expired(int(v)) and (prev is None or not prev.is_expired(int(v)))]

    def _consumer_floor(self, s: Session, table_id: int) -> int | None:
        """The oldest version of the table a registered reader job has still to read, or ``None``.

        A reader job's next barrier reads its inputs' changes since the barrier its sinks are
        at (the minimum over its sinks): the table's version at that barrier is its floor. A
        reader whose sinks hold no barrier yet needs everything (floor 0).
        """
        readers = s.scalars(select(JobSourceRow.job_id).where(JobSourceRow.table_id == table_id)).all()
        floors: list[int] = []
        for job_id in sorted(set(readers)):
            sinks = s.scalars(select(JobSinkRow.table_id).where(JobSinkRow.job_id == job_id)).all()
            bases = [
                s.scalar(
                    select(func.max(TableBarrierRow.barrier_id)).where(
                        TableBarrierRow.table_id == sink, TableBarrierRow.state == BarrierState.WRITTEN
                    )
                )
                for sink in sinks
            ]
            if not bases:
                continue  # a job without sinks consumes nothing durable
            if any(b is None for b in bases):
                floors.append(0)
                continue
            base = min(int(b) for b in bases if b is not None)
            version = s.scalar(
                select(TableBarrierRow.version)
                .where(TableBarrierRow.table_id == table_id, TableBarrierRow.state == BarrierState.WRITTEN,
                       TableBarrierRow.barrier_id <= base, TableBarrierRow.version.is_not(None))
                .order_by(TableBarrierRow.barrier_id.desc()).limit(1)
            )
            floors.append(int(version) if version is not None else 0)
        return min(floors) if floors else None


def _count_newly_expired(prev: TableExpiry | None, horizon: int, kept: Sequence[VersionRange]) -> int:
    """Versions expired now that were not before."""
    total_now = horizon - sum(b - a + 1 for a, b in kept)
    if prev is None:
        return total_now
    total_before = prev.horizon - sum(b - a + 1 for a, b in prev.kept)
    return total_now - total_before


# ---------------------------------------------------------------- the steps of mark_expired
def _lock_table(s: Session, canonical: str, dry_run: bool) -> Row[tuple[int, str]]:
    """``(id, location)`` of table ``canonical``, its row locked unless ``dry_run``;
    UnknownTableError if it is not registered."""
    query = select(TableRow.id, TableRow.location).where(TableRow.name == canonical)
    trow = s.execute(query if dry_run else query.with_for_update(key_share=True)).first()  # module doc
    if trow is None:
        raise UnknownTableError(
            f"table {canonical!r} is not registered in the tsb metastore; check the name"
        )
    return trow


def _leased_ranges(s: Session, table_id: int, at: int) -> list[VersionRange]:
    """The version ranges of the table that the leases live at ``at`` (epoch ms) pin, merged."""
    return merge_ranges(
        (v if f is None else f, v)
        for f, v in s.execute(
            select(LeaseVersionRow.from_version, LeaseVersionRow.version)
            .join(LeaseRow, LeaseRow.id == LeaseVersionRow.lease_id)
            .where(LeaseVersionRow.table_id == table_id, LeaseRow.expires_at_ms > at)
        ).all()
    )


def _write_marks(s: Session, table_id: int, prev_row: TableExpiryRow | None, expiry: TableExpiry) -> None:
    """Record ``expiry`` (horizon, kept ranges, policy) as the table's expiry marks."""
    kept = [list(r) for r in expiry.kept]
    retention = None if expiry.retention is None else dict(expiry.retention)
    if prev_row is None:
        s.add(TableExpiryRow(table_id=table_id, horizon=expiry.horizon, kept=kept,
                             keep_barriers=expiry.keep_barriers, expired_at_ms=expiry.expired_at_ms,
                             retention=retention))
    else:
        prev_row.horizon = expiry.horizon
        prev_row.kept = kept
        prev_row.keep_barriers = expiry.keep_barriers
        prev_row.expired_at_ms = expiry.expired_at_ms
        prev_row.retention = retention
