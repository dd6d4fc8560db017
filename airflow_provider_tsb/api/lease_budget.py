"""One rule for the leases a read takes through the API: bounded per principal.

A lease taken while serving a read (``POST /versions`` with ``lease_seconds``, a Delta Sharing
``query`` or ``changes`` by a user with the lease right) is bounded in seconds
(``[tsb] max_lease_seconds``; sharing leases live as long as its file URLs) and in versions:
every principal's live leases may pin at most ``[tsb] max_leased_versions`` Delta versions over
all tables (:func:`~airflow_provider_tsb.api.limits.max_leased_versions`). Each lease the API
takes is held as ``user:NAME/ PURPOSE``, so the count is one query
(:meth:`~airflow_provider_tsb.metastore.leases.LeaseManager.held_versions`), and a read that
would pass the limit is refused (:class:`~airflow_provider_tsb.exceptions.LeaseLimitError`,
429) before anything is pinned: a user cannot keep the warehouse from expiry by repeating reads.
"""

from __future__ import annotations

import dataclasses

from fastapi import Request

from airflow_provider_tsb.api.limits import max_leased_versions
from airflow_provider_tsb.consistency import ReadOptions
from airflow_provider_tsb.exceptions import LeaseLimitError
from airflow_provider_tsb.metastore.store import MetaStore


def principal_of(request: Request) -> str:
    """``user:NAME`` of the authenticated Airflow user (``user:anonymous`` without one: the
    standalone MetaService app)."""
    user = getattr(request.state, "tsb_user", None)
    return f"user:{user.get_name() if user is not None else 'anonymous'}"


def lease_holder(request: Request, purpose: str) -> str:
    """The holder of a lease the API takes for ``request``'s principal: ``user:NAME/ PURPOSE``."""
    return f"{principal_of(request)}/ {purpose}"[:250]


def check_lease_budget(store: MetaStore, holder: str, adding: int) -> None:
    """Refuse a read that would make ``holder``'s principal pin more than the limit.

    Args:
        store: the metastore.
        holder: the lease's holder (:func:`lease_holder`).
        adding: how many Delta versions the read would pin.

    Raises:
        LeaseLimitError: the principal's live leases pin ``held`` versions and ``held + adding``
            is over ``[tsb] max_leased_versions`` (names all three and what to do).
    """
    principal = holder.split("/ ", 1)[0]
    limit = max_leased_versions()
    held = store.leases.held_versions(principal + "/ ")
    if held + adding > limit:
        raise LeaseLimitError(
            f"{principal} holds leases on {held} Delta versions; this read would pin {adding} more, over the "
            f"limit of {limit} per user ([tsb] max_leased_versions). Release leases or let them lapse, read "
            "fewer versions at a time, or read without a lease"
        )


def budgeted(store: MetaStore, request: Request, options: ReadOptions, tables: int) -> ReadOptions:
    """``options`` of a ``POST /versions`` read: with a lease, held by the request's principal
    (:func:`lease_holder`, the client's own ``lease_holder`` text kept after it) once
    :func:`check_lease_budget` allows one version per table; without one, unchanged.

    Raises:
        LeaseLimitError: the lease would pass the principal's limit.
    """
    if options.lease_seconds is None:
        return options
    holder = lease_holder(request, f"rest {options.lease_holder or ''}".strip())
    check_lease_budget(store, holder, tables)
    return dataclasses.replace(options, lease_holder=holder)
