"""Riding out a metastore outage: retry a call while the database is unreachable.

A streaming job talks to the metastore for every barrier (its plan, PROCESSED, WRITTEN,
timings, leases). A PostgreSQL restart or failover, or a network blip, makes those calls fail
with connection errors for seconds; failing the job then costs an Airflow retry and a new Spark
session. :func:`call_with_retry` retries such *transient* failures with capped exponential
backoff for up to a time budget (``$TSB_METASTORE_RETRY_SECONDS``, default
:data:`DEFAULT_RETRY_SECONDS`), then raises :class:`MetastoreUnavailableError` naming the
call, the database and how long it was tried. Errors that are not about reaching the
database (a constraint, a fencing refusal, a missing schema) are raised at once.

Every call retried this way must be idempotent: the calls of the barrier catalog are (WRITTEN
and PROCESSED replace the same row, heartbeats and timings are upserts; a retried
``begin_attempt`` takes a newer fencing token, which only fences the older one).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TypeVar

from airflow_provider_tsb.exceptions import MetastoreUnavailableError, OutOfRangeError

log = logging.getLogger("airflow_provider_tsb.metastore")

T = TypeVar("T")

#: environment variable: seconds a metastore call is retried while the database is unreachable
RETRY_SECONDS_ENV = "TSB_METASTORE_RETRY_SECONDS"
#: default retry budget, seconds (a database restart or failover takes seconds to tens of seconds)
DEFAULT_RETRY_SECONDS = 90.0
#: first and longest wait between two tries, seconds
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.25, 5.0

#: driver messages of a database that cannot be reached or dropped the connection
#: (psycopg2/libpq and PostgreSQL's own shutdown messages; SQLite: a file on a vanished mount)
TRANSIENT_MARKERS = (
    "connection refused",
    "could not connect to server",
    "connection to server at",
    "server closed the connection unexpectedly",
    "terminating connection",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "connection already closed",
    "ssl connection has been closed unexpectedly",
    "could not receive data from server",
    "could not send data to server",
    "no connection to the server",
    "connection timed out",
    "timeout expired",
    "network is unreachable",
    "unable to open database file",
    "canceling statement due to statement timeout",
)


def retry_budget_s() -> float:
    """``$TSB_METASTORE_RETRY_SECONDS`` (``0`` turns retrying off), else :data:`DEFAULT_RETRY_SECONDS`.

    Raises:
        OutOfRangeError: the variable is not a number of seconds from 0 to 86399 (names it).
    """
    raw = os.environ.get(RETRY_SECONDS_ENV)
    if raw is None or raw == "":
        return DEFAULT_RETRY_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds < 86400:
        raise OutOfRangeError(f"{RETRY_SECONDS_ENV}={raw!r}: give the metastore retry budget in seconds, 0 to 86399")
    return seconds


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) says the database could not be
    reached or dropped the connection: SQLAlchemy's ``connection_invalidated``, or a driver
    message of :data:`TRANSIENT_MARKERS`."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "connection_invalidated", False):
            return True
        text = str(getattr(current, "orig", None) or current).lower()
        if any(marker in text for marker in TRANSIENT_MARKERS):
            return True
        current = current.__cause__ or current.__context__
    return False


def call_with_retry(
    fn: Callable[[], T], what: str, where: str, *, budget_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``fn()``, retried on transient failures for up to ``budget_s`` seconds.

    Args:
        fn: the idempotent call.
        what: the call, for messages (``"record WRITTEN of wordcount.word_count at barrier 3"``).
        where: the database (URL without password).
        budget_s: seconds to keep trying (default :func:`retry_budget_s`).

    Raises:
        MetastoreUnavailableError: still failing when the budget is spent (the last error chained).
        Exception: a failure that is not transient, unchanged.
    """
    budget = retry_budget_s() if budget_s is None else budget_s
    started = time.monotonic()
    deadline = started + budget
    wait = FIRST_BACKOFF_S
    tries = 0
    while True:
        tries += 1
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc):
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                tried = time.monotonic() - started
                raise MetastoreUnavailableError(
                    f"the tsb metastore at {where} was unreachable for {tried:.0f} s ({tries} tries) while trying "
                    f"to {what}: {_first_line(exc, where)}. Check that the database is up; the retry budget is "
                    f"${RETRY_SECONDS_ENV}"
                ) from exc
            if tries == 1:
                log.warning("metastore at %s unreachable (%s) while trying to %s; retrying for up to %.0f s",
                            where, _first_line(exc, where), what, budget)
            sleep(min(wait, left))
            wait = min(wait * 2, MAX_BACKOFF_S)


def _first_line(exc: BaseException, where: str) -> str:
    """The driver's first line of ``exc``, without the metastore's own "at URL failed" prefix."""
    text = str(getattr(exc, "orig", None) or exc).strip().removeprefix(f"the tsb metastore at {where} failed: ")
    return (text.splitlines() or [type(exc).__name__])[0][:300]
