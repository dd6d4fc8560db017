"""The end of a barrier's bookkeeping, run behind the job's next barrier: :class:`ReportQueue`.

Once a barrier's Delta commits are made, what is left of it is bookkeeping: WRITTEN per sink
(with the metastore's check of the version against the Delta log), the deletion of withdrawn
staging directories that are due, and the job's ``succeeded`` record with the end of its input
lease. In a batch run (a catch-up of many barriers) these run on one background thread, in the
order they were queued, while the main thread works on the next barrier, and with them that
barrier's start record (:mod:`airflow_provider_tsb.spark.input_leases`: the run holds one
input lease). They are held back while the driver does Python work of its own (the log reads,
the alignment check, ``process()``): the queue releases them when the Spark write starts
(:meth:`ReportQueue.release`), so they run while the driver waits on Spark and take no
interpreter time from it (CPython runs one thread's Python at a time): the bookkeeping costs
no wall time (``benchmarks/full_year.py``).

The ordering rules that keep the commit protocol (docs/design.md) intact:

* a barrier's reports run in the order the synchronous path made them (one thread, FIFO);
* the next barrier waits for them (:meth:`ReportQueue.wait`) before its PROCESSED report, so
  the metastore still sees WRITTEN ``n`` before PROCESSED ``n + 1`` for every table, and the
  Delta commit of ``n + 1`` comes after WRITTEN ``n``: a crash leaves at most the newest
  barrier unreported, which the next run repairs from the Delta log
  (:func:`~airflow_provider_tsb.spark.runner.report_written_heads`);
* after a failed report nothing more of the queue runs, and the failure is raised in the main
  thread at its next :meth:`~ReportQueue.wait` (a ``FencedError`` stays one), with a note
  naming the report and its barrier;
* a barrier's input lease ends with the next barrier's start record (one transaction,
  :meth:`~ReportQueue.end_lease_with_next_start`), so the next barrier's reads already run
  without it, as they did when it ended with the ``succeeded`` record; the last one ends when
  the queue closes. A lease never ended (a crash) lapses by itself.

The reports released together (what one barrier left behind for the next: its WRITTEN per
sink, its ``succeeded`` record, the narrowing of the run's lease, the next barrier's start
record) run in one metastore transaction when the catalog offers one (``transaction``): one
``BEGIN``/``COMMIT`` instead of four or five, all kept or none (the whole batch is retried
through an outage; a failed batch leaves its barrier unreported, as a crash does, repaired the
same way). A micro-batch's barrier whose outputs were staged with the group's first waits on no
Spark write, so its reports are not released early: its PROCESSED joins them
(:meth:`ReportQueue.report_in_order`), one transaction per barrier.

Streaming mode reports synchronously when its micro-batch holds one barrier: its next barrier
is seldom waiting, and the barrier's end-to-end delay is measured to its WRITTEN report. A
micro-batch of several ready barriers (:mod:`~airflow_provider_tsb.spark.barrier_group`) queues
them as a batch run does; the queue is closed, so every report made, when the micro-batch ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType

log = logging.getLogger("airflow_provider_tsb.spark")

__all__ = ["ReportQueue", "Transaction"]

#: runs ``(what, reports)`` in one metastore transaction, retried as a whole
#: (:meth:`~airflow_provider_tsb.spark.metastore_catalog.MetastoreCatalog.in_one_transaction`)
Transaction = Callable[[str, Callable[[], None]], None]


@dataclass(frozen=True)
class _Report:
    barrier: int
    what: str
    report: Callable[[], object]


class ReportQueue:
    """One job's queued end-of-barrier reports (module doc); a context manager that waits for
    them on exit.

    Args:
        job_id: the job, for thread names and messages.
        release_lease: ends an input lease by id (the catalog's ``release_lease``; ``None``: the
            catalog holds no leases).
        transaction: runs the reports released together in one metastore transaction (the
            catalog's ``in_one_transaction``; ``None``: each report is its own).

    Example::

        with ReportQueue("enrich_flights") as queue:
            for plan in pending:
                run_barrier(run, plan, queue=queue)
    """

    def __init__(self, job_id: str, release_lease: Callable[[str], object] | None = None,
                 transaction: Transaction | None = None) -> None:
        self.job_id = job_id
        self._release_lease = release_lease
        self._transaction = transaction
        self._lease_to_end: str | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"tsb-reports-{job_id}")
        self._pending: list[Future[None]] = []
        self._held: list[_Report] = []
        self._failed = threading.Event()

    def submit(self, barrier: int, what: str, report: Callable[[], object]) -> None:
        """Queue ``report`` (``what`` of ``barrier``, e.g. ``"WRITTEN of flights.enriched"``)
        behind everything queued before it, held until :meth:`release` (or :meth:`wait`); it
        does not run if an earlier report failed.

        Raises:
            RuntimeError: the queue was closed (at the release).
        """
        self._held.append(_Report(barrier, what, report))

    def release(self) -> None:
        """Let the held reports run, in order (call it when the driver starts waiting on Spark);
        with a ``transaction``, in one metastore transaction.

        Raises:
            RuntimeError: the queue was closed.
        """
        held, self._held = self._held, []
        if held:
            self._pending.append(self._executor.submit(self._run, held))

    def _run(self, reports: list[_Report]) -> None:
        if self._failed.is_set():
            return
        current = reports[0]

        def run_all() -> None:
            nonlocal current
            for report in reports:
                current = report
                report.report()
        try:
            if self._transaction is None or len(reports) == 1:
                run_all()
            else:
                self._transaction(f"job {self.job_id}: report {len(reports)} steps of barriers "
                                  f"{reports[0].barrier}..{reports[-1].barrier}", run_all)
        except BaseException as exc:
            self._failed.set()
            exc.add_note(f"job {self.job_id}: while reporting {current.what} of barrier {current.barrier} (in the "
                         "background, behind the job's next barrier)")
            raise

    def report_in_order(self, barrier: int, what: str, report: Callable[[], object]) -> None:
        """Make ``report`` now, after everything queued before it: in the same transaction as
        the reports still held (a pre-staged barrier's PROCESSED with the previous barrier's
        WRITTEN), or alone when they were released already.

        Raises:
            Exception: the first failed report's exception (with a note naming the report).
        """
        if not self._held:
            self.wait()
            report()
            return
        self.submit(barrier, what, report)
        self.wait()

    def end_lease_with_next_start(self, lease_id: str | None) -> None:
        """End input lease ``lease_id`` (a finished barrier's) with the next barrier's start
        record (:meth:`lease_to_end`), or when the queue closes."""
        if self._lease_to_end is not None and lease_id is not None:
            self._end_lease(self._lease_to_end)
        self._lease_to_end = lease_id if lease_id is not None else self._lease_to_end

    def lease_to_end(self) -> str | None:
        """The lease the next start record ends (it is then that record's to end), or ``None``."""
        lease_id, self._lease_to_end = self._lease_to_end, None
        return lease_id

    def _end_lease(self, lease_id: str) -> None:
        if self._release_lease is None:
            return
        try:
            self._release_lease(lease_id)
        except Exception as exc:  # the lease lapses by itself
            log.warning("job %s: could not end input lease %s: %s", self.job_id, lease_id, exc)

    def wait(self) -> None:
        """Release the held reports and block until every queued report ran.

        Raises:
            Exception: the first failed report's exception (with a note naming the report).
        """
        self.release()
        pending, self._pending = self._pending, []
        first: BaseException | None = None
        for future in pending:
            exc = future.exception()
            if exc is not None and first is None:
                first = exc
        if first is not None:
            raise first

    def close(self) -> None:
        """:meth:`wait`, then stop the thread (the queue takes no more reports).

        Raises:
            Exception: as :meth:`wait`.
        """
        try:
            self.wait()
        finally:
            self._executor.shutdown(wait=True)
            lease_id = self.lease_to_end()
            if lease_id is not None:
                self._end_lease(lease_id)

    def __enter__(self) -> ReportQueue:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.close()
            return
        try:  # already failing: the reports still land (WRITTEN of committed barriers), the first error wins
            self.close()
        except Exception as late:
            log.warning("job %s: a background report failed as well: %s", self.job_id, late)
