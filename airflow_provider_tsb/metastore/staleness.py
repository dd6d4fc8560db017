"""Bounded staleness reads (Materialize ``BOUNDED STALENESS``): a wrapper of a resolver
(:class:`StalenessResolver` around :class:`~.resolution.ResolutionManager`).

A read with ``max_staleness_s`` (a :class:`~airflow_provider_tsb.consistency.ReadOptions`
field) takes the newest COMMIT barrier over its tables Q -- the REPEATABLE_READ answer -- if
that barrier is at most ``max_staleness_s`` seconds old, and otherwise polls for up to
``wait_s`` seconds and then raises :class:`~airflow_provider_tsb.exceptions.StaleReadError`
naming the lagging tables, their writer jobs and the age of the newest COMMIT barrier.

Age of a barrier (seconds, wall clock of the metastore client):

* system-time barrier: now minus its timestamp ``ts_ms`` (the time the root versions were
  taken, FLIP-276 "Timestamp Barrier");
* event-time barrier: now minus its generation time ``created_at_ms``. Its timestamp is an
  event-time watermark, which can be hours behind the wall clock on replayed or late data and
  says nothing about how long ago the root tables were read; the generation time does.

A lagging table is a table of Q whose newest WRITTEN barrier is older than the bound and than
the newest generated barrier; its writer job is the one to look at. When even the newest
generated barrier of the topology is too old, barrier generation itself is behind and the error
says so.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_provider_tsb.consistency import ConsistencyLevel, ReadOptions
from airflow_provider_tsb.exceptions import InconsistentReadError, StaleReadError
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.models import BarrierRow, JobRow, JobSinkRow, TableRow
from airflow_provider_tsb.metastore.records import BarrierState, Resolution, TsKind, now_ms
from airflow_provider_tsb.metastore.resolution import Resolver, canonical_names, newest_barriers


def barrier_age_ms(ts_ms: int, ts_kind: str, created_at_ms: int, now: int) -> int:
    """Age of a barrier in milliseconds at ``now`` (epoch ms); see the module docstring."""
    return now - (created_at_ms if ts_kind == TsKind.EVENT else ts_ms)


class StalenessResolver:
    """A resolver with bounded staleness (``max_staleness_s``, ``wait_s``): wraps another one.

    Args:
        core: the metastore's engine and transactions (barrier ages, the stale error's details).
        resolver: the resolver wrapped (a :class:`~.resolution.ResolutionManager`); reads
            without ``max_staleness_s`` go to it unchanged.

    Attributes:
        resolver: the resolver wrapped.
        staleness_poll_s: seconds between two checks while waiting for a fresh enough barrier.
    """

    def __init__(self, core: MetastoreCore, resolver: Resolver, *, staleness_poll_s: float = 0.5) -> None:
        self._core = core
        self.resolver = resolver
        self.staleness_poll_s = staleness_poll_s

    def resolve(
        self,
        tables: Iterable[str],
        level: ReadOptions | ConsistencyLevel | str | None = None,
        **options: Any,
    ) -> Resolution:
        """:meth:`ResolutionManager.resolve`, plus bounded staleness when ``max_staleness_s`` is set.

        With ``max_staleness_s``: the REPEATABLE_READ answer if its barrier is at most
        ``max_staleness_s`` seconds old (see the module docstring for the age); else check again
        every :attr:`staleness_poll_s` seconds for up to ``wait_s`` seconds. A lease
        (``lease_seconds``) is taken only on a fresh answer.

        Raises:
            StaleReadError: no fresh enough barrier within ``wait_s``: names the lagging tables
                of Q, their writer jobs (status, current barrier) and the age of the newest
                COMMIT barrier, or that barrier generation is behind.
            InconsistentReadError: a table has no WRITTEN barrier yet (retried like a stale
                answer while ``wait_s`` lasts); and the other errors of
                :meth:`ResolutionManager.resolve`.
        """
        opts = ReadOptions.of(level, **options)
        if opts.max_staleness_s is None:
            return self.resolver.resolve(tables, opts)
        names = canonical_names(tables)
        bound_ms = int(opts.max_staleness_s * 1000)
        plain = dataclasses.replace(opts, max_staleness_s=None, wait_s=None)
        deadline = time.monotonic() + (opts.wait_s or 0.0)
        while True:
            try:
                return self._resolve_fresh(names, plain, bound_ms, opts.max_staleness_s)
            except InconsistentReadError:  # StaleReadError, or no COMMIT barrier yet: wait alike
                if time.monotonic() >= deadline:
                    raise
            time.sleep(max(0.0, min(self.staleness_poll_s, deadline - time.monotonic())))

    def _resolve_fresh(self, names: list[str], plain: ReadOptions, bound_ms: int, bound_s: float) -> Resolution:
        probe = self.resolver.resolve(names, dataclasses.replace(plain, lease_seconds=None, lease_holder=None))
        now = now_ms()
        with self._core.transaction() as s:
            topology = s.scalar(select(TableRow.topology).where(TableRow.name == names[0]))
            age = self._age_ms(s, topology, probe.barrier, now)  # type: ignore[arg-type]
            if age is not None and age <= bound_ms:
                if plain.lease_seconds is None:
                    return probe
                fresh = max(plain.min_barrier or 0, probe.barrier or 0)
                return self.resolver.resolve(names, dataclasses.replace(plain, min_barrier=fresh))
            raise self._stale_error(s, names, topology, probe.barrier, age, bound_ms, bound_s, now)  # type: ignore[arg-type]

    def _age_ms(self, s: Session, topology: str, barrier: int, now: int) -> int | None:
        row = s.get(BarrierRow, (topology, barrier))
        return None if row is None else barrier_age_ms(row.ts_ms, row.ts_kind, row.created_at_ms, now)

    def _stale_error(
        self, s: Session, names: list[str], topology: str, barrier: int, age: int | None, bound_ms: int,
        bound_s: float, now: int,
    ) -> StaleReadError:
        rows = s.execute(
            select(TableRow.id, TableRow.name, TableRow.kind, JobRow.id, JobRow.status, JobRow.current_barrier)
            .outerjoin(JobSinkRow, JobSinkRow.table_id == TableRow.id)
            .outerjoin(JobRow, JobRow.id == JobSinkRow.job_id)
            .where(TableRow.name.in_(names))
        ).all()
        newest = newest_barriers(s, [r[0] for r in rows], (BarrierState.WRITTEN,))
        generated = s.scalar(
            select(BarrierRow).where(BarrierRow.topology == topology).order_by(BarrierRow.barrier_id.desc()).limit(1)
        )
        newest_generated = generated.barrier_id if generated is not None else None
        lagging: dict[str, str | None] = {}
        parts: list[str] = []
        for table_id, name, kind, job, status, current in sorted(rows, key=lambda r: names.index(r[1])):
            written = newest.get(table_id)
            table_age = self._age_ms(s, topology, written, now) if written is not None else None
            at_newest = written is not None and written == newest_generated
            if kind == "root" or at_newest or (table_age is not None and table_age <= bound_ms):
                continue  # a table at the newest generated barrier waits for generation, not for its job
            lagging[name] = job
            on = f", on barrier {current}" if current is not None else ""
            writer = f"writer job {job!r} ({status}{on})" if job else "no writer job registered"
            parts.append(
                f"{name}: newest WRITTEN barrier {written}"
                + (f", {table_age / 1000:.1f} s old" if table_age is not None else "")
                + f"; {writer}"
            )
        gen_age = (
            barrier_age_ms(generated.ts_ms, generated.ts_kind, generated.created_at_ms, now)
            if generated is not None else None
        )
        head = (
            f"bounded staleness: the newest COMMIT barrier over {names} is barrier {barrier}, "
            f"{(age or 0) / 1000:.1f} s old, older than max_staleness_s={bound_s:g}"
        )
        if parts:
            detail = "lagging: " + "; ".join(parts) + (
                f" (newest generated barrier: {generated.barrier_id}, {gen_age / 1000:.1f} s old)"
                if generated is not None and gen_age is not None else ""
            )
            hint = "wait for (or restart) the writer job(s), or read with a larger max_staleness_s"
            if gen_age is not None and gen_age > bound_ms:
                hint += "; barrier generation is behind too"
        else:
            detail = (
                f"no barrier was generated in topology {topology!r} within {bound_s:g} s (newest: barrier "
                f"{generated.barrier_id if generated is not None else None}"
                + (f", {gen_age / 1000:.1f} s old)" if gen_age is not None else ")")
            )
            hint = "barrier generation is behind: check the topology's barrier DAG or generate barriers more often"
        return StaleReadError(
            f"{head}; {detail}; {hint}",
            barrier=barrier, age_s=None if age is None else age / 1000, max_staleness_s=bound_s, lagging=lagging,
        )
