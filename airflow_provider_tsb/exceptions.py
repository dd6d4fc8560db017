"""Errors raised by airflow-provider-tsb.

Every error names the table, job, barrier or field at fault and says what to do, so that a
user mistake never surfaces as a bare traceback from deep inside a library.
"""

from __future__ import annotations

import re
from typing import Any

#: an ANSI terminal escape (colour, cursor): delta-rs and pyspark errors may carry them
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


class TsbError(Exception):
    """Base class of every error raised by airflow-provider-tsb.

    Its text arguments are kept without ANSI terminal escapes: an error of delta-rs or pyspark
    that tsb wraps (``f"... : {exc}"``) reads the same in a log file, the UI and a terminal.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(_ANSI.sub("", a) if isinstance(a, str) else a for a in args))


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


class BarrierDomainError(TopologyError):
    """Topologies that must share barriers cannot (both already have barrier histories, or a
    declared barrier domain conflicts with the one the shared root tables give)."""


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


class UnknownRecipientError(TsbError, LookupError):
    """404: no Delta Sharing recipient has this id."""


class RecipientTokenError(TsbError):
    """401: a Delta Sharing bearer token that is unknown, expired or revoked (the message says
    which, never whose): ask the share's owner for a new profile (``tsb share profile``)."""


class FencedError(TsbError):
    """A newer attempt of the same job started: this attempt (an Airflow zombie) may not report.

    The metastore refuses PROCESSED and WRITTEN from an attempt whose fencing token is older
    than the job's newest one, and the Delta commit path checks the token before committing.

    Attributes:
        job_id: the job.
        barrier: the barrier the attempt was on (``None`` before the first barrier).
        token: this attempt's fencing token.
        winner: the fencing token of the job's newest attempt (the one that goes on).
    """

    def __init__(self, message: str, *, job_id: str, barrier: int | None, token: int, winner: int) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.barrier = barrier
        self.token = token
        self.winner = winner


class StagedFilesGoneError(InconsistentReadError):
    """A READ_COMMITTED answer's staged files were deleted before the read (held too long).

    The barrier's attempt was replaced and its files were deleted after the staging grace
    period. Resolve again (the readers of :mod:`airflow_provider_tsb.read.readers` do so once), or
    take a lease (``lease_seconds``) to keep a READ_COMMITTED answer's files longer.
    """


class ExpiredVersionError(TsbError, LookupError):
    """A Delta version (or barrier) was expired by snapshot expiry: its files are or may be gone.

    Raised when a resolution, a lease or a read asks for a version that snapshot expiry
    marked expired (``tsb_table_expiry``) or whose data files vacuum deleted. The message names
    the table, the barrier and version, and the retention that expired it.

    Attributes:
        table: the table.
        version: the Delta version (``None`` when unknown).
        barrier: the barrier at that version (``None`` when the version holds none).
        keep_barriers: the retention of the expiry that expired it (``None`` when unknown).
    """

    def __init__(
        self, message: str, *, table: str, version: int | None = None, barrier: int | None = None,
        keep_barriers: int | None = None,
    ) -> None:
        super().__init__(message)
        self.table = table
        self.version = version
        self.barrier = barrier
        self.keep_barriers = keep_barriers


class StaleReadError(InconsistentReadError):
    """Bounded staleness: the newest COMMIT barrier over the tables is older than ``max_staleness_s``.

    Raised by a read with ``max_staleness_s`` (Materialize ``BOUNDED STALENESS``) after its
    ``wait_s`` ran out. The message names each lagging table, its writer job (status and the
    barrier it is on) and the age of its newest WRITTEN barrier, or says that no barrier was
    generated recently enough.

    Attributes (``None`` / empty when rebuilt from a REST answer, which carries the message only):
        barrier: the newest COMMIT barrier over the tables.
        age_s: its age in seconds.
        max_staleness_s: the bound asked for.
        lagging: {table: writer job id (``None`` for a root table)} of the tables holding it back.
    """

    def __init__(
        self, message: str, *, barrier: int | None = None, age_s: float | None = None,
        max_staleness_s: float | None = None, lagging: dict[str, str | None] | None = None,
    ) -> None:
        super().__init__(message)
        self.barrier = barrier
        self.age_s = age_s
        self.max_staleness_s = max_staleness_s
        self.lagging = dict(lagging or {})


