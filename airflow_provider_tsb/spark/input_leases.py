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
from dataclasses import dataclass
from typing import Any

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
