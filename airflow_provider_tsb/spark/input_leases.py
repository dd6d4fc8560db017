"""Input leases: a running job pins the input versions it reads while it reads them.

Snapshot expiry (:mod:`airflow_provider_tsb.maintenance.expiry`) keeps every version a live lease pins.
While a job processes barrier ``n`` it reads each input's changes in the epoch
``(previous_inputs[t], inputs[t]]`` and may read snapshots at both ends, so
:class:`InputLease` pins, per input, the closed range ``[previous_inputs[t], inputs[t]]``
(``[0, inputs[t]]`` for the job's first barrier) for the barrier's run: batch mode and every
streaming micro-batch go through :func:`airflow_provider_tsb.spark.runner.run_barrier`, which
holds it. The lease is short (:data:`DEFAULT_LEASE_SECONDS`) and renewed by a daemon thread
every third of it, so a job that crashes leaves a lease that lapses by itself; it is released
when the barrier is done, in the metastore transaction that records the barrier's end. It is
taken in the transaction that records the barrier's start
(``record_job_barrier(..., take_lease=LeaseRequest(...))``), so a barrier's run costs the
lease no round trip of its own.
Apache Paimon's consumers do the same for running readers (apache/paimon#5819).

A batch run (:func:`~airflow_provider_tsb.spark.runner.run_batch`, a catch-up of many
barriers) leases once instead: :class:`RunLease` pins, per input, the smallest range holding
the epochs of all its pending barriers, before the first is read, and is narrowed to the
barriers still to come as each one is done (behind the job's next barrier, on its
:class:`~airflow_provider_tsb.spark.report_queue.ReportQueue`), so expiry can take what the run
has read while it runs; the run ends it. A barrier's start then records only its timing. When
a version of that range has already expired, the run falls back to one lease per barrier, so
the barriers before it are processed and the barrier that cannot be read names the version.

Only the metastore catalog leases (a plan-file catalog has no lease store): a catalog leases
when it offers ``create_lease``/``renew_lease`` and ends a lease with
``record_job_barrier(..., release_lease=...)``
(:class:`~airflow_provider_tsb.spark.metastore_catalog.MetastoreCatalog`, which rides out a
metastore outage).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_tsb.exceptions import ExpiredVersionError
from airflow_provider_tsb.spark.plans import BarrierPlan

log = logging.getLogger("airflow_provider_tsb.spark")

#: environment variable: seconds an input lease lives without renewal
LEASE_SECONDS_ENV = "TSB_INPUT_LEASE_SECONDS"
#: default lifetime of an input lease, seconds (renewed every third of it while the job runs)
DEFAULT_LEASE_SECONDS = 300.0


def input_ranges(plan: BarrierPlan) -> dict[str, tuple[int, int]]:
    """``{input table: (from, to)}``: the Delta versions barrier ``plan`` reads of each input."""
    out = {}
    for name, version in plan.inputs.items():
        previous = plan.previous_inputs.get(name) if plan.previous_inputs else None
        low = 0 if previous is None else min(int(previous), int(version))
        out[name] = (low, int(version))
    return out


def run_ranges(plans: Sequence[BarrierPlan]) -> dict[str, tuple[int, int]]:
    """``{input table: (from, to)}``: per input, the smallest closed range of Delta versions
    holding the :func:`input_ranges` of every plan in ``plans``."""
    out: dict[str, tuple[int, int]] = {}
    for plan in plans:
        out = _union(out, input_ranges(plan))
    return out


def _union(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Per table, the smallest closed range holding its ranges in ``a`` and ``b``."""
    out = dict(a)
    for name, (low, high) in b.items():
        held = out.get(name)
        out[name] = (low, high) if held is None else (min(held[0], low), max(held[1], high))
    return out


def lease_seconds() -> float:
    """The input lease lifetime: ``$TSB_INPUT_LEASE_SECONDS`` or :data:`DEFAULT_LEASE_SECONDS`.

    Raises:
        ValueError: the variable is not a positive number of seconds (names it).
    """
    raw = os.environ.get(LEASE_SECONDS_ENV)
    if not raw:
        return DEFAULT_LEASE_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < 10 * 365 * 86400:
        raise ValueError(f"{LEASE_SECONDS_ENV}={raw!r}: give the input lease lifetime in seconds, > 0")
    return seconds


