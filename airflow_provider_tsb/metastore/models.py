"""SQLAlchemy models of the tsb metastore (the MetaService's state).

The models live in their own :class:`~sqlalchemy.MetaData` (never Airflow's ``Base``): the
metastore may share a database server with Airflow but is reached only through
:class:`~airflow_provider_tsb.hooks.metastore.TsbMetastoreHook`, because Airflow 3 forbids task
and trigger code from using Airflow's metadata database.

Times are integers in **epoch milliseconds (UTC)**; Delta versions and barrier ids are
integers. Indexes are chosen so that the lookups on the hot path -- a table's newest WRITTEN
barrier, the version of (table, barrier), the newest barrier of a topology -- are single
B-tree seeks whose cost does not grow with the barrier history.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from airflow_provider_tsb.metastore.records import JobStatus

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)



class Base(DeclarativeBase):
    """Declarative base bound to the tsb :data:`metadata` (not Airflow's)."""

    metadata = metadata


class TopologyRow(Base):
    """A topology: the domain in which barrier ids are strictly increasing."""

    __tablename__ = "tsb_topology"

    name: Mapped[str] = mapped_column(String(250), primary_key=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    #: bumped by every barrier generation: the row lock that serialises them
    lock_version: Mapped[int] = mapped_column(BigInteger, default=0)
    #: the barrier domain: topologies of one domain share barrier ids;
    #: ``None`` means the topology is a domain of its own, named after it
    barrier_domain: Mapped[str | None] = mapped_column(String(250), nullable=True, index=True)
    #: location of the topology's barrier log (``<warehouse>/_tsb/<topology>/barrier_log``), set at
    #: registration: every barrier of its domain is logged there, whichever topology generated it
    barrier_log: Mapped[str | None] = mapped_column(Text, nullable=True)


class TopologyRootRow(Base):
    """A root table a topology reads: its own root tables and the ones it shares with the
    other topologies of its barrier domain (FLIP-276 "Data Consistency Management")."""

    __tablename__ = "tsb_topology_root"

    topology: Mapped[str] = mapped_column(ForeignKey("tsb_topology.name"), primary_key=True)
    table_id: Mapped[int] = mapped_column(ForeignKey("tsb_table.id"), primary_key=True, index=True)


class TableRow(Base):
    """A Delta table known to the metastore."""

    __tablename__ = "tsb_table"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: canonical ``catalog.database.table``
    name: Mapped[str] = mapped_column(String(400), unique=True)
    topology: Mapped[str] = mapped_column(ForeignKey("tsb_topology.name"), index=True)
    #: ``root`` or ``intermediate``
    kind: Mapped[str] = mapped_column(String(20))
    location: Mapped[str] = mapped_column(Text)
    event_time_column: Mapped[str | None] = mapped_column(String(250), nullable=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    #: freshness target in ms (Snowflake ``TARGET_LAG``): the table's lag behind the newest
    #: generated barrier must stay under it (metastore/freshness.py); None: no target
    freshness_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class JobRow(Base):
    """A registered ETL job (one Spark application)."""

    __tablename__ = "tsb_job"

    id: Mapped[str] = mapped_column(String(250), primary_key=True)
    topology: Mapped[str] = mapped_column(ForeignKey("tsb_topology.name"), index=True)
    application: Mapped[str] = mapped_column(Text)
    #: registered | running | succeeded | failed
    status: Mapped[str] = mapped_column(String(20), default=JobStatus.REGISTERED)
    registered_at_ms: Mapped[int] = mapped_column(BigInteger)
    last_heartbeat_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: barrier the job is working on or last finished
    current_barrier: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: fencing token of the job's newest attempt (bumped when a run starts): PROCESSED and
    #: WRITTEN reports carrying an older token come from a zombie and are refused
    fencing_token: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    #: Spark Connect session id of the newest attempt (``None`` on the submit engine): the next
    #: attempt interrupts what it left running on the server
    spark_session: Mapped[str | None] = mapped_column(String(64), nullable=True)


class JobSourceRow(Base):
    """FLIP-276 ``/register/source``: the job reads the table."""

    __tablename__ = "tsb_job_source"

    job_id: Mapped[str] = mapped_column(ForeignKey("tsb_job.id", ondelete="CASCADE"), primary_key=True)
    table_id: Mapped[int] = mapped_column(ForeignKey("tsb_table.id"), primary_key=True, index=True)


class JobSinkRow(Base):
    """FLIP-276 ``/register/sink``: the job writes the table.

    The unique constraint on ``table_id`` makes a second writer impossible even when two
    registrations race on a database without the registry lock.
    """

    __tablename__ = "tsb_job_sink"
    __table_args__ = (UniqueConstraint("table_id"),)

    job_id: Mapped[str] = mapped_column(ForeignKey("tsb_job.id", ondelete="CASCADE"), primary_key=True)
    table_id: Mapped[int] = mapped_column(ForeignKey("tsb_table.id"), primary_key=True)


class RegistryLockRow(Base):
    """One row locked by every registration, so cycle checks see a stable graph."""

    __tablename__ = "tsb_registry_lock"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0)


class BarrierRow(Base):
    """A timestamp barrier of a topology (FLIP-276 "Timestamp Barrier")."""

    __tablename__ = "tsb_barrier"
    __table_args__ = (UniqueConstraint("topology", "run_key"),)

    topology: Mapped[str] = mapped_column(ForeignKey("tsb_topology.name"), primary_key=True)
    barrier_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    #: barrier timestamp, epoch ms: system time, or the event-time watermark
    ts_ms: Mapped[int] = mapped_column(BigInteger)
    #: ``system`` or ``event``
    ts_kind: Mapped[str] = mapped_column(String(10))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    #: idempotency key (e.g. the Airflow DAG run id): a retried generation returns the same barrier
    run_key: Mapped[str | None] = mapped_column(String(250), nullable=True)
    #: the last barrier of a bounded input (FLIP-147 "end of input"): streaming jobs stop after it
    final: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class TableBarrierRow(Base):
    """State of one barrier in one table: PROCESSED (staged) or WRITTEN (Delta version exists).

    Root tables get a WRITTEN row at every barrier, holding the Delta version recorded when
    the barrier was generated: together these rows are the (barrier, offset) map that makes
    replay deterministic.
    """

    __tablename__ = "tsb_table_barrier"
    __table_args__ = (
        Index("ix_tsb_table_barrier_state", "table_id", "state", "barrier_id"),
        Index("ix_tsb_table_barrier_version", "table_id", "version"),
    )

    table_id: Mapped[int] = mapped_column(ForeignKey("tsb_table.id"), primary_key=True)
    barrier_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    state: Mapped[str] = mapped_column(String(10))
    #: Delta version tagged with the barrier (WRITTEN), or None while PROCESSED
    version: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    job_id: Mapped[str | None] = mapped_column(String(250), nullable=True)
    processed_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    written_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: staged-file manifest of a PROCESSED barrier: {"mode": ..., "files": [...], ...}
    manifest: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    #: Delta versions of the inputs read for this barrier, {table name: version}
    inputs: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    #: live data files of the table at ``version`` and their total size in bytes, as the barrier's
    #: commit recorded them (readers verify them); None: not recorded
    file_count: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    size_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class WithdrawnStagingRow(Base):
    """A staged attempt directory whose PROCESSED manifest is no longer served.

    Written when a manifest is replaced (a rerun's PROCESSED), cleared (WRITTEN, a failure) or
    rolled back. READ_COMMITTED readers may still hold the withdrawn manifest, so the files are
    deleted only after the staging grace period and while no lease taken before the withdrawal
    pins the table (docs/design.md "Staged files: withdrawal before deletion").
    """

    __tablename__ = "tsb_withdrawn_staging"

    table_id: Mapped[int] = mapped_column(ForeignKey("tsb_table.id"), primary_key=True)
    #: attempt directory, relative to the table root (``tsb_staging/<job>/<epoch>/<barrier>/<attempt>``)
    path: Mapped[str] = mapped_column(String(700), primary_key=True)
    barrier_id: Mapped[int] = mapped_column(BigInteger)
    job_id: Mapped[str | None] = mapped_column(String(250), nullable=True)
    withdrawn_at_ms: Mapped[int] = mapped_column(BigInteger, index=True)


class JobBarrierRow(Base):
    """Timing of one job run for one barrier (for delays and the bottleneck view)."""

    __tablename__ = "tsb_job_barrier"

    job_id: Mapped[str] = mapped_column(ForeignKey("tsb_job.id", ondelete="CASCADE"), primary_key=True)
    barrier_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    started_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    finished_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    status: Mapped[str] = mapped_column(String(20))
    attempts: Mapped[int] = mapped_column(Integer, default=1)


class LeaseRow(Base):
    """A reader's lease on the versions it resolved: snapshot expiry keeps them."""

    __tablename__ = "tsb_lease"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(250), nullable=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    expires_at_ms: Mapped[int] = mapped_column(BigInteger, index=True)


class LeaseVersionRow(Base):
    """The Delta versions ``[from_version, version]`` of one table pinned by a lease.

    A reader's lease pins one version (``from_version`` is None); a running job's input lease
    pins the range its epoch reads (the previous barrier's version through this barrier's).
    """

    __tablename__ = "tsb_lease_version"
    __table_args__ = (Index("ix_tsb_lease_version_table", "table_id", "version"),)

    lease_id: Mapped[str] = mapped_column(ForeignKey("tsb_lease.id", ondelete="CASCADE"), primary_key=True)
    table_id: Mapped[int] = mapped_column(ForeignKey("tsb_table.id"), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger)
    #: first version of a pinned range (None: only ``version``)
    from_version: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class TableExpiryRow(Base):
    """What snapshot expiry has expired in one table (docs/design.md "Snapshot expiry").

    A Delta version ``v`` is expired when ``v < horizon`` and ``v`` is in none of the ``kept``
    ranges. Expiry writes this row (under the table row's lock, in the transaction that reads
    the live leases) before it vacuums; lease creation and resolution read it under the same
    lock and refuse expired versions. Expired versions never come back: each expiry keeps a
    subset of what the previous one kept.
    """

    __tablename__ = "tsb_table_expiry"

    table_id: Mapped[int] = mapped_column(ForeignKey("tsb_table.id"), primary_key=True)
    #: versions at or above it are not expired
    horizon: Mapped[int] = mapped_column(BigInteger)
    #: ``[[from, to], ...]``: sorted, disjoint version ranges below ``horizon`` that are kept
    kept: Mapped[list[list[int]]] = mapped_column(JSON)
    #: the retention of the last expiry: newest WRITTEN barriers kept
    keep_barriers: Mapped[int] = mapped_column(Integer)
    #: the last expiry's retention policy ``{"keep_last", "hourly_hours", "daily_days"}``
    retention: Mapped[dict[str, int] | None] = mapped_column(JSON, nullable=True)
    expired_at_ms: Mapped[int] = mapped_column(BigInteger)


class RevisionRow(Base):
    """A revision (rollback) of tables of a topology to a barrier, recorded as a plan before any
    table is touched (docs/design.md "Revision"); ``status`` is ``pending`` until every table of
    the plan is restored, then ``done``."""

    __tablename__ = "tsb_revision"
    __table_args__ = (Index("ix_tsb_revision_topology_status", "topology", "status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    topology: Mapped[str] = mapped_column(ForeignKey("tsb_topology.name"))
    #: the table the revision was asked for (its downstream tables are in the plan too)
    table_name: Mapped[str] = mapped_column(String(400))
    #: the barrier the tables go back to; 0 = reprocess: the tables are emptied
    barrier_id: Mapped[int] = mapped_column(BigInteger)
    reprocess: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    #: ``pending`` | ``done``
    status: Mapped[str] = mapped_column(String(20))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    finished_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: the last error of a run that did not finish (kept until the revision is done)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class RevisionTableRow(Base):
    """One table of a revision plan, with the step it is at (``pending`` | ``done``)."""

    __tablename__ = "tsb_revision_table"

    revision_id: Mapped[int] = mapped_column(ForeignKey("tsb_revision.id", ondelete="CASCADE"), primary_key=True)
    table_id: Mapped[int] = mapped_column(ForeignKey("tsb_table.id"), primary_key=True, index=True)
    #: upstream first: the order the tables are restored in
    position: Mapped[int] = mapped_column(Integer)
    #: the Delta version tagged with the barrier when the plan was made (None: reprocess)
    target_version: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: the job writing the table, and its streaming checkpoint directory (reset by the revision)
    job_id: Mapped[str | None] = mapped_column(String(250), nullable=True)
    checkpoint: Mapped[str | None] = mapped_column(Text, nullable=True)
    status: Mapped[str] = mapped_column(String(20))
    #: the table's latest Delta version after its restore (or truncation)
    restored_version: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class RecipientRow(Base):
    """A Delta Sharing recipient: a bearer token of its own, scoped to one share, read-only,
    expiring and revocable (Delta Sharing PROTOCOL.md "Profile File Format"). Only the token's
    SHA-256 digest is stored: the token itself is shown once, in the profile file."""

    __tablename__ = "tsb_recipient"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(250))
    #: the share it reads, as the Delta Sharing server names it (a topology or barrier domain,
    #: with ``--read-committed`` for that variant)
    share: Mapped[str] = mapped_column(String(300), index=True)
    #: hex SHA-256 of the bearer token
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    #: the Airflow user who created it
    created_by: Mapped[str] = mapped_column(String(250))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    expires_at_ms: Mapped[int] = mapped_column(BigInteger)
    revoked_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class EmitterRow(Base):
    """The barrier emitter that owns a topology's barrier generation (one at a time): who, and
    until when its lease runs. A second emitter waits as a standby until the lease lapses."""

    __tablename__ = "tsb_emitter"

    topology: Mapped[str] = mapped_column(String(250), primary_key=True)
    #: the emitter: its DAG run's run-key prefix (``<dag_id>/<run_id>``) and process
    owner: Mapped[str] = mapped_column(String(500))
    started_at_ms: Mapped[int] = mapped_column(BigInteger)
    heartbeat_ms: Mapped[int] = mapped_column(BigInteger)
    lease_until_ms: Mapped[int] = mapped_column(BigInteger)
