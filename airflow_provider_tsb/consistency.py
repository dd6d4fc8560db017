"""Consistency levels of a read over a set of tables (FLIP-276 "Data Consistency Type")."""

from __future__ import annotations

from enum import StrEnum

from airflow_provider_tsb.exceptions import TsbError


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


class UnknownConsistencyLevelError(TsbError, ValueError):
    """A consistency level name is not one of READ_UNCOMMITTED, READ_COMMITTED, REPEATABLE_READ."""
