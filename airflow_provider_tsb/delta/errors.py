"""Errors of the data plane (Delta tables and the Spark app framework).

All derive from :class:`airflow_provider_tsb.exceptions.TsbError` and name the table
location, job and barrier involved so that a failed Spark app says what is wrong.
"""

from __future__ import annotations

from airflow_provider_tsb.exceptions import (
    BarrierNotReadyError,
    DeltaLogError,
    DeltaLogIntegrityError,
    TsbError,
    UnknownBarrierError,
)


class TableNotFoundError(TsbError, LookupError):
    """No Delta table exists at a location that must hold one (e.g. a root table)."""


class MisalignedInputError(BarrierNotReadyError):
    """An input would be read at a version that does not belong to the barrier processed."""


class BarrierNotInTableError(UnknownBarrierError):
    """A barrier has no tagged version in a table (e.g. the target of a restore)."""


class UnsupportedTableFeatureError(TsbError):
    """A Delta table uses a reader feature a reader cannot read: delta-rs, the reader of pandas,
    Arrow and the Delta Sharing server, does not read ``typeWidening`` or ``v2Checkpoint`` yet
    (Spark's Delta reader reads every feature; the message names the table and the features)."""


__all__ = [
    "BarrierNotInTableError",
    "UnsupportedTableFeatureError",
    "DeltaLogError",
    "DeltaLogIntegrityError",
    "MisalignedInputError",
    "TableNotFoundError",
]