class InvalidReadOptionError(TsbError, ValueError):
    """A read option (``as_of``, ``min_barrier``, ``max_staleness_s``, ``wait_s``, the level) is
    not one a read can take; the message names the option and the value."""


class UnknownReadOptionError(InvalidReadOptionError, TypeError):
    """A read is given an option it does not know (``asof=3`` for ``as_of``): the message names
    it and the known ones. A ``TypeError`` too, as Python's own unknown keyword argument."""


class OutOfRangeError(TsbError, ValueError):
    """A number given to the metastore is not one it can hold: barrier ids, Delta versions,
    limits and epoch-millisecond times are integers from 0 to 2**63-1 (``BIGINT``); NaN and
    infinities are refused. The message names the field when it is known."""


class LocationNotAllowedError(TsbError, ValueError):
    """A table location outside the allowed roots (``[tsb] allowed_location_roots``; REST: 422):
    the message names the location and the roots."""


class LeaseLimitError(TsbError):
    """A read would pin more Delta versions than one principal (an Airflow user) may hold in live
    leases (``[tsb] max_leased_versions``): the message names the principal, what it holds, what
    the read adds and the limit. REST answers 429."""


class SparkConnectUnavailableError(TsbError):
    """No Spark Connect server answers at the URL a job was given (the message names the URL and
    how to start one: ``tsb spark start``)."""


class StreamingJobFailedError(TsbError):
    """A streaming job of the emitter's DAG run failed for good (its task ``failed`` with no try
    left): barriers after it would never reach COMMIT, so the emitter stops and fails, naming the
    job, its task and the job's last error from the metastore."""


class DeltaLogError(TsbError):
    """A commit of the Delta log that the operation needs is missing or unreadable.

    Usually the log was cleaned up (``delta.logRetentionDuration``) past the versions a
    barrier or an epoch of changes refers to.
    """


class DeltaLogIntegrityError(DeltaLogError):
    """The Delta log of a table does not give, at a version a barrier names, the live files the
    barrier's commit recorded: a commit file was edited, lost an ``add`` or a ``remove`` action,
    or was replaced by a copy of another commit.

    Every barrier commit records the number of live data files and their total size in bytes at
    its version (commit metadata ``tsb.files`` / ``tsb.bytes`` and the metastore's WRITTEN row);
    readers and ``tsb check --integrity`` compare them with what delta-rs replays from the log.
    Reading the table on would serve rows twice or lose them, so the read is refused: restore
    the log (e.g. from a backup of ``_delta_log``), then run ``tsb check --integrity``.

    Attributes:
        table: the table (canonical name, or its location when the name is unknown).
        barrier: the barrier whose version is served (``None`` when unknown).
        version: the Delta version.
        expected: ``(files, bytes)`` recorded at the commit (``None``: a data file is missing).
        found: ``(files, bytes)`` the log gives now (``None``: a data file is missing).
    """

    def __init__(
        self, message: str, *, table: str, barrier: int | None, version: int,
        expected: tuple[int, int] | None, found: tuple[int, int] | None,
    ) -> None:
        super().__init__(message)
        self.table = table
        self.barrier = barrier
        self.version = version
        self.expected = expected
        self.found = found


class TableLocationConflictError(TopologyError):
    """A registered table is registered again with another location.

    The metastore keeps one location per table: the message names the table, the registered
    location and the one asked for. Move the table's data and its registration together, or fix
    the declaration.
    """


class InvalidLocationError(TsbError, ValueError):
    """A table location is relative or contains ``..``: every process (the scheduler, the Spark
    driver and executors, the api-server) must find the table at the same place whatever its
    working directory. Give an absolute path or a URI (``s3://...``)."""


class DeltaWriteError(TsbError):
    """Delta's own Spark writer returned, but the sink does not hold the barrier's commit
    (:mod:`airflow_provider_tsb.spark.delta_writer`); nothing was reported WRITTEN."""


class AccessDeniedError(TsbError):
    """403: the user may not read or change this (the message names nothing the user can't see)."""


class ForbiddenFileError(AccessDeniedError):
    """403: a file URL whose signature is forged or expired, or whose path leaves the table."""


class UnknownShareError(TsbError, LookupError):
    """404: no such share, schema or table (or none the user may read)."""


class SparkCommandError(TsbError):
    """A ``tsb spark`` command could not do its work (exit code 2: configuration)."""

    exit_code = 2


