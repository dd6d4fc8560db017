"""Records and enums of the tsb metastore: what its API takes and returns.

Every state name of the FLIP-276 vocabulary is defined here once (docs/design.md "Vocabulary";
FLIP-276 "Timestamp Barrier", "Data Consistency Type"):

* :class:`BarrierState`: a barrier in one table, PROCESSED or WRITTEN;
* :class:`CommitState`: a barrier over a set of tables Q, PRECOMMIT or COMMIT;
* :class:`TsKind`: the barrier timestamp, system time or event-time watermark;
* :class:`JobStatus`: a registered job's liveness.

The enums are :class:`~enum.StrEnum`: the metastore stores their values and they compare equal
to the plain strings read back. All times are epoch milliseconds (UTC); versions are Delta
table versions; barrier ids are integers strictly increasing per topology.

Records are plain data: reading the tables a :class:`Resolution` names is the read layer's
(:mod:`airflow_provider_tsb.read.resolutions`, :mod:`airflow_provider_tsb.read.version_reads`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from airflow_provider_tsb.consistency import ConsistencyLevel

if TYPE_CHECKING:
    from airflow_provider_tsb.lineage import Job, Table


class BarrierState(StrEnum):
    """State of one barrier in one table (docs/design.md "Vocabulary").

    * ``PROCESSED``: the job wrote every output file of the barrier (staged, not committed).
    * ``WRITTEN``: the barrier is a Delta commit of the table, at a known version.
    """

    PROCESSED = "PROCESSED"
    WRITTEN = "WRITTEN"


class CommitState(StrEnum):
    """State of one barrier over a set of tables Q (FLIP-276 "Data Consistency Type").

    * ``PRECOMMIT``: PROCESSED or WRITTEN in every table of Q (READ_COMMITTED reads it).
    * ``COMMIT``: WRITTEN in every table of Q (REPEATABLE_READ reads it; never rolls back).
    """

    PRECOMMIT = "PRECOMMIT"
    COMMIT = "COMMIT"

    @classmethod
    def of(cls, states: Iterable[str | None]) -> CommitState | None:
        """The commit state of a barrier whose per-table states are ``states``.

        Returns:
            COMMIT if every state is WRITTEN, PRECOMMIT if every state is PROCESSED or WRITTEN,
            else ``None`` (some table has not processed the barrier; also for no tables).
        """
        seen = list(states)
        if not seen or any(s not in (BarrierState.PROCESSED, BarrierState.WRITTEN) for s in seen):
            return None
        return cls.COMMIT if all(s == BarrierState.WRITTEN for s in seen) else cls.PRECOMMIT


class TsKind(StrEnum):
    """What a barrier timestamp is (FLIP-276 "Timestamp Barrier")."""

    SYSTEM = "system"
    EVENT = "event"


class JobStatus(StrEnum):
    """A registered job's status, set by its heartbeats and runs."""

    REGISTERED = "registered"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


#: :attr:`TableVersion.state` of a READ_UNCOMMITTED answer: the table's latest Delta version.
LATEST = "LATEST"


