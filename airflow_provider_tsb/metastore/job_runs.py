"""Job heartbeats and per-barrier run timings (the delay view's raw material)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update

from airflow_provider_tsb.exceptions import (
    UnknownJobError,
)
from airflow_provider_tsb.metastore.base import StoreBase
from airflow_provider_tsb.metastore.models import (
    JobBarrierRow,
    JobRow,
)
from airflow_provider_tsb.metastore.records import (
    JobBarrierTiming,
    JobStatus,
    now_ms,
)


class JobRunManager(StoreBase):
    """Liveness of registered jobs and the timing of each job's run of each barrier."""

    def heartbeat(
        self, job_id: str, *, status: str | None = None, barrier: int | None = None,
        message: str | None = None,
    ) -> None:
        """Record that ``job_id`` is alive (and optionally its status and current barrier).

        ``message``: why the job failed (shown with the job). A ``succeeded`` status without a
        message clears the message of a previous failure.

        Raises:
            UnknownJobError: the job is not registered.
        """
        with self._tx(write=True) as s:
            values: dict[str, Any] = {"last_heartbeat_ms": now_ms()}
            if status is not None:
                values["status"] = status
            if barrier is not None:
                values["current_barrier"] = barrier
            if message is not None:
                values["message"] = message
            elif status == JobStatus.SUCCEEDED:
                values["message"] = None
            result = s.execute(update(JobRow).where(JobRow.id == job_id).values(**values))
            if not result.rowcount:
                raise UnknownJobError(f"job {job_id!r} is not registered; cannot record its heartbeat")

    def record_job_barrier(
        self, job_id: str, barrier: int, *, status: str,
        started_at_ms: int | None = None, finished_at_ms: int | None = None,
    ) -> None:
        """Record the timing of ``job_id`` for ``barrier`` (running/succeeded/failed)."""
        with self._tx(write=True) as s:
            row = s.get(JobBarrierRow, (job_id, barrier))
            if row is None:
                s.add(
                    JobBarrierRow(
                        job_id=job_id, barrier_id=barrier, status=status,
                        started_at_ms=started_at_ms, finished_at_ms=finished_at_ms, attempts=1,
                    )
                )
            else:
                if status == JobStatus.RUNNING and row.status != JobStatus.RUNNING:
                    row.attempts += 1
                row.status = status
                if started_at_ms is not None:
                    row.started_at_ms = started_at_ms
                if finished_at_ms is not None:
                    row.finished_at_ms = finished_at_ms

    def job_barriers(self, job_ids: Sequence[str], barriers: Sequence[int]) -> list[JobBarrierTiming]:
        """Recorded timings of ``job_ids`` at ``barriers`` (one query), ordered by job and barrier."""
        if not job_ids or not barriers:
            return []
        with self._tx() as s:
            rows = s.scalars(
                select(JobBarrierRow)
                .where(JobBarrierRow.job_id.in_(list(job_ids)), JobBarrierRow.barrier_id.in_(list(barriers)))
                .order_by(JobBarrierRow.job_id, JobBarrierRow.barrier_id)
            ).all()
            return [
                JobBarrierTiming(r.job_id, int(r.barrier_id), r.status, r.started_at_ms, r.finished_at_ms, r.attempts)
                for r in rows
            ]

    def job_barrier_statuses(self, job_id: str, barriers: Sequence[int]) -> dict[int, str]:
        """{barrier id: status} of the timings recorded for ``job_id`` at ``barriers``."""
        return {t.barrier: t.status for t in self.job_barriers([job_id], barriers)}
