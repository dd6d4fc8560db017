"""Job heartbeats, per-barrier run timings (the delay view's raw material) and fencing tokens.

Fencing (docs/design.md "Fencing zombies"): every run of a job takes a fencing token when it
starts (:meth:`JobRunManager.begin_attempt`, a per-job counter bumped in one write
transaction). PROCESSED and WRITTEN reports carry it and are refused under the same lock when
a newer attempt has started since (:func:`check_fencing_token`): an Airflow zombie and its
retry can never both report, whichever of them reaches the metastore first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import case, or_, select, update
from sqlalchemy.orm import Session

from airflow_provider_tsb.exceptions import (
    FencedError,
    UnknownJobError,
)
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.models import (
    JobBarrierRow,
    JobRow,
)
from airflow_provider_tsb.metastore.records import (
    JobBarrierTiming,
    JobStatus,
    now_ms,
)


class AttemptStart(NamedTuple):
    """A started attempt: its fencing ``token`` and the Spark Connect session id of the attempt
    before it (``previous_spark_session``; ``None`` when it ran on spark-submit or none ran)."""

    token: int
    previous_spark_session: str | None


def record_heartbeat(
    s: Session, job_id: str, *, status: str | None = None, barrier: int | None = None, message: str | None = None,
    forward_only: bool = False,
) -> None:
    """Record that ``job_id`` is alive, in the caller's write transaction ``s`` (and optionally
    its status and current barrier).

    ``forward_only``: ``barrier`` becomes the current barrier only if the job has none or a
    lower one (the end of barrier ``n`` recorded after the start of ``n + 1``).

    ``message``: why the job failed (shown with the job). A ``succeeded`` status without a
    message clears the message of a previous failure.

    Raises:
        UnknownJobError: the job is not registered.
    """
    values: dict[str, Any] = {"last_heartbeat_ms": now_ms()}
    if status is not None:
        values["status"] = status
    if barrier is not None:
        values["current_barrier"] = barrier if not forward_only else case(
            (or_(JobRow.current_barrier.is_(None), JobRow.current_barrier < barrier), barrier),
            else_=JobRow.current_barrier)
    if message is not None:
        values["message"] = message
    elif status == JobStatus.SUCCEEDED:
        values["message"] = None
    result = s.execute(update(JobRow).where(JobRow.id == job_id).values(**values))
    if not result.rowcount:
        raise UnknownJobError(f"job {job_id!r} is not registered; cannot record its heartbeat")


def record_job_timing(
    s: Session, job_id: str, barrier: int, *, status: str,
    started_at_ms: int | None = None, finished_at_ms: int | None = None,
) -> None:
    """Record the timing of ``job_id`` for ``barrier`` (``running`` / ``succeeded`` /
    ``failed``, epoch ms) in the caller's write transaction ``s``; a new ``running`` after
    another status counts one more attempt.

    Raises:
        UnknownJobError: the job is not registered.
    """
    row = s.get(JobBarrierRow, (job_id, barrier))
    if row is None:
        if s.get(JobRow, job_id) is None:
            raise UnknownJobError(f"job {job_id!r} is not registered; cannot record its timing at barrier {barrier}")
        s.add(
            JobBarrierRow(
                job_id=job_id, barrier_id=barrier, status=status,
                started_at_ms=started_at_ms, finished_at_ms=finished_at_ms, attempts=1,
            )
        )
        return
    if status == JobStatus.RUNNING and row.status != JobStatus.RUNNING:
        row.attempts += 1
    row.status = status
    if started_at_ms is not None:
        row.started_at_ms = started_at_ms
    if finished_at_ms is not None:
        row.finished_at_ms = finished_at_ms


def check_fencing_token(s: Session, job_id: str, token: int, barrier: int | None, action: str) -> None:
    """Refuse ``action`` by the attempt holding ``token`` if a newer attempt of ``job_id`` started.

    Runs inside the caller's write transaction and locks the job's row (``SELECT ... FOR
    UPDATE`` on PostgreSQL; SQLite's write transaction holds the database lock), so a
    concurrent :meth:`JobRunManager.begin_attempt` is ordered before or after it.

    Raises:
        FencedError: names the job, the barrier, this attempt's token and the newest one.
        UnknownJobError: the job is not registered.
    """
    newest = s.scalar(select(JobRow.fencing_token).where(JobRow.id == job_id).with_for_update())
    if newest is None:
        raise UnknownJobError(f"job {job_id!r} is not registered; cannot {action}")
    if int(newest) != int(token):
        at = f"barrier {barrier}" if barrier is not None else "its barriers"
        raise FencedError(
            f"job {job_id!r}, {at}: this attempt (fencing token {token}) was fenced and may not "
            f"{action}: attempt {newest} of the job started after it and owns the job's barriers now "
            "(an Airflow zombie and its retry). Nothing was lost: the newest attempt commits the "
            "barrier once; this attempt's staged files are never served and are deleted.",
            job_id=job_id, barrier=barrier, token=int(token), winner=int(newest),
        )


class JobRunManager:
    """Liveness of registered jobs, the timing of each job's run of each barrier, fencing tokens."""

    def __init__(self, core: MetastoreCore) -> None:
        self._core = core

    def begin_attempt(self, job_id: str) -> int:
        """Start a new attempt of ``job_id``: bump and return its fencing token (1, 2, ...).

        Every earlier attempt still running (a zombie) is fenced from then on: its PROCESSED
        and WRITTEN reports and its Delta commit are refused (:class:`FencedError`).

        Raises:
            UnknownJobError: the job is not registered.
        """
        return self.start_attempt(job_id).token

    def start_attempt(self, job_id: str, spark_session: str | None = None) -> AttemptStart:
        """:meth:`begin_attempt` that also records the attempt's Spark Connect session id and
        returns the previous attempt's (in one write transaction).

        Raises:
            UnknownJobError: the job is not registered.
        """
        with self._core.transaction(write=True) as s:
            previous = s.execute(
                select(JobRow.fencing_token, JobRow.spark_session).where(JobRow.id == job_id).with_for_update()
            ).first()
            if previous is None:
                raise UnknownJobError(f"job {job_id!r} is not registered; cannot start an attempt of it")
            token = int(previous.fencing_token or 0) + 1
            s.execute(update(JobRow).where(JobRow.id == job_id).values(fencing_token=token,
                                                                        spark_session=spark_session))
            return AttemptStart(token, previous.spark_session)

    def fencing_token(self, job_id: str) -> int:
        """The fencing token of the newest attempt of ``job_id`` (0 if none started).

        Raises:
            UnknownJobError: the job is not registered.
        """
        with self._core.transaction() as s:
            token = s.scalar(select(JobRow.fencing_token).where(JobRow.id == job_id))
            if token is None:
                raise UnknownJobError(f"job {job_id!r} is not registered")
            return int(token)

    def check_fencing_token(self, job_id: str, token: int, barrier: int | None = None) -> None:
        """Raise :class:`FencedError` if an attempt newer than ``token`` of ``job_id`` started.

        The Delta commit path calls it right before committing (the Delta txn is the last
        guard against a double commit; this one keeps a zombie from committing at all).
        """
        with self._core.transaction(write=True) as s:
            check_fencing_token(s, job_id, token, barrier, "commit")

    def heartbeat(
        self, job_id: str, *, status: str | None = None, barrier: int | None = None,
        message: str | None = None,
    ) -> None:
        """Record that ``job_id`` is alive (and optionally its status and current barrier).

        One write transaction of :func:`record_heartbeat`.

        Raises:
            UnknownJobError: the job is not registered.
        """
        with self._core.transaction(write=True) as s:
            record_heartbeat(s, job_id, status=status, barrier=barrier, message=message)

    def record_job_barrier(
        self, job_id: str, barrier: int, *, status: str,
        started_at_ms: int | None = None, finished_at_ms: int | None = None,
    ) -> None:
        """Record the timing of ``job_id`` for ``barrier`` (running/succeeded/failed), in one
        write transaction of :func:`record_job_timing`.

        Raises:
            UnknownJobError: the job is not registered.
        """
        with self._core.transaction(write=True) as s:
            record_job_timing(s, job_id, barrier, status=status, started_at_ms=started_at_ms,
                              finished_at_ms=finished_at_ms)

    def job_barriers(self, job_ids: Sequence[str], barriers: Sequence[int]) -> list[JobBarrierTiming]:
        """Recorded timings of ``job_ids`` at ``barriers`` (one query), ordered by job and barrier."""
        if not job_ids or not barriers:
            return []
        with self._core.transaction() as s:
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
