"""Leases: Delta versions pinned for a reader so snapshot expiry keeps them.

See docs/design.md "Reading consistently".
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from sqlalchemy import and_, delete, select
from sqlalchemy.orm import Session

from airflow_provider_tsb.metastore.base import StoreBase
from airflow_provider_tsb.metastore.models import (
    LeaseRow,
    LeaseVersionRow,
)
from airflow_provider_tsb.metastore.records import (
    now_ms,
)


class LeaseManager(StoreBase):
    """Create, release, expire and list leases."""

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