def now_ms() -> int:
    """Current time in epoch milliseconds."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class BarrierInfo:
    """A generated barrier.

    Attributes:
        topology: topology name.
        barrier: the barrier id, strictly increasing per topology, from 1.
        ts_ms: barrier timestamp (epoch ms): system time or the event-time watermark.
        ts_kind: ``system`` or ``event``.
        created_at_ms: generation time.
        run_key: idempotency key it was generated for (e.g. the DAG run id).
        root_versions: Delta version of every root table at the barrier, {table: version}.
        created: False when an existing barrier was returned for a repeated run key.
        final: the last barrier of a bounded input (FLIP-147 "end of input"): streaming jobs
            stop once they have committed it.
    """

    topology: str
    barrier: int
    ts_ms: int
    ts_kind: str
    created_at_ms: int
    run_key: str | None
    root_versions: dict[str, int]
    created: bool = True
    final: bool = False


@dataclass(frozen=True)
class TableState:
    """State of one barrier in one table (a row of the table's barrier history)."""

    table: str
    barrier: int
    state: str
    version: int | None
    job_id: str | None
    processed_at_ms: int | None
    written_at_ms: int | None
    manifest: dict[str, Any] | None = None
    inputs: dict[str, Any] | None = None
    file_count: int | None = None  # live files at ``version`` and their bytes, as recorded
    size_bytes: int | None = None


@dataclass(frozen=True)
class TableVersion:
    """What to read of one table.

    Attributes:
        table: canonical name.
        location: Delta table location.
        version: Delta version to read (for a PROCESSED table at READ_COMMITTED: the newest
            WRITTEN version below the barrier, to which ``staged`` is applied); ``None`` when
            the table has no version yet.
        barrier: barrier the version belongs to (``None`` at READ_UNCOMMITTED when untagged).
        state: :class:`BarrierState` ``WRITTEN`` or ``PROCESSED``, or :data:`LATEST`
            (READ_UNCOMMITTED).
        staged: the PROCESSED manifest ({"mode": "append"|"overwrite", "files": [...]}, plus
            "removes": [...] the files a merge rewrites) to apply on top of ``version``,
            READ_COMMITTED only.
        file_count / size_bytes: live data files of ``version`` and their bytes as recorded
            (``None``: not recorded); readers verify them (:mod:`~airflow_provider_tsb.delta.integrity`).
    """

    table: str
    location: str
    version: int | None
    barrier: int | None
    state: str
    staged: dict[str, Any] | None = None
    file_count: int | None = None
    size_bytes: int | None = None




@dataclass(frozen=True)
class Resolution:
    """The answer to "which versions do I read for tables Q at this level?".

    Attributes:
        level: the consistency level resolved.
        barrier: the barrier all tables are read at (``None`` for READ_UNCOMMITTED).
        tables: {table name: :class:`TableVersion`} for every table of Q.
        lease_id / lease_expires_at_ms: set when a lease pins the versions.
    """

    level: ConsistencyLevel
    barrier: int | None
    tables: dict[str, TableVersion]
    lease_id: str | None = None
    lease_expires_at_ms: int | None = None
    as_of: int | None = None

    @property
    def versions(self) -> dict[str, int | None]:
        """{table: Delta version}."""
        return {name: tv.version for name, tv in self.tables.items()}




    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the shape of the REST API's ``POST /versions`` answer).

        Shape::

            {"level": "REPEATABLE_READ", "barrier": 7, "as_of": null,
             "tables": {"c.d.t": {"version": 3, "barrier": 7, "state": "WRITTEN",
                                  "location": "/wh/c/d/t", "staged": null, "file_count": 4, "size_bytes": 8812}},
             "lease": {"id": "...", "expires_at_ms": 1700000000000} | null}
        """
        lease = None
        if self.lease_id is not None:
            lease = {"id": self.lease_id, "expires_at_ms": self.lease_expires_at_ms}
        return {
            "level": self.level.value,
            "barrier": self.barrier,
            "as_of": self.as_of,
            "tables": {
                name: {"version": tv.version, "barrier": tv.barrier, "state": tv.state,
                       "location": tv.location, "staged": tv.staged,
                       "file_count": tv.file_count, "size_bytes": tv.size_bytes}
                for name, tv in self.tables.items()
            },
            "lease": lease,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resolution:
        """Inverse of :meth:`to_dict` (for answers received from the REST API)."""
        lease = data.get("lease") or {}
        tables = {
            name: TableVersion(
                name, str(tv["location"]), tv.get("version"), tv.get("barrier"), str(tv["state"]), tv.get("staged"),
                tv.get("file_count"), tv.get("size_bytes"),
            )
            for name, tv in dict(data["tables"]).items()
        }
        return cls(
            ConsistencyLevel.parse(data["level"]), data.get("barrier"), tables, lease.get("id"),
            lease.get("expires_at_ms"), data.get("as_of"),
        )


@dataclass(frozen=True)
class JobInfo:
    """A registered job with its sources, sinks and liveness."""

    id: str
    topology: str
    application: str
    status: str
    registered_at_ms: int
    last_heartbeat_ms: int | None
    current_barrier: int | None
    sources: tuple[str, ...]
    sinks: tuple[str, ...]
    message: str | None = None

    def is_stale(self, threshold_s: float, now: int | None = None) -> bool:
        """Registered and running but silent for more than ``threshold_s`` seconds (a zombie)."""
        if self.status != JobStatus.RUNNING:
            return False
        last = self.last_heartbeat_ms or self.registered_at_ms
        return ((now or now_ms()) - last) > threshold_s * 1000


@dataclass(frozen=True)
class JobBarrierTiming:
    """One job's run of one barrier (epoch ms), as recorded by the app or the operator."""

    job_id: str
    barrier: int
    status: str
    started_at_ms: int | None
    finished_at_ms: int | None
    attempts: int


@dataclass(frozen=True)
class TableInfo:
    """A registered table."""

    id: int
    name: str
    topology: str
    kind: str
    location: str
    event_time_column: str | None
    writer: str | None = None
    readers: tuple[str, ...] = field(default_factory=tuple)
    #: freshness target in seconds (metastore/freshness.py), or None
    freshness_s: float | None = None


@dataclass(frozen=True)
class TableDelay:
    """Delay of one non-root table at one barrier.

    Attributes:
        state: :class:`BarrierState` of the barrier in the table, or ``PENDING`` when neither.
        delay_ms: barrier generation -> WRITTEN in milliseconds (``None`` while not WRITTEN).
    """

    state: str
    delay_ms: int | None


@dataclass(frozen=True)
class JobDelay:
    """Processing delay of one job at one barrier.

    Attributes:
        delay_ms: its sinks' (last) WRITTEN minus its inputs' latest WRITTEN, milliseconds
            (a root input is WRITTEN when the barrier is generated); ``None`` while a sink is
            not WRITTEN.
        written_at_ms: when its last sink was WRITTEN (epoch ms), or ``None``.
    """

    delay_ms: int | None
    written_at_ms: int | None


@dataclass(frozen=True)
class BarrierDelays:
    """Delays of one barrier through a topology (the delay view, FLIP-276 "end-to-end delay").

    Attributes:
        barrier, ts_ms, created_at_ms: the barrier, its timestamp and generation time (epoch ms).
        complete: WRITTEN in every non-root table (COMMIT over the topology's sinks).
        end_to_end_ms: generation -> the last non-root table WRITTEN (``None`` while incomplete).
        tables: {table: :class:`TableDelay`} of every non-root table.
        jobs: {job id: :class:`JobDelay`}.
        bottleneck: the job with the largest processing delay (``None`` before any finished).
    """

    barrier: int
    ts_ms: int
    created_at_ms: int
    complete: bool
    end_to_end_ms: int | None
    tables: dict[str, TableDelay]
    jobs: dict[str, JobDelay]
    bottleneck: str | None


class DeclaredTopology(Protocol):
    """What registration needs of a :class:`~airflow_provider_tsb.topology.Topology` (the DAG
    authoring model, which this layer does not import)."""

    name: str
    warehouse: str | None
    tables: Mapping[str, Table]
    #: the declared barrier domain (``None``: derived from shared root tables)
    barrier_domain: str | None

    @property
    def root_tables(self) -> list[Table]: ...

    def validate(self) -> object: ...

    def jobs_in_order(self) -> list[Job]: ...


#: a closed range of Delta versions ``(from, to)``
VersionRange = tuple[int, int]


def first_uncovered(ranges: Iterable[VersionRange], lo: int, hi: int) -> int | None:
    """The first version of ``[lo, hi]`` in none of ``ranges`` (sorted, disjoint), or ``None``."""
    v = lo
    for a, b in ranges:
        if v > hi:
            return None
        if b < v:
            continue
        if a > v:
            return v
        v = b + 1
    return v if v <= hi else None


def merge_ranges(ranges: Iterable[VersionRange]) -> list[VersionRange]:
    """Sorted, disjoint union of closed version ranges (adjacent ranges are joined)."""
    out: list[VersionRange] = []
    for a, b in sorted((int(a), int(b)) for a, b in ranges if a <= b):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def intersect_ranges(left: Iterable[VersionRange], right: Iterable[VersionRange]) -> list[VersionRange]:
    """Sorted, disjoint intersection of two sets of closed version ranges."""
    a, b = merge_ranges(left), merge_ranges(right)
    out: list[VersionRange] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


@dataclass(frozen=True)
class TableExpiry:
    """What snapshot expiry has expired in one table (docs/design.md "Snapshot expiry").

    A Delta version ``v`` is expired when ``v < horizon`` and no range of ``kept`` holds it;
    its data files are (or may be) deleted by vacuum. Expired versions never come back.

    Attributes:
        table: canonical name.
        horizon: versions at or above it are not expired.
        kept: sorted, disjoint ``(from, to)`` version ranges below ``horizon`` that are kept.
        keep_barriers: the retention of the last expiry (newest WRITTEN barriers kept).
        expired_at_ms: when the last expiry marked the table (epoch ms).
        retention: the last expiry's policy ``{"keep_last", "hourly_hours", "daily_days"}``
            (see :class:`airflow_provider_tsb.maintenance.retention.RetentionPolicy`), if recorded.
    """

    table: str
    horizon: int
    kept: tuple[VersionRange, ...]
    keep_barriers: int
    expired_at_ms: int
    retention: Mapping[str, int] | None = None

    def first_expired(self, lo: int, hi: int | None = None) -> int | None:
        """The first expired version of ``[lo, hi]`` (``hi`` defaults to ``lo``), or ``None``."""
        hi = lo if hi is None else hi
        if lo >= self.horizon:
            return None
        return first_uncovered(self.kept, lo, min(hi, self.horizon - 1))

    def is_expired(self, version: int) -> bool:
        """Whether ``version`` is expired."""
        return self.first_expired(version) is not None


@dataclass(frozen=True)
class ExpiryPlan:
    """One expiry of one table, as marked in the metastore before vacuum runs.

    Attributes:
        expiry: the table's marks after this expiry.
        location: the Delta table location.
        latest_version: the Delta version vacuum runs at (versions from ``expiry.horizon`` on
            are kept whole).
        keep_versions: every version vacuum keeps (``kept`` ranges and ``[horizon, latest]``).
        newly_expired: how many versions this expiry expired.
        newly_expired_barriers: the WRITTEN barriers whose versions this expiry expired.
        kept_barriers: the barriers whose versions are kept for the retention, newest first.
        leased: the version ranges live leases pin.
        consumer_floor: the oldest version a registered reader job still needs (``None``: no
            reader job, or consumers were not protected).
    """

    expiry: TableExpiry
    location: str
    latest_version: int
    keep_versions: tuple[int, ...]
    newly_expired: int
    newly_expired_barriers: tuple[int, ...]
    kept_barriers: tuple[int, ...]
    leased: tuple[VersionRange, ...]
    consumer_floor: int | None
