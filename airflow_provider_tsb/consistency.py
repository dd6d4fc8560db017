"""Consistency levels and read options of a read over a set of tables (FLIP-276 "Data Consistency Type")."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from airflow_provider_tsb.exceptions import (
    InvalidReadOptionError,
    OutOfRangeError,
    UnknownConsistencyLevelError,
    UnknownReadOptionError,
)

MAX_LEASE_SECONDS = 366 * 86400
"""The longest lease the Python API grants, in seconds (366 days; the REST API caps lower, at
``[tsb] max_lease_seconds``). Longer pins would keep a table's files from expiry for good."""


def check_lease_seconds(seconds: object) -> float:
    """``seconds`` as a lease duration, or :class:`OutOfRangeError` naming ``lease_seconds``.

    A lease lasts a finite, positive number of seconds, at most :data:`MAX_LEASE_SECONDS`.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
            or not 0 < seconds <= MAX_LEASE_SECONDS:
        raise OutOfRangeError(
            f"lease_seconds must be a number of seconds > 0 and <= {MAX_LEASE_SECONDS} (366 days), got {seconds!r}"
        )
    return float(seconds)


def table_list(tables: object) -> list[str]:
    """The tables Q of a read as a list (``list(tables)``).

    Raises:
        InvalidReadOptionError: one string instead of a list of names (iterating it would read
            each character as a table name).
    """
    if isinstance(tables, str):
        raise InvalidReadOptionError(
            f"read option tables must be a list of table names, got the string {tables!r}: pass [{tables!r}]"
        )
    return list(tables)  # type: ignore[call-overload]


#: Longest ``wait_s`` one ``POST /versions`` request may hold a server thread for (seconds);
#: :class:`~airflow_provider_tsb.read.client.TsbClient` splits a longer wait into several requests.
MAX_REQUEST_WAIT_S = 30.0


class ConsistencyLevel(StrEnum):
    """How consistent the versions returned for a set of tables Q must be.

    * ``READ_UNCOMMITTED``: each table at its latest Delta version. Fast, may be inconsistent.
    * ``READ_COMMITTED``: the newest barrier that is PRECOMMIT over Q (PROCESSED or WRITTEN in
      every table); staged files of PROCESSED tables are included. May roll back on failure.
    * ``REPEATABLE_READ``: the newest barrier that is COMMIT over Q (WRITTEN in every table).
      Never rolls back; the default.

    AS OF barrier n is REPEATABLE_READ pinned to one COMMIT barrier.
    """

    READ_UNCOMMITTED = "READ_UNCOMMITTED"
    READ_COMMITTED = "READ_COMMITTED"
    REPEATABLE_READ = "REPEATABLE_READ"

    @classmethod
    def parse(cls, value: str | ConsistencyLevel) -> ConsistencyLevel:
        """Parse ``read-committed``, ``READ_COMMITTED``, ``read_committed`` and so on.

        Raises:
            UnknownConsistencyLevelError: naming the value and the accepted levels.
        """
        if isinstance(value, ConsistencyLevel):
            return value
        key = str(value).strip().upper().replace("-", "_").replace(" ", "_")
        try:
            return cls[key]
        except KeyError:
            accepted = ", ".join(level.value.lower().replace("_", "-") for level in cls)
            raise UnknownConsistencyLevelError(
                f"unknown consistency level {value!r}; use one of {accepted}"
            ) from None

    @property
    def slug(self) -> str:
        """``read-committed`` style spelling used by the CLI and the REST API."""
        return self.value.lower().replace("_", "-")


@dataclass(frozen=True)
class ReadOptions:
    """How to read a set of tables Q: the one options object of every read entry point.

    Used by :meth:`store.resolution.resolve <airflow_provider_tsb.metastore.resolution.ResolutionManager.resolve>`,
    the REST API's ``POST /versions`` body, :meth:`TsbClient.versions
    <airflow_provider_tsb.read.client.TsbClient.versions>` and the readers
    (:func:`airflow_provider_tsb.read.readers.read_tables` and friends), like delta-rs passes
    ``CommitProperties`` instead of long keyword lists.

    Attributes:
        level: the consistency level (FLIP-276 "Data Consistency Type"); a name such as
            ``"read-committed"`` is parsed.
        as_of: AS OF barrier n (time travel to a COMMIT barrier; REPEATABLE_READ only).
        min_barrier: the reader's last seen barrier: the answer is never older (monotonic
            reads); ignored at READ_UNCOMMITTED, which promises nothing.
        lease_seconds: pin the returned Delta versions for this many seconds (snapshot expiry
            keeps them); ``None`` for no lease.
        lease_holder: free text naming who holds the lease.
        max_staleness_s: bounded staleness (Materialize ``BOUNDED STALENESS``): answer the
            newest COMMIT barrier over Q only if it is at most this many seconds old (age: now
            minus the barrier timestamp for system-time barriers, minus its generation time for
            event-time barriers); else :class:`~airflow_provider_tsb.exceptions.StaleReadError`
            naming the lagging tables and their writer jobs. REPEATABLE_READ only, not with
            ``as_of``.
        wait_s: with ``max_staleness_s``: poll up to this many seconds for a fresh enough
            barrier before raising (default 0: fail at once).

    Raises:
        UnknownConsistencyLevelError: ``level`` is not a level.
        InvalidReadOptionError: ``as_of`` with a level other than REPEATABLE_READ, a barrier id
            that is not an integer, seconds that are not a number >= 0 (the message names the
            field).
        OutOfRangeError: a barrier id outside 0..2**63-1, a ``lease_seconds`` that is not a
            positive finite number.

    Example::

        ReadOptions("read-committed", min_barrier=41)
        store.resolution.resolve(["tsb.flights.daily_delays"], ReadOptions(as_of=40, lease_seconds=60))
    """

    level: ConsistencyLevel = ConsistencyLevel.REPEATABLE_READ
    as_of: int | None = None
    min_barrier: int | None = None
    lease_seconds: float | None = None
    lease_holder: str | None = None
    max_staleness_s: float | None = None
    wait_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "level", ConsistencyLevel.parse(self.level))
        for name in ("as_of", "min_barrier"):
            value = getattr(self, name)
            if value is None:
                continue
            text = f"read option {name} must be a barrier id (an integer from 0 to 2**63-1), got {value!r}"
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidReadOptionError(text)
            if not 0 <= value < 2**63:
                raise OutOfRangeError(text)
        if self.as_of is not None and self.level is not ConsistencyLevel.REPEATABLE_READ:
            raise InvalidReadOptionError(
                f"as_of is time travel to a COMMIT barrier: use level REPEATABLE_READ, not {self.level.value}"
            )
        if self.lease_seconds is not None:
            check_lease_seconds(self.lease_seconds)
        for name in ("max_staleness_s", "wait_s"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf
            ):
                raise InvalidReadOptionError(f"read option {name} must be a number of seconds >= 0, got {value!r}")
        if self.wait_s is not None and self.max_staleness_s is None:
            raise InvalidReadOptionError("wait_s waits for a barrier fresh enough: give max_staleness_s too")
        if self.max_staleness_s is not None and (
            self.level is not ConsistencyLevel.REPEATABLE_READ or self.as_of is not None
        ):
            raise InvalidReadOptionError(
                "max_staleness_s bounds the age of the newest COMMIT barrier: use level REPEATABLE_READ "
                f"without as_of (got {self.level.value}{'' if self.as_of is None else f' as_of {self.as_of}'})"
            )

    @classmethod
    def of(cls, level: ReadOptions | ConsistencyLevel | str | None = None, **fields: Any) -> ReadOptions:
        """Options from a level or options object plus field overrides.

        ``ReadOptions.of("read-committed", min_barrier=3)``; ``ReadOptions.of(opts, as_of=7)``
        replaces ``as_of`` in ``opts``; ``None`` fields are ignored so keyword arguments can be
        forwarded as they are.

        Raises:
            UnknownReadOptionError: an unknown field name (a ``TypeError`` too). The errors of
                :class:`ReadOptions`.
        """
        given = {k: v for k, v in fields.items() if v is not None}
        unknown = sorted(set(given) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise UnknownReadOptionError(f"unknown read option(s) {unknown}; known: level, as_of, min_barrier, "
                                         "lease_seconds, lease_holder, max_staleness_s, wait_s")
        if isinstance(level, ReadOptions):
            return dataclasses.replace(level, **given) if given else level
        if level is not None:
            given.setdefault("level", level)
        return cls(**given)

    def to_json(self) -> dict[str, Any]:
        """The ``POST /versions`` body fields (``tables`` aside): level name and set options."""
        out: dict[str, Any] = {"level": self.level.value}
        for name in ("as_of", "min_barrier", "lease_seconds", "lease_holder", "max_staleness_s", "wait_s"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out
