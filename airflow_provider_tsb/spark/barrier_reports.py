"""What the commit protocol tells the barrier catalog, and asks it: the protocol's port to the
control plane (:class:`Reports`).

:mod:`~airflow_provider_tsb.spark.barrier_commit` runs a barrier's write and commit; at three
fixed points it talks to the catalog through a :class:`Reports` (FLIP-276 "Timestamp Barrier":
the table reports PROCESSED, then WRITTEN): PROCESSED with the staged-file manifest in the
transaction that checks the fencing token, right before the Delta commit (step e, the commit's
``before_commit``); WRITTEN with the new version after it (step g, behind the job's next barrier
in a batch run, :mod:`~airflow_provider_tsb.spark.report_queue`); and the questions the staging
cleanup asks (is this attempt fenced, which attempt directories may a reader hold).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from airflow_provider_tsb.delta.commit import RemovedFile, StagedFile
from airflow_provider_tsb.exceptions import FencedError
from airflow_provider_tsb.spark.killpoints import crash_point
from airflow_provider_tsb.spark.outputs_staging import StagingCatalog, collect_withdrawn, staging_grace_s
from airflow_provider_tsb.spark.report_queue import ReportQueue
from airflow_provider_tsb.spark.timing import phase
from airflow_provider_tsb.spark.write_options import WriteTarget

if TYPE_CHECKING:
    from airflow_provider_tsb.spark.catalog import BarrierCatalog

__all__ = ["Reports"]


class Reports:
    """What the commit protocol tells the barrier catalog, and asks it (fencing, held staging).

    Args:
        catalog: the job's catalog (``None``: nothing is reported, nothing fenced).
        target: the write.
        queue: the job's queue of reports still running behind it (the previous barrier's): every
            report here waits for it first, and :meth:`finish` joins it (``None``: all synchronous).

    Attributes:
        grace_s: the staging grace period, seconds
            (:func:`~airflow_provider_tsb.spark.outputs_staging.staging_grace_s`).

    Raises:
        ValueError: ``$TSB_STAGING_GRACE_SECONDS`` is not a number of seconds >= 0.
    """

    def __init__(self, catalog: BarrierCatalog | None, target: WriteTarget, queue: ReportQueue | None = None) -> None:
        self.catalog = catalog
        self.staging = catalog if isinstance(catalog, StagingCatalog) else None
        self.target = target
        self.grace_s = staging_grace_s()
        self.queue = queue

    def _in_order(self) -> None:
        """Wait for the reports queued before this write (the previous barrier's WRITTEN)."""
        if self.queue is not None:
            self.queue.wait()

    def fence(self) -> None:
        """Raise :class:`FencedError` when a newer attempt of the job started."""
        if self.staging is not None:
            self.staging.check_fencing_token(self.target.job_id, self.target.barrier)

    def fenced_now(self) -> FencedError | None:
        """The :class:`FencedError` of a failure caused by a newer attempt (e.g. it deleted our
        in-progress files), or ``None`` when this attempt is still the newest."""
        try:
            self.fence()
        except FencedError as exc:
            return exc
        except Exception:  # the metastore is down: the original error is the one to show
            return None
        return None

    def held(self) -> set[str]:
        """Attempt directories of the barrier a READ_COMMITTED reader may hold."""
        if self.staging is None:
            return set()
        return self.staging.held_staging(self.target.table, self.target.barrier, self.grace_s)

    def before_commit(self, mode: str, files: Sequence[StagedFile], removes: Sequence[RemovedFile]
                      ) -> Callable[[], None]:
        """Steps e and f's check, as the commit's ``before_commit``: the first call reports
        PROCESSED (:meth:`processed`), whose metastore transaction checks the fencing token (a
        :class:`StagingCatalog` does), later calls (a schema change commits before the barrier's
        commit) check the fencing token only.

        Raises (when called):
            FencedError: a newer attempt of the job started.
        """
        reported = False

        def before() -> None:
            nonlocal reported
            if reported:
                self.fence()
                return
            self.processed(mode, files, removes)
            reported = True
            crash_point("after_files", self.target.job_id, self.target.barrier)
        return before

    def processed(self, mode: str, files: Sequence[StagedFile], removes: Sequence[RemovedFile]) -> None:
        """PROCESSED with the manifest of the commit's ``mode`` (:attr:`WriteOptions.commit_mode`):
        ``append`` (staged files added to the previous version, minus ``removes``) or
        ``overwrite`` (staged files replace it)."""
        if self.catalog is None:
            return
        catalog, t = self.catalog, self.target
        entries = [{**f.to_json(), "sink_mode": mode} for f in files]
        if removes and self.staging is not None:
            for entry in entries:
                entry.pop("sink_mode")
            manifest = {"mode": mode, "files": entries, "removes": [r.path for r in removes]}

            def report() -> None:
                catalog.record_processed(t.table, t.barrier, t.job_id, manifest)  # type: ignore[arg-type]
        else:
            def report() -> None:
                catalog.record_processed(t.table, t.barrier, t.job_id, entries)
        if self.queue is None:
            report()
        else:  # after the previous barrier's WRITTEN; in its transaction when it is still held
            self.queue.report_in_order(t.barrier, f"PROCESSED of {t.table}", report)

    def written(self, version: int, attempt: str | None) -> None:
        """WRITTEN at Delta ``version``, naming the committed attempt."""
        self._in_order()
        self._written(version, attempt)

    def finish(self, version: int, attempt: str | None, location: str) -> int:
        """Step g: WRITTEN at ``version``, then the deletion of the withdrawn attempt directories
        that are due; queued behind the job's next barrier when there is a queue. Returns how many
        directories were deleted (0 when queued: the deletion has not run yet)."""
        if self.queue is None:
            self._written(version, attempt)
            return self.collect(location)
        self.queue.submit(self.target.barrier, f"WRITTEN of {self.target.table} at version {version}",
                          lambda: (self._written(version, attempt), self.collect(location)))
        return 0

    def _written(self, version: int, attempt: str | None) -> None:
        t = self.target
        if self.staging is not None:
            self.staging.record_written(t.table, t.barrier, version, t.job_id, attempt=attempt)
        elif self.catalog is not None:
            self.catalog.record_written(t.table, t.barrier, version, t.job_id)

    def collect(self, location: str) -> int:
        """Delete the withdrawn attempt directories that are due; how many."""
        if self.staging is None:
            return 0
        with phase("delta_log"):
            return collect_withdrawn(location, self.target.table, self.staging, self.grace_s)
