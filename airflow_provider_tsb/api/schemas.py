"""Pydantic models of the tsb REST API (FLIP-276 "MetaService" endpoints).

Times are epoch milliseconds (UTC), versions are Delta table versions, barrier ids are integers
strictly increasing per topology. Free-text fields refuse control characters and text that is
not valid UTF-8, so no client input can reach the database in a form it would reject.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from airflow_provider_tsb.consistency import MAX_REQUEST_WAIT_S, ReadOptions

#: Largest integer accepted for barrier ids, versions and similar (fits a signed BIGINT).
MAX_INT = 2**62


def _clean_text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text must be valid UTF-8 ({exc.reason} at position {exc.start})") from None
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise ValueError(f"text must not contain control characters (found {bad!r})")
    return value


#: Text without control characters, valid UTF-8.
SafeText = Annotated[str, AfterValidator(_clean_text)]
#: A non-negative integer that fits the database.
BarrierId = Annotated[int, Field(ge=0, le=MAX_INT)]


class ErrorOut(BaseModel):
    """Every error answer: ``detail`` names what is wrong; ``error`` is the exception class."""

    detail: Any = Field(description="human-readable message (a list of problems for 422 validation errors)")
    error: str | None = Field(None, description="tsb exception class, e.g. UnknownTableError")
    table: str | None = Field(None, description="table at fault (DoubleWriterError)")
    jobs: list[str] | None = Field(None, description="the two writer jobs (DoubleWriterError)")
    cycle: list[str] | None = Field(None, description="the cycle path, first node repeated (CycleError)")


class RegisterBody(BaseModel):
    """Optional body of ``POST /register/source|sink/...``.

    A job is created on its first registration; ``topology`` is then required unless the table
    is registered already (the job joins the table's topology).
    """

    model_config = ConfigDict(extra="forbid")

    topology: SafeText | None = Field(None, max_length=250, description="topology of the job (new jobs)")
    location: SafeText | None = Field(
        None, min_length=1, max_length=4000, description="Delta table location (new tables)"
    )
    application: SafeText | None = Field(None, max_length=4000, description="Spark application path (new jobs)")
    root: bool = Field(
        False, description="register/source only: create the source as a root table when it is unknown"
    )


class JobOut(BaseModel):
    """A registered job."""

    id: str
    topology: str
    application: str
    status: str = Field(description="registered | running | succeeded | failed")
    registered_at_ms: int
    last_heartbeat_ms: int | None
    current_barrier: int | None
    sources: list[str]
    sinks: list[str]
    stale: bool = Field(False, description="running but silent for longer than stale_after_s")


class UnregisterOut(BaseModel):
    """Answer of ``POST /unregister/{job_id}``."""

    job_id: str
    unregistered: bool


class TableVersionOut(BaseModel):
    """What to read of one table."""

    version: int | None = Field(description="Delta version (None: the table has no version yet)")
    barrier: int | None = Field(description="barrier of that version (None when untagged)")
    state: str = Field(description="WRITTEN, PROCESSED (READ_COMMITTED: apply `staged`) or LATEST")
    location: str
    staged: dict[str, Any] | None = Field(
        None, description='PROCESSED manifest {"mode": "append"|"overwrite", "files": [...], "removes": [...]} '
        'to apply on `version` ("removes": the files a merge rewrites, absent otherwise)'
    )
    file_count: int | None = Field(
        None, description="live data files of `version` as the barrier's commit recorded them (readers verify "
        "them against the Delta log; None: not recorded)"
    )
    size_bytes: int | None = Field(None, description="their total size, bytes (None: not recorded)")


class LeaseOut(BaseModel):
    """A lease pinning the returned versions against snapshot expiry."""

    id: str
    expires_at_ms: int | None


class VersionsOut(BaseModel):
    """Consistent versions of a set of tables."""

    level: str
    barrier: int | None = Field(description="barrier all tables are read at (None at READ_UNCOMMITTED)")
    as_of: int | None = None
    tables: dict[str, TableVersionOut]
    lease: LeaseOut | None = None


class SingleVersionOut(TableVersionOut):
    """``GET /version/...``: the version of one table at a level."""

    table: str
    level: str


class VersionsRequest(BaseModel):
    """Body of ``POST /versions``."""

    model_config = ConfigDict(extra="forbid")

    tables: list[Annotated[SafeText, Field(max_length=400)]] = Field(
        min_length=1, max_length=1000, description="catalog.database.table names (Q)"
    )
    level: SafeText = Field(
        "REPEATABLE_READ", max_length=64,
        description="READ_UNCOMMITTED | READ_COMMITTED | REPEATABLE_READ (also read-committed style)",
    )
    as_of: BarrierId | None = Field(None, description="AS OF barrier n (REPEATABLE_READ only)")
    min_barrier: BarrierId | None = Field(None, description="last seen barrier: never answer an older one")
    lease_seconds: float | None = Field(
        None, gt=0, le=366 * 86400, allow_inf_nan=False,
        description="pin the versions for this many seconds (at most [tsb] max_lease_seconds, default 6 h)",
    )
    lease_holder: SafeText | None = Field(None, max_length=250)
    max_staleness_s: float | None = Field(
        None, ge=0, le=366 * 86400, allow_inf_nan=False,
        description="bounded staleness: the newest COMMIT barrier only if at most this many seconds old, "
        "else 409 StaleReadError naming the lagging tables and jobs (REPEATABLE_READ, no as_of)",
    )
    wait_s: float | None = Field(
        None, ge=0, le=MAX_REQUEST_WAIT_S, allow_inf_nan=False,
        description=f"with max_staleness_s: wait up to this many seconds (at most {MAX_REQUEST_WAIT_S:g}) for a "
        "fresh barrier",
    )

    def to_options(self) -> ReadOptions:
        """The request's :class:`ReadOptions` (raises ValueError on inconsistent options)."""
        return ReadOptions(
            self.level, self.as_of, self.min_barrier, self.lease_seconds, self.lease_holder, self.max_staleness_s,
            self.wait_s,
        )


class TopologyNode(BaseModel):
    """A node of the topology graph."""

    id: str = Field(description="'table:<name>' or 'job:<id>'")
    kind: str = Field(description="table | job")
    name: str
    role: str | None = Field(None, description="tables: root | intermediate | unknown")


class TopologyEdge(BaseModel):
    """A read (table -> job) or write (job -> table) edge."""

    source: str
    target: str


class TopologyTable(BaseModel):
    """A table with its newest WRITTEN barrier."""

    role: str
    location: str | None
    writer: str | None
    readers: list[str]
    written_barrier: int | None = Field(description="newest WRITTEN barrier")
    version: int | None = Field(description="Delta version of that barrier")
    written_at_ms: int | None
    lag: int | None = Field(description="barriers behind the topology's newest barrier (None: never written)")
    freshness_target_s: float | None = Field(None, description="freshness target, seconds (None: none)")
    freshness_lag_s: float | None = Field(None, description="seconds behind the newest generated barrier")
    freshness_missed: bool = Field(False, description="freshness_lag_s > freshness_target_s")
    bottleneck: str | None = Field(None, description="upstream job furthest behind while the table lags")


class TopologyJob(BaseModel):
    """A job with its liveness."""

    application: str
    status: str
    last_heartbeat_ms: int | None
    current_barrier: int | None
    stale: bool
    sources: list[str]
    sinks: list[str]
    message: str | None = Field(
        None, description="why the job failed: the error text of its newest failure, from the job's record "
        "in the metastore (cleared when it succeeds again)")
    log_url: str | None = Field(
        None, description="Airflow UI URL of the newest task instance of the job's task (its Logs tab shows "
        "that try's log); null outside Airflow or before the task ran")


class TopologySummary(BaseModel):
    """An item of ``GET /topologies``: a topology the user may read."""

    name: str
    dags: list[str] = Field(description="ids of the Airflow DAGs that run it (write its tables)")
    newest_barrier: int | None
    newest_barrier_ts_ms: int | None


class TopologyOut(BaseModel):
    """``GET /topology``."""

    name: str
    newest_barrier: int | None
    newest_barrier_ts_ms: int | None
    nodes: list[TopologyNode]
    edges: list[TopologyEdge]
    tables: dict[str, TopologyTable]
    jobs: dict[str, TopologyJob]


class BarrierOut(BaseModel):
    """A timestamp barrier."""

    topology: str
    barrier: int
    ts_ms: int
    ts_kind: str
    created_at_ms: int
    run_key: str | None
    root_versions: dict[str, int]


class BarrierPage(BaseModel):
    """A page of barriers, newest first; pass ``next_before`` as ``before`` for the next page."""

    topology: str
    items: list[BarrierOut]
    next_before: int | None


class TableStateOut(BaseModel):
    """State of one barrier in one table."""

    barrier: int
    state: str
    version: int | None
    job_id: str | None
    processed_at_ms: int | None
    written_at_ms: int | None
    staged: dict[str, Any] | None = None


class LevelVersion(BaseModel):
    """The consistent version of a table at one level, or why there is none."""

    barrier: int | None = None
    version: int | None = None
    state: str | None = None
    error: str | None = Field(None, description="why the level has no answer (e.g. nothing WRITTEN yet)")


class TableBarriersOut(BaseModel):
    """``GET /tables/{catalog}/{database}/{table}/barriers``."""

    table: str
    topology: str
    items: list[TableStateOut]
    next_before: int | None
    consistent: dict[str, LevelVersion] = Field(description="per level: the version a reader of this table gets")


class TableDelay(BaseModel):
    """Delay of one table at one barrier."""

    state: str
    delay_ms: int | None = Field(description="barrier generation -> WRITTEN (None while not WRITTEN)")


class JobDelay(BaseModel):
    """Processing delay of one job at one barrier."""

    delay_ms: int | None = Field(description="its sinks' WRITTEN minus its latest input WRITTEN")
    written_at_ms: int | None


class BarrierDelay(BaseModel):
    """Delays of one barrier."""

    barrier: int
    ts_ms: int
    created_at_ms: int
    complete: bool = Field(description="WRITTEN in every non-root table")
    end_to_end_ms: int | None = Field(description="generation -> last table WRITTEN (None while incomplete)")
    tables: dict[str, TableDelay]
    jobs: dict[str, JobDelay]
    bottleneck: str | None = Field(description="job with the largest processing delay")


class DelaysOut(BaseModel):
    """``GET /delays``: newest barriers first."""

    topology: str
    barriers: list[BarrierDelay]
    next_before: int | None


class TableFreshnessOut(BaseModel):
    """Freshness of one non-root table (metastore/freshness.py)."""

    table: str
    writer: str | None
    target_s: float | None = Field(description="freshness target, seconds (None: no target)")
    lag_s: float = Field(description="seconds the committed content is behind the newest generated barrier")
    missed: bool = Field(description="target_s is set and lag_s > target_s")
    committed_barrier: int | None = Field(description="newest COMMIT (WRITTEN) barrier of the table")
    processed_barrier: int | None = Field(description="newest barrier PROCESSED or WRITTEN")
    bottleneck: str | None = Field(description="upstream job furthest behind (None while up to date)")


class JobFreshnessOut(BaseModel):
    """One job's own lag behind its inputs."""

    job: str
    status: str
    current_barrier: int | None
    written_barrier: int | None = Field(description="newest barrier WRITTEN in all its sinks")
    ready_barrier: int | None = Field(description="newest barrier WRITTEN in all its inputs")
    lag_s: float = Field(description="seconds since its inputs made its first unwritten barrier available")


class FreshnessOut(BaseModel):
    """``GET /freshness``: every non-root table's lag against its target and the bottleneck jobs."""

    topology: str
    measured_at_ms: int
    newest_barrier: int | None
    newest_barrier_age_s: float | None = Field(description="seconds since the newest barrier was generated")
    missed: list[str] = Field(description="tables that miss their freshness target")
    tables: dict[str, TableFreshnessOut]
    jobs: dict[str, JobFreshnessOut]