class UnknownConsistencyLevelError(TsbError, ValueError):
    """A consistency level name is not one of READ_UNCOMMITTED, READ_COMMITTED, REPEATABLE_READ."""


class DagFileTimeoutError(TsbError, TimeoutError):
    """A DAG file's top level ran longer than the import timeout."""


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


class RootTableError(TsbError):
    """A root table does not exist or cannot be read at barrier generation."""


class SparkJobFailedError(TsbError):
    """A job's Spark Connect client exited with an error (the message names the job, the exit
    code and the last lines the app printed)."""


class CommitMissingError(TsbError):
    """The app exited successfully but a sink has no Delta commit tagged with the barrier."""


class RebuildRefusedError(TsbError):
    """``tsb db rebuild`` was pointed at a metastore that already holds barriers of the topologies."""


class BarrierHistoryError(TopologyError):
    """The next barrier id is already used in the topology's Delta tables or barrier log: the
    metastore lost barriers (restore it with ``tsb db rebuild``).

    Attributes:
        topology: the topology.
        barrier: the id the metastore would have generated.
        found: the newest barrier found in Delta.
        where: the table name, or ``"barrier log"``.
    """

    def __init__(self, message: str, *, topology: str, barrier: int, found: int, where: str) -> None:
        super().__init__(message)
        self.topology = topology
        self.barrier = barrier
        self.found = found
        self.where = where


class MetastoreUnavailableError(MetastoreError):
    """The metastore stayed unreachable for the whole retry budget (names the call, the
    database and the seconds tried)."""


class RevisionPendingError(TsbError):
    """A revision of the tables is pending: finish it before running their jobs (or starting
    another revision over them). The message names the revision, its tables and how to finish it."""


class TsbApiError(TsbError):
    """The REST API answered an error that is not a tsb error (or could not be reached).

    Attributes:
        status_code: HTTP status (``None`` when the server was not reached).
        detail: the server's ``detail`` (message, or validation problems).
    """

    def __init__(self, message: str, status_code: int | None = None, detail: Any = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.detail = detail


class TsbAuthError(TsbApiError):
    """Airflow did not authenticate the request (401), or refused a login: a missing, expired or
    wrong token, or a wrong user name or password."""


class TsbPermissionError(TsbApiError, PermissionError):
    """The authenticated user's role may not do this (403; Airflow's auth manager decides)."""


class BadRequestError(TsbError, ValueError):
    """A request parameter was refused by the server (422)."""


class UnknownTopologyError(TsbError, LookupError):
    """The topology is not registered (404)."""


class ClassDataError(TsbError):
    """The class-data archive could not be written (the message holds the end of the driver's output)."""


class SparkServerError(TsbError):
    """The local Spark Connect server cannot be started, reached or stopped (the message says
    what is wrong and what to do)."""


class DeltaJarsError(TsbError):
    """Delta's jars are missing, cannot be fetched, or do not match pyspark's Spark line (the
    message names the jar and the command that fetches it)."""


class SparkInstallationError(TsbError):
    """Java 17+ or ``spark-submit`` is missing (the message says what to install)."""


class BarrierColumnError(TsbError, ValueError):
    """A micro-batch's output (``TsbApp.process_micro_batch``) does not say which barrier each
    row belongs to: it lacks :data:`BARRIER_COLUMN`, or holds a value (or null) that is not one
    of the micro-batch's barriers. Nothing of the micro-batch is written or committed."""


class DuplicateKeyError(TsbError, ValueError):
    """A merge sink's output holds several rows for one key (raised before anything is reported
    or committed; files already written for the check are deleted)."""


class SchemaChangeError(TsbError, ValueError):
    """A barrier's output changes its sink table's schema in a way Delta readers cannot follow
    (a dropped column, a changed type, a new non-nullable column) or changes its partition
    columns. Raised before any file is written or committed."""


class RootDataError(TsbError, ValueError):
    """Data given to :func:`~airflow_provider_tsb.root_tables.append_to_root` cannot be appended:
    an unsupported type, a file format it cannot tell, or columns that do not match the root
    table's schema (a root table keeps its schema; the message names the table and the columns).
    Nothing is written."""


class DataFileNotFoundError(TsbError, FileNotFoundError):
    """A data file to append to a root table does not exist (the message names it). Nothing is written."""