@dataclass(frozen=True)
class LeaseRequest:
    """The input lease a barrier's run asks for (:meth:`InputLease.request`).

    Attributes:
        ranges: ``{input table: (from, to)}`` closed Delta version ranges (:func:`input_ranges`).
        seconds: the lease lifetime, seconds.
        holder: who holds it, for messages (``job J barrier N``).
    """

    ranges: dict[str, tuple[int, int]]
    seconds: float
    holder: str


class _Renewer:
    """A daemon thread renewing one lease every ``seconds / 3`` until stopped."""

    def __init__(self, leaser: Any, lease_id: str, seconds: float, holder: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(leaser, lease_id, seconds, holder), name="tsb-input-lease", daemon=True
        )
        self._thread.start()

    def _run(self, leaser: Any, lease_id: str, seconds: float, holder: str) -> None:
        while not self._stop.wait(seconds / 3):
            try:
                if leaser.renew_lease(lease_id, seconds) is None:
                    log.warning("%s: input lease %s lapsed before renewal; expiry may remove its versions",
                                holder, lease_id)
                    return
            except Exception as exc:  # a metastore hiccup: the next renewal may succeed
                log.warning("%s: renewing input lease %s failed: %s", holder, lease_id, exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class InputLease:
    """The input lease of one barrier's run (module doc), taken by :meth:`take`.

    On success :meth:`stop` stops renewing and hands the lease id back, for the catalog to end
    the lease in the same transaction as the barrier's final timing
    (:meth:`~airflow_provider_tsb.spark.catalog.BarrierCatalog.record_job_barrier`
    ``release_lease``): a barrier's end costs one metastore round trip, not two. On failure
    :meth:`release` ends it at once. A lease never ended (the job died, the metastore was
    down) lapses by itself after its lifetime.

    Args:
        leaser: the catalog holding the lease (``create_lease``/``renew_lease``/``release_lease``).
        lease_id: the lease.
        seconds: its lifetime, seconds (renewed every third of it).
        holder: who holds it, for messages (``job J barrier N``).
    """

    def __init__(self, leaser: Any, lease_id: str, seconds: float, holder: str) -> None:
        self._leaser = leaser
        self.lease_id = lease_id
        self.seconds = seconds
        self.holder = holder
        self._renewer: _Renewer | None = _Renewer(leaser, lease_id, seconds, holder)

    @staticmethod
    def request(catalog: object, job_id: str, plan: BarrierPlan, *, seconds: float | None = None
                ) -> LeaseRequest | None:
        """The lease barrier ``plan`` needs, or ``None`` when the catalog has no lease store (plan
        files) or the plan has no inputs.

        Raises:
            ValueError: ``$TSB_INPUT_LEASE_SECONDS`` is not a positive number of seconds.
        """
        ranges = input_ranges(plan)
        if not hasattr(catalog, "create_lease") or not ranges:
            return None
        ttl = seconds if seconds is not None else lease_seconds()
        return LeaseRequest(ranges, ttl, f"job {job_id} barrier {plan.barrier}")

    @classmethod
    def held(cls, catalog: object, lease_id: str, request: LeaseRequest) -> InputLease:
        """The lease ``lease_id`` the catalog took for ``request`` (with the barrier's start),
        renewed from now on."""
        return cls(catalog, lease_id, request.seconds, request.holder)

    @classmethod
    def take(cls, catalog: object, job_id: str, plan: BarrierPlan, *, seconds: float | None = None
             ) -> InputLease | None:
        """Lease the input versions of ``plan`` and start renewing the lease; ``None`` when the
        catalog has no lease store (plan files) or the plan has no inputs.

        Args:
            seconds: the lease lifetime (default: :func:`lease_seconds`).

        Raises:
            ExpiredVersionError: an input version was already expired by snapshot expiry (names
                the table, the barrier and the retention): the job cannot read its epoch.
        """
        wanted = cls.request(catalog, job_id, plan, seconds=seconds)
        if wanted is None:
            return None
        leaser: Any = catalog  # the barrier catalog (MetastoreCatalog leases through the metastore)
        return cls.held(catalog, leaser.create_lease(wanted.ranges, wanted.seconds, wanted.holder), wanted)

    def stop(self) -> str:
        """Stop renewing; the lease id, for the catalog to end with the barrier's timing."""
        if self._renewer is not None:
            self._renewer.stop()
            self._renewer = None
        return self.lease_id

    def release(self) -> None:
        """Stop renewing and end the lease now; a failure is logged (the lease lapses by itself)."""
        self.stop()
        try:
            self._leaser.release_lease(self.lease_id)
        except Exception as exc:
            log.warning("%s: releasing input lease %s failed (%s); it lapses in %.0f s", self.holder,
                        self.lease_id, exc, self.seconds)


class RunLease:
    """The input lease of a batch run over ``plans`` (module doc), taken by :meth:`take`.

    Args:
        leaser: the catalog holding the lease (``narrow_lease`` as well as :class:`InputLease`'s).
        lease: the lease, renewed while the run lasts.
        plans: the run's barriers, in order.
    """

    def __init__(self, leaser: Any, lease: InputLease, plans: Sequence[BarrierPlan]) -> None:
        self._leaser = leaser
        self.lease = lease
        self._plans = list(plans)
        self._index = {plan.barrier: i for i, plan in enumerate(self._plans)}
        # _rest[i]: run_ranges(plans[i:]), built back to front (one pass, not one per barrier)
        self._rest: list[dict[str, tuple[int, int]]] = [{} for _ in range(len(self._plans) + 1)]
        for i in range(len(self._plans) - 1, -1, -1):
            self._rest[i] = _union(input_ranges(self._plans[i]), self._rest[i + 1])

    @classmethod
    def take(cls, catalog: object, job_id: str, plans: Sequence[BarrierPlan], *, seconds: float | None = None
             ) -> RunLease | None:
        """Lease the inputs of every barrier in ``plans`` in one catalog call; ``None`` when the
        catalog cannot narrow a lease (plan files), nothing is read, or a version is expired
        (the barriers then lease their own epochs, and the one that cannot be read says why).

        Raises:
            ValueError: ``$TSB_INPUT_LEASE_SECONDS`` is not a positive number of seconds.
        """
        ranges = run_ranges(plans)
        if not ranges or not hasattr(catalog, "narrow_lease"):
            return None
        ttl = seconds if seconds is not None else lease_seconds()
        holder = f"job {job_id} barriers {plans[0].barrier}..{plans[-1].barrier}"
        leaser: Any = catalog
        try:
            lease_id = leaser.create_lease(ranges, ttl, holder)
        except ExpiredVersionError as exc:
            log.info("%s: no input lease for the run (%s); each barrier leases its own epoch", holder, exc)
            return None
        return cls(catalog, InputLease(catalog, lease_id, ttl, holder), plans)

    def covers(self, plan: BarrierPlan) -> bool:
        """Whether barrier ``plan`` is one of the run's (its epoch is leased)."""
        return plan.barrier in self._index

    def narrowing_after(self, barrier: int) -> Callable[[], None] | None:
        """The catalog call that narrows the lease to the run's barriers after ``barrier`` (to
        run once ``barrier``'s reads are over), or ``None`` after the last one."""
        at = self._index[barrier] + 1
        rest, ranges = self._plans[at:], self._rest[at]
        if not rest:
            return None

        def narrow() -> None:
            if not self._leaser.narrow_lease(self.lease.lease_id, ranges):
                log.warning("%s: input lease %s lapsed; expiry may remove the versions of barriers %s..%s",
                            self.lease.holder, self.lease.lease_id, rest[0].barrier, rest[-1].barrier)
        return narrow

    def release(self) -> None:
        """End the lease (the run is over); a failure is logged (the lease lapses by itself)."""
        self.lease.release()
