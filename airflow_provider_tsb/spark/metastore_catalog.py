"""The production :class:`~airflow_provider_tsb.spark.catalog.BarrierCatalog`: the tsb metastore.

A Spark app started by :class:`~airflow_provider_tsb.operators.spark_job.TsbSparkJobOperator`
gets ``--metastore-url env:TSB_METASTORE_URL`` and reads the URL from its environment (so a
password never shows on a command line). Barriers and the input version vector of each
barrier come from the metastore: a root table's version is the one recorded when the barrier
was generated, an intermediate table's is the version its writer reported WRITTEN. States go
straight back: PROCESSED (with the staged-file manifest) before the Delta commit, WRITTEN after.
Streaming mode re-reads the metastore on every poll, so new barriers are picked up while the
query runs (FLIP-276 "Timestamp Barrier": alignment across inputs).

Every call rides out a metastore outage (a database restart, a failover): transient connection
failures are retried with backoff for ``$TSB_METASTORE_RETRY_SECONDS``
(:mod:`airflow_provider_tsb.metastore.retry`), then fail with
:class:`~airflow_provider_tsb.metastore.retry.MetastoreUnavailableError` naming the call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.exceptions import MetastoreError
from airflow_provider_tsb.metastore.base import table_id_of
from airflow_provider_tsb.metastore.job_runs import record_heartbeat, record_job_timing
from airflow_provider_tsb.metastore.leases import end_lease, lease_versions
from airflow_provider_tsb.metastore.records import JobStatus, TsKind
from airflow_provider_tsb.metastore.retry import call_with_retry
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.names import normalize_table_name
from airflow_provider_tsb.spark.catalog import register_catalog_kind
from airflow_provider_tsb.spark.input_leases import LeaseRequest
from airflow_provider_tsb.spark.plans import BarrierPlan, GeneratedBarrier, plan_pending_barriers
from airflow_provider_tsb.spark.timing import phase

T = TypeVar("T")

_STORES: dict[str, MetaStore] = CACHES.add("spark.metastores", {})
#: at most this many barriers are planned per call (a batch run loops until none is left)
PLAN_PAGE = 500


def resolve_url(url: str) -> str:
    """``env:NAME`` -> the value of environment variable NAME; anything else as is.

    Raises:
        MetastoreError: the named variable is not set.
    """
    if url.startswith("env:"):
        name = url[4:]
        value = os.environ.get(name)
        if not value:
            raise MetastoreError(
                f"the metastore URL is to be read from environment variable {name}, which is not set "
                "in the Spark driver's environment"
            )
        return value
    return url


class MetastoreCatalog:
    """:class:`BarrierCatalog` on the tsb metastore (see module docstring).

    Args:
        url: SQLAlchemy URL, or ``env:NAME``.
    """

    def __init__(self, url: str) -> None:
        self._url_spec = url
        real = resolve_url(url)
        store = _STORES.get(real)
        if store is None:
            store = _STORES[real] = MetaStore(real, retry_s=0)  # :meth:`_retry` retries whole calls
        self.store = store
        self._topologies: dict[str, str] = {}
        #: fencing token of this process's attempt, per job (taken by :meth:`begin_attempt`)
        self._tokens: dict[str, int] = {}
        self._previous_sessions: dict[str, str | None] = {}
        self._ahead: set[str] = set()
        #: table -> whether withdrawn attempt directories waited at its last WRITTEN report
        self._withdrawn_waiting: dict[str, bool] = {}

    def _retry(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` against the metastore, riding out an outage (module doc); inside
        :meth:`in_one_transaction` once, by the enclosing call."""
        if self.store.core.in_one_transaction:
            return fn()
        with phase("metastore"):
            return call_with_retry(fn, what, self.store.core.shown_url())

    def in_one_transaction(self, what: str, reports: Callable[[], None]) -> None:
        """Run ``reports`` (several of this catalog's calls) in one metastore write transaction,
        retried as a whole through an outage: they commit together or not at all (one round of
        ``BEGIN``/``COMMIT`` for a barrier's WRITTEN, its ``succeeded`` record and the next
        barrier's start, :mod:`~airflow_provider_tsb.spark.report_queue`).

        Raises:
            MetastoreUnavailableError: still unreachable after the retry budget.
            Exception: the first report's own error (nothing of ``reports`` is kept).
        """
        def joined() -> None:
            with self.store.core.one_transaction():
                reports()
        self._retry(what, joined)

    def _topology_of(self, job_id: str) -> str:
        if job_id not in self._topologies:
            self._topologies[job_id] = self._retry(f"look up job {job_id}",
                                                   lambda: self.store.registry.job(job_id).topology)
        return self._topologies[job_id]

    def spec(self) -> dict[str, str]:
        """Re-creatable in a Spark Python worker (the env var must be set there too)."""
        return {"kind": "metastore", "url": self._url_spec}

    def tables(self) -> dict[str, str]:
        """{table name: location} of every registered table (locations for the app)."""
        return {t.name: t.location for t in self.store.registry.tables()}

    def begin_attempt(self, job_id: str, spark_session: str | None = None, *, for_next_run: bool = False) -> int:
        """Take a new fencing token for this process's run of ``job_id`` (fences older runs).

        Args:
            spark_session: the run's Spark Connect session id, recorded for the next attempt
                (:meth:`previous_spark_session` is the one before this run).
            for_next_run: the token is taken ahead of the run (the app's command line, before
                Spark work): the next run's own ``begin_attempt`` takes it over
                (:meth:`claim_attempt`) instead of fencing it.
        """
        start = self._retry(f"start an attempt of job {job_id}",
                            lambda: self.store.job_runs.start_attempt(job_id, spark_session))
        self._tokens[job_id] = start.token
        self._previous_sessions[job_id] = start.previous_spark_session
        if for_next_run:
            self._ahead.add(job_id)
        return start.token

    def claim_attempt(self, job_id: str) -> int | None:
        """The token taken ahead of this run (``for_next_run``), once; ``None`` when there is none."""
        if job_id not in self._ahead:
            return None
        self._ahead.discard(job_id)
        return self._tokens.get(job_id)

    def previous_spark_session(self, job_id: str) -> str | None:
        """The Spark Connect session id of the attempt before this process's (``None``: none, or
        it ran on spark-submit)."""
        return self._previous_sessions.get(job_id)

    def check_fencing_token(self, job_id: str, barrier: int | None = None) -> None:
        """Raise :class:`~airflow_provider_tsb.exceptions.FencedError` if a newer run of the job
        started (no-op before :meth:`begin_attempt`)."""
        token = self._tokens.get(job_id)
        if token is not None:
            self._retry(f"check the fencing token of job {job_id}",
                        lambda: self.store.job_runs.check_fencing_token(job_id, token, barrier))

    def held_staging(self, table: str, barrier: int, grace_s: float) -> set[str]:
        """See ``store.table_states.held_staging``."""
        return self._retry(f"read the staging held in {table}",
                           lambda: self.store.table_states.held_staging(table, barrier, grace_s))

    def due_withdrawn_staging(self, table: str, grace_s: float) -> list[tuple[str, int]]:
        """See ``store.table_states.due_withdrawn_staging``; no query when this process's last
        WRITTEN report of ``table`` found no withdrawn directory waiting (:meth:`record_written`)."""
        if not self._withdrawn_waiting.get(table, True):
            return []
        return self._retry(f"read the withdrawn staging of {table}",
                           lambda: self.store.table_states.due_withdrawn_staging(table, grace_s))

    def forget_withdrawn_staging(self, table: str, paths: Sequence[str]) -> None:
        """See ``store.table_states.forget_withdrawn_staging``."""
        self._retry(f"forget withdrawn staging of {table}",
                    lambda: self.store.table_states.forget_withdrawn_staging(table, paths))

    def record_job_end(self, job_id: str, status: str, message: str | None = None) -> None:
        """The job's status when the app ends: ``succeeded`` (clears a previous failure's message)
        or ``failed`` with ``message`` (the error, at most 2,000 characters). A fenced run (a
        newer run of the job started) leaves the status to the newer run."""
        token = self._tokens.get(job_id)

        def end() -> None:
            if token is not None and self.store.job_runs.fencing_token(job_id) != token:
                return
            self.store.job_runs.heartbeat(job_id, status=status, message=message[:2000] if message else None)

        self._retry(f"record the end of job {job_id}", end)

    def pending_barriers(
        self, job_id: str, sources: Mapping[str, str], after: int | None, limit: int | None = None
    ) -> list[BarrierPlan]:
        """Barriers after ``after`` WRITTEN in every input of ``job_id``, oldest first.

        Cost: two metastore queries per call, whatever the history length.

        Raises:
            UnknownJobError: the job is not registered.
            UnknownBarrierError: ``after`` is not WRITTEN in all inputs (inputs were restored
                without their downstream sinks).
            RevisionPendingError: a revision over the job's sinks is pending (finish it first).
        """
        topology = self._topology_of(job_id)
        self._retry(f"check for revisions of job {job_id}",
                    lambda: self.store.revisions.check_none_pending(job_id))
        names = {name: normalize_table_name(name) for name in sources}
        page = min(limit, PLAN_PAGE) if limit is not None else PLAN_PAGE
        barriers = self._retry(f"read the barriers of topology {topology}",
                               lambda: self.store.barriers.list(topology, after=after, limit=page, ascending=True))
        wanted = [b.barrier for b in barriers] + ([after] if after is not None else [])
        entries = self._retry(f"read the WRITTEN versions of {sorted(names.values())}",
                              lambda: self.store.table_states.written_entries(list(names.values()), wanted))

        def vector(barrier: int) -> dict[str, int] | None:
            out: dict[str, int] = {}
            for name, canonical in names.items():
                entry = entries.get((canonical, barrier))
                if entry is None:
                    return None
                out[name] = entry[0]
            return out

        def ready_at(barrier: GeneratedBarrier) -> int:
            times = [entries[(c, barrier.barrier)][1] for c in names.values()]
            return max([barrier.created_at_ms or 0, *(t for t in times if t is not None)])

        generated = [
            GeneratedBarrier(
                barrier=info.barrier,
                ts_ms=info.ts_ms,
                ts_kind=TsKind.EVENT if info.ts_kind == TsKind.EVENT else TsKind.SYSTEM,
                watermark_ms=info.ts_ms if info.ts_kind == TsKind.EVENT else None,
                final=info.final,
                created_at_ms=info.created_at_ms,
            )
            for info in barriers
        ]
        return plan_pending_barriers(
            job_id, list(names.values()), after, generated, vector, limit=limit, ready_at=ready_at
        )

    def record_processed(
        self, table: str, barrier: int, job_id: str, manifest: Sequence[Mapping[str, Any]] | Mapping[str, Any]
    ) -> None:
        """PROCESSED with the staged-file manifest ``{"mode": ..., "files": [...]}``."""
        if isinstance(manifest, Mapping):
            payload = dict(manifest)
        else:
            files = [dict(m) for m in manifest]
            modes = {f.pop("sink_mode", None) for f in files} - {None}
            payload = {"mode": modes.pop() if len(modes) == 1 else "append", "files": files}
        self._retry(f"record PROCESSED of {table} at barrier {barrier}",
                    lambda: self.store.table_states.record_processed(table, barrier, job_id, payload,
                                                        fencing_token=self._tokens.get(job_id)))

    def record_written(
        self, table: str, barrier: int, version: int, job_id: str, attempt: str | None = None
    ) -> None:
        """WRITTEN at Delta ``version`` (idempotent); ``attempt``: the committed attempt id.
        Remembers whether withdrawn directories of ``table`` wait for deletion (same transaction),
        so that :meth:`due_withdrawn_staging` right after asks only when some do."""
        self._withdrawn_waiting[table] = self._retry(
            f"record WRITTEN of {table} at barrier {barrier}", lambda: self.store.table_states.record_written(
                table, barrier, version, job_id, attempt=attempt, fencing_token=self._tokens.get(job_id)))

    def heartbeat(self, job_id: str) -> None:
        """Job liveness for the stale-job view."""
        self._retry(f"heartbeat job {job_id}", lambda: self.store.job_runs.heartbeat(job_id, status=JobStatus.RUNNING))

    def final_barrier(self, job_id: str, since_ms: int | None = None) -> int | None:
        """See :meth:`BarrierCatalog.final_barrier`."""
        topology = self._topology_of(job_id)
        info = self._retry(f"read the final barrier of topology {topology}",
                           lambda: self.store.barriers.latest_final(topology, since_ms))
        return info.barrier if info is not None else None

    def record_job_barrier(
        self, job_id: str, barrier: int, status: str, started_at_ms: int | None = None,
        finished_at_ms: int | None = None, release_lease: str | None = None,
        take_lease: LeaseRequest | None = None,
    ) -> str | None:
        """Job timing for the delay view, the job's heartbeat and current barrier and, at the
        barrier's start, its input lease ``take_lease`` (``store.leases.create``'s rules)
        or, at its end, the release of ``release_lease``: one metastore transaction (a
        barrier's start and end cost one round trip each). Returns the id of the lease taken.

        Raises:
            ExpiredVersionError: ``take_lease`` pins an expired version (nothing is recorded).
        """
        def record() -> str | None:
            with self.store.core.transaction(write=True) as s:
                # first: names an unknown job. An end never moves the job's current barrier back: the
                # end of barrier n may be recorded after the start of n + 1 (spark/report_queue.py)
                record_heartbeat(s, job_id, status=JobStatus.RUNNING, barrier=barrier,
                                 forward_only=status == JobStatus.SUCCEEDED)
                record_job_timing(s, job_id, barrier, status=status, started_at_ms=started_at_ms,
                                  finished_at_ms=finished_at_ms)
                if release_lease is not None:
                    end_lease(s, release_lease)
                if take_lease is None:
                    return None
                ids = {table_id_of(s, name): pinned for name, pinned in take_lease.ranges.items()}
                return lease_versions(s, ids, take_lease.seconds, take_lease.holder)[0]

        return self._retry(f"record the timing of job {job_id} at barrier {barrier}", record)

    def create_lease(self, ranges: Mapping[str, tuple[int, int]], seconds: float, holder: str) -> str:
        """Lease ``{table: (from_version, to_version)}`` for ``seconds``; returns the lease id
        (``store.leases.create``; the expiry time is not needed by a job)."""
        lease_id, _expires = self._retry(f"lease the inputs of {holder}",
                                         lambda: self.store.leases.create(ranges, seconds, holder=holder))
        return lease_id

    def renew_lease(self, lease_id: str, seconds: float) -> Any:
        """See ``store.leases.renew`` (``None`` when the lease lapsed)."""
        return self._retry(f"renew lease {lease_id}", lambda: self.store.leases.renew(lease_id, seconds))

    def narrow_lease(self, lease_id: str, ranges: Mapping[str, tuple[int, int]]) -> bool:
        """See ``store.leases.narrow`` (``False`` when the lease is gone)."""
        return self._retry(f"narrow lease {lease_id}", lambda: self.store.leases.narrow(lease_id, ranges))

    def release_lease(self, lease_id: str) -> None:
        """See ``store.leases.release``."""
        self._retry(f"release lease {lease_id}", lambda: self.store.leases.release(lease_id))


def _factory(spec: Mapping[str, str]) -> MetastoreCatalog:
    return MetastoreCatalog(spec.get("url") or "env:TSB_METASTORE_URL")


register_catalog_kind("metastore", _factory)
