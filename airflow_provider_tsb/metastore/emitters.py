"""One barrier emitter per topology: a lease in the metastore (FLIP-276 "Timestamp Barrier":
one generator of a topology's barriers).

An emitter acquires its topology's lease before generating, renews it every interval and
releases it when it stops. A second emitter on the same topology (another DAG run, a DAG file
copied) finds the lease held and waits as a standby, naming the running one; it takes over once
the lease lapses (the first one died) or is released. Without it, two emitters interleaved: one
read the root versions, the other generated a barrier at newer ones, and the first failed
with "a root table must not be restored under a running topology".
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError

from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.models import EmitterRow
from airflow_provider_tsb.metastore.records import now_ms


@dataclass(frozen=True)
class EmitterHolder:
    """The emitter holding a topology's lease.

    Attributes:
        owner: who (its DAG run's run-key prefix and process).
        heartbeat_ms: its last renewal, epoch ms.
        lease_until_ms: when its lease lapses, epoch ms.
    """

    owner: str
    heartbeat_ms: int
    lease_until_ms: int

    def describe(self, now: int | None = None) -> str:
        """``emitter <owner> (heartbeat 3 s ago, lease for 27 s more)``."""
        now = now_ms() if now is None else now
        return (f"emitter {self.owner} (heartbeat {(now - self.heartbeat_ms) / 1000:.0f} s ago, lease for "
                f"{max(0, self.lease_until_ms - now) / 1000:.0f} s more)")


class EmitterManager:
    """The emitter leases (see the module doc), on ``core``."""

    def __init__(self, core: MetastoreCore) -> None:
        self._core = core

    def acquire(self, topology: str, owner: str, lease_s: float) -> EmitterHolder | None:
        """Take or renew ``topology``'s lease for ``owner`` for ``lease_s`` seconds; ``None`` when
        ``owner`` holds it now, else the other emitter that does (the caller waits)."""
        try:
            return self._acquire(topology, owner, lease_s)
        except IntegrityError:  # another emitter inserted the row first (PostgreSQL): it holds the lease
            return self._acquire(topology, owner, lease_s)

    def _acquire(self, topology: str, owner: str, lease_s: float) -> EmitterHolder | None:
        now = now_ms()
        until = now + round(lease_s * 1000)
        with self._core.transaction(write=True) as s:
            row = s.get(EmitterRow, topology, with_for_update=True)
            if row is None:
                s.add(EmitterRow(topology=topology, owner=owner, started_at_ms=now, heartbeat_ms=now,
                                 lease_until_ms=until))
                return None
            if row.owner != owner and row.lease_until_ms >= now:
                return EmitterHolder(row.owner, row.heartbeat_ms, row.lease_until_ms)
            if row.owner != owner:
                row.owner, row.started_at_ms = owner, now
            row.heartbeat_ms, row.lease_until_ms = now, until
            return None

    def release(self, topology: str, owner: str) -> None:
        """End ``owner``'s lease of ``topology`` (no-op when another emitter holds it)."""
        with self._core.transaction(write=True) as s:
            row = s.get(EmitterRow, topology, with_for_update=True)
            if row is not None and row.owner == owner:
                s.delete(row)

    def holder(self, topology: str) -> EmitterHolder | None:
        """The emitter whose lease of ``topology`` has not lapsed, or ``None``."""
        with self._core.transaction() as s:
            row = s.get(EmitterRow, topology)
            if row is None or row.lease_until_ms < now_ms():
                return None
            return EmitterHolder(row.owner, row.heartbeat_ms, row.lease_until_ms)
