"""Errors raised by airflow-provider-tsb.

Every error names the table, job, barrier or field at fault and says what to do, so that a
user mistake never surfaces as a bare traceback from deep inside a library.
"""

from __future__ import annotations


class TsbError(Exception):
    """Base class of every error raised by airflow-provider-tsb."""


class InvalidNameError(TsbError, ValueError):
    """A table name is not ``catalog.database.table`` made of identifiers."""


class TopologyError(TsbError, ValueError):
    """A topology declaration is invalid (raised while the DAG file is parsed)."""


class CycleError(TopologyError):
    """The tables -> jobs -> tables graph has a cycle.

    ``cycle`` holds the node labels in order, the first repeated at the end, e.g.
    ``["t1", "job a", "t2", "job b", "t1"]``.
    """

    def __init__(self, message: str, cycle: list[str]) -> None:
        super().__init__(message)
        self.cycle = cycle


class DoubleWriterError(TopologyError):
    """Two jobs write the same table; a non-root table has exactly one writer job."""

    def __init__(self, message: str, table: str, jobs: tuple[str, str]) -> None:
        super().__init__(message)
        self.table = table
        self.jobs = jobs


class UnknownTableError(TopologyError, LookupError):
    """A table is referenced that neither the topology nor the metastore knows."""


class UnknownJobError(TsbError, LookupError):
    """A job id is referenced that is not registered."""


class UnknownBarrierError(TsbError, LookupError):
    """A barrier id is referenced that was never generated for the topology."""


class BarrierNotReadyError(TsbError):
    """An input table is not WRITTEN at the barrier a job wants to process."""


class InconsistentReadError(TsbError):
    """No barrier satisfies the requested consistency level over the requested tables.

    Raised for AS OF barrier n when n is not COMMIT over every table, and by monotonic reads
    when the client's last seen barrier is no longer available (after a rollback).
    """


class MetastoreError(TsbError):
    """The metastore cannot be reached, or its schema is missing or out of date."""
