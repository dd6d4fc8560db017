"""REST endpoints of the MetaService (FLIP-276 "MetaService": registration and versions).

:data:`router` is a FastAPI ``APIRouter`` without authentication; the plugin mounts it behind
Airflow's auth at ``/tsb/api/v1``::

    from airflow_provider_tsb.api.routes import install_exception_handlers, router as metaservice_router
    api_router.include_router(metaservice_router)       # api_router carries Depends(get_current_user)
    app.include_router(api_router)
    install_exception_handlers(app)

Endpoints (relative to the mount point):
* ``POST /register/source/{job_id}/{catalog}/{database}/{table}``, ``POST /register/sink/...``:
  add a source / sink to a job, creating the job on its first registration (FLIP-276
  ``/register/source``, ``/register/sink``);
* ``POST /unregister/{job_id}`` (FLIP-276 ``/unregister``);
* ``GET /version/{consistency_type}/{catalog}/{database}/{table}`` (FLIP-276 ``/version``);
* ``POST /versions``: consistent versions of a set of tables, with AS OF, monotonic reads
  (``min_barrier``) and leases;
* ``GET /topologies`` (those the user may read), ``/topology``, ``/barriers``, ``/tables/{catalog}/
  {database}/{table}/barriers``, ``/delays``, ``/freshness``: lineage, barriers, delays, lag.

Authorization (:mod:`~airflow_provider_tsb.api.access`, from :func:`get_access`): reads need read
access to every DAG of the topology, changes (registrations, leases) edit access.

Errors (:mod:`airflow_provider_tsb.api.errors`) are JSON ``{"detail": message, "error": exception
class}``: 403 not allowed, 404 unknown name, 409 conflict, 410 expired, 413 body too large, 422 bad
input, 503 metastore unreachable (after ``[tsb] request_retry_seconds``). Every route maps errors itself
(:class:`TsbRoute`); :func:`install_exception_handlers` does it for anything raised outside them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query, Request, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from airflow_provider_tsb.api.access import EDIT, READ, AllowAll, TopologyAccess
from airflow_provider_tsb.api.errors import (
    TsbRoute,
    client_errors,
    error_response,
    install_exception_handlers,
    status_for,
)
from airflow_provider_tsb.api.lease_budget import budgeted
from airflow_provider_tsb.api.limits import DEFAULT_MAX_BODY_BYTES, BodySizeLimitMiddleware, max_lease_seconds
from airflow_provider_tsb.api.registration import register
from airflow_provider_tsb.api.schemas import (
    MAX_INT,
    BarrierDelay,
    BarrierOut,
    BarrierPage,
    DelaysOut,
    ErrorOut,
    FreshnessOut,
    JobOut,
    LevelVersion,
    RegisterBody,
    SingleVersionOut,
    TableBarriersOut,
    TableStateOut,
    TopologyEdge,
    TopologyJob,
    TopologyNode,
    TopologyOut,
    TopologySummary,
    TopologyTable,
    UnregisterOut,
    VersionsOut,
    VersionsRequest,
)
from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.consistency import ConsistencyLevel, ReadOptions
from airflow_provider_tsb.exceptions import BadRequestError, TsbError, UnknownJobError, UnknownTopologyError
from airflow_provider_tsb.metastore.records import JobStatus
from airflow_provider_tsb.metastore.store import MetaStore, now_ms
from airflow_provider_tsb.names import normalize_table_name, validate_job_id

__all__ = ["configured_store", "create_metaservice_app", "error_response", "get_access", "get_store",
           "install_exception_handlers",
           "router", "status_for"]


#: seconds the api-server keeps the metastore it resolved (``$TSB_METASTORE_URL`` or the
#: ``tsb_default`` connection, which may be a query of Airflow's database or a secrets backend)
STORE_LOOKUP_SECONDS = 30.0
#: the requests' store per engine URL, and under ``""`` the one resolved last: (when, store)
_stores: dict[str, Any] = CACHES.add("api.stores", {})


def configured_store() -> MetaStore:
    """The metastore of the Airflow deployment: ``TsbMetastoreHook().get_conn()``'s engine, with
    calls retried for ``[tsb] request_retry_seconds`` (:func:`.limits.request_retry_seconds`);
    resolved again after :data:`STORE_LOOKUP_SECONDS` (one engine and pool per URL and process)."""
    resolved = _stores.get("")
    if resolved is not None and time.monotonic() - resolved[0] < STORE_LOOKUP_SECONDS:
        return resolved[1]
    from airflow_provider_tsb.api.limits import request_retry_seconds
    from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook

    engine = TsbMetastoreHook().get_conn().engine
    store = _stores.get(key := engine.url.render_as_string(hide_password=False))
    if store is None or store.engine is not engine:
        store = _stores[key] = MetaStore(engine, retry_s=request_retry_seconds())
    _stores[""] = (time.monotonic(), store)
    return store


async def get_store(request: Request) -> MetaStore:
    """Dependency: the metastore: the app's ``state.tsb_store`` when set (standalone apps, tests),
    else :func:`configured_store`.

    The app's state, not FastAPI's ``dependency_overrides``: with any override FastAPI analyses
    every dependency's signature again on every request (docs/benchmarks.md). A coroutine, so
    FastAPI runs it on the event loop instead of handing it to a worker thread and back (such
    hops are a large share of a sharing query's CPU); the lookup of the Airflow connection,
    which may block, runs in a worker thread, once per :data:`STORE_LOOKUP_SECONDS`."""
    store: MetaStore | None = getattr(request.app.state, "tsb_store", None)
    if store is not None:
        return store
    resolved = _stores.get("")
    if resolved is not None and time.monotonic() - resolved[0] < STORE_LOOKUP_SECONDS:
        return resolved[1]
    return await run_in_threadpool(configured_store)


StoreDep = Annotated[MetaStore, Depends(get_store)]

#: ``(request, store) -> TopologyAccess``: the app's authorization policy (``app.state.tsb_access``)
AccessFactory = Callable[[Request, MetaStore], TopologyAccess]


async def get_access(request: Request, store: StoreDep) -> TopologyAccess:
    """Dependency: the authorization policy of the request, built by the app's
    ``state.tsb_access`` (:data:`AccessFactory`, which must not block: it runs on the event
    loop, as :func:`get_store` does). Fails closed: an app must set it (the Airflow
    app to :class:`~airflow_provider_tsb.api.airflow_access.AirflowTopologyAccess`,
    :func:`create_metaservice_app` to :class:`~airflow_provider_tsb.api.access.AllowAll`)."""
    factory: AccessFactory | None = getattr(request.app.state, "tsb_access", None)
    if factory is None:
        raise RuntimeError("the tsb API has no authorization policy: set app.state.tsb_access in the app")
    return factory(request, store)


AccessDep = Annotated[TopologyAccess, Depends(get_access)]


_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "unknown table, job, barrier or topology"},
    410: {"model": ErrorOut, "description": "the barrier's versions were removed by snapshot expiry"},
    409: {"model": ErrorOut, "description": "conflict: double writer, cycle, or level not satisfiable"},
    422: {"model": ErrorOut, "description": "malformed name, unknown level or bad parameter"},
}

router = APIRouter(tags=["tsb-metaservice"], route_class=TsbRoute, responses=_ERRORS)

NamePart = Annotated[str, Path(min_length=1, max_length=128, description="identifier")]
JobIdPath = Annotated[str, Path(min_length=1, max_length=250, description="job id")]
TopologyQuery = Annotated[
    str | None, Query(min_length=1, max_length=250, description="topology name (optional when only one exists)")
]
BarrierQuery = Annotated[int | None, Query(ge=0, le=MAX_INT)]


def json_answer(answer: BaseModel) -> Response:
    """``answer`` as the JSON response, serialized once: FastAPI would validate a returned model
    against the route's ``response_model`` again and then serialize it (work that shows in the
    CPU of a ``GET /delays``, docs/benchmarks.md "REST API under many readers"). The route keeps
    its ``response_model`` for the OpenAPI schema."""
    return Response(answer.model_dump_json(), media_type="application/json")


def _table_name(catalog: str, database: str, table: str) -> str:
    return normalize_table_name(f"{catalog}.{database}.{table}")


def _pick_topology(store: MetaStore, access: TopologyAccess, name: str | None) -> str:
    """The topology named (which the user must be allowed to read), or the only one the user may read."""
    if name is not None:
        validate_job_id(name, what="topology name")
        access.require(READ, [name])
        if name not in store.registry.topologies():
            raise UnknownTopologyError(
                f"topology {name!r} is not registered; known: {access.visible(store.registry.topologies())}"
            )
        return name
    names = access.visible(store.registry.topologies())
    if len(names) == 1:
        return names[0]
    if not names:
        raise UnknownTopologyError("no topology is registered yet (or none you may read)")
    raise BadRequestError(f"several topologies are registered ({names}); choose one with the topology name parameter")


def _require_tables(store: MetaStore, access: TopologyAccess, method: Literal["GET", "PUT"], names: list[str]) -> None:
    """The user may ``method`` the topologies of tables ``names``; unknown tables need the
    "all DAGs" permission (so a 404 tells a restricted user nothing)."""
    if access.allows_everything:
        return
    found = access.topologies_of(store, names)  # one query for all of Q (or none: kept by the access policy)
    if any(normalize_table_name(n) not in found for n in names):
        access.require_all_dags(method)
    access.require(method, list(dict.fromkeys(found.values())))


# ------------------------------------------------------------------ FLIP-276 registration
@router.post("/register/source/{job_id}/{catalog}/{database}/{table}", response_model=JobOut)
def register_source(
    store: StoreDep, access: AccessDep, job_id: JobIdPath, catalog: NamePart, database: NamePart, table: NamePart,
    body: Annotated[RegisterBody | None, Body()] = None,
) -> JobOut:
    """FLIP-276 ``/register/source``: job ``job_id`` reads ``catalog.database.table``.

    Creates the job on its first registration (topology: ``body.topology`` or the table's).
    Needs edit access to the topology's DAGs (403). Errors: 404 unknown table (unless ``root``),
    409 cycle / table of another topology / root table refused, 422 bad names or location.
    """
    with client_errors():
        return register(store, access, "source", job_id, _table_name(catalog, database, table), body)


@router.post("/register/sink/{job_id}/{catalog}/{database}/{table}", response_model=JobOut)
def register_sink(
    store: StoreDep, access: AccessDep, job_id: JobIdPath, catalog: NamePart, database: NamePart, table: NamePart,
    body: Annotated[RegisterBody | None, Body()] = None,
) -> JobOut:
    """FLIP-276 ``/register/sink``: job ``job_id`` writes ``catalog.database.table``.

    Creates the job on its first registration and the table (intermediate, at ``location``) if
    unknown. Needs edit access to the topology's DAGs (403). Errors: 409 DoubleWriterError (names
    both jobs) / CycleError (shows the cycle) / root table as sink / table of another topology,
    422 bad names, missing topology, or a location outside ``[tsb] allowed_location_roots``.
    """
    with client_errors():
        return register(store, access, "sink", job_id, _table_name(catalog, database, table), body)


@router.post("/unregister/{job_id}", response_model=UnregisterOut)
def unregister(store: StoreDep, access: AccessDep, job_id: JobIdPath) -> UnregisterOut:
    """FLIP-276 ``/unregister``: remove the job's registration (its tables and data stay).

    Needs edit access to the job's topology's DAGs (403); 404 if unknown."""
    validate_job_id(job_id)
    try:
        info = store.registry.job(job_id)
    except UnknownJobError:
        access.require_all_dags(EDIT)
        raise UnknownJobError(f"job {job_id!r} is not registered; nothing to unregister") from None
    access.require(EDIT, [info.topology])
    if not store.registry.unregister_job(job_id):
        raise UnknownJobError(f"job {job_id!r} is not registered; nothing to unregister")
    return UnregisterOut(job_id=job_id, unregistered=True)


# ------------------------------------------------------------------ versions
@router.get("/version/{consistency_type}/{catalog}/{database}/{table}", response_model=SingleVersionOut)
def get_version(
    store: StoreDep,
    access: AccessDep,
    consistency_type: Annotated[str, Path(min_length=1, max_length=64)],
    catalog: NamePart, database: NamePart, table: NamePart,
    as_of: BarrierQuery = None,
    min_barrier: BarrierQuery = None,
) -> SingleVersionOut:
    """FLIP-276 ``/version``: the Delta version of one table at a consistency level.

    ``consistency_type``: ``READ_UNCOMMITTED``, ``READ_COMMITTED``, ``REPEATABLE_READ`` (or
    ``read-committed`` style). Errors: 404 unknown table, 409 no barrier satisfies the level,
    422 unknown level.
    """
    with client_errors():
        level = ConsistencyLevel.parse(consistency_type)
        name = _table_name(catalog, database, table)
        _require_tables(store, access, READ, [name])
        res = store.resolution.resolve([name], ReadOptions(level, as_of=as_of, min_barrier=min_barrier))
    tv = res.tables[name]
    return SingleVersionOut(
        table=name, level=level.value, version=tv.version, barrier=tv.barrier, state=tv.state,
        location=tv.location, staged=tv.staged, file_count=tv.file_count, size_bytes=tv.size_bytes,
    )


@router.post("/versions", response_model=VersionsOut)
def post_versions(store: StoreDep, access: AccessDep, request: VersionsRequest, http: Request) -> Response:
    """Consistent versions of tables Q at a level (FLIP-276 "Data Consistency Type").

    Body: ``tables``, ``level``, ``as_of`` (AS OF barrier n), ``min_barrier`` (monotonic reads:
    409 when the newest consistent barrier is older), ``lease_seconds`` (pin the versions; at
    most ``[tsb] max_lease_seconds``, 422 above; 429 past the user's ``[tsb] max_leased_versions``),
    ``max_staleness_s`` and ``wait_s`` (bounded
    staleness: 409 ``StaleReadError`` naming the lagging tables and their writer jobs when the
    newest COMMIT barrier stays older). Reading needs read access to the tables' topologies'
    DAGs, a lease edit access (403).
    """
    with client_errors():
        names = [normalize_table_name(t) for t in request.tables]
        _require_tables(store, access, EDIT if request.lease_seconds is not None else READ, names)
        limit = max_lease_seconds()
        if request.lease_seconds is not None and request.lease_seconds > limit:
            raise BadRequestError(
                f"lease_seconds={request.lease_seconds:g} is longer than the longest lease, {limit} s "
                "([tsb] max_lease_seconds); take a shorter lease and renew it"
            )
        res = store.resolution.resolve(request.tables, budgeted(store, http, request.to_options(), len(names)))
    return json_answer(VersionsOut.model_validate(res.to_dict()))


# ------------------------------------------------------------------ views
@router.get("/topologies", response_model=list[TopologySummary])
def get_topologies(store: StoreDep, access: AccessDep) -> list[TopologySummary]:
    """The topologies the user may read (read access to every DAG of each), by name, with the
    DAGs that run them and their newest barrier."""
    out = []
    for name in access.visible(store.registry.topologies()):
        newest = store.barriers.latest(name)
        out.append(TopologySummary(
            name=name, dags=sorted(access.dags_of(name)), newest_barrier=newest.barrier if newest else None,
            newest_barrier_ts_ms=newest.ts_ms if newest else None,
        ))
    return out


@router.get("/topology", response_model=TopologyOut)
def get_topology(
    store: StoreDep,
    access: AccessDep,
    name: TopologyQuery = None,
    stale_after_s: Annotated[float, Query(gt=0, le=10**7, allow_inf_nan=False)] = 300.0,
) -> TopologyOut:
    """The topology graph: nodes (tables with role, jobs), edges, per table its newest WRITTEN
    barrier, version and lag (barriers behind the topology's newest), per job status and a
    ``stale`` flag (running, no heartbeat for ``stale_after_s`` seconds); a failed job's error text
    (``message``) and, under Airflow, the URL of its newest task instance's log (``log_url``)."""
    topology = _pick_topology(store, access, name)
    tables = store.registry.tables(topology)
    io = store.registry.job_io(topology)
    jobs = {j.id: j for j in store.registry.jobs(topology)}
    newest = store.barriers.latest(topology)
    written = store.table_states.newest_written_by_table(topology)
    fresh = store.freshness.report(topology).tables
    nodes: list[TopologyNode] = []
    edges: list[TopologyEdge] = []
    out_tables: dict[str, TopologyTable] = {}
    for t in tables:
        nodes.append(TopologyNode(id=f"table:{t.name}", kind="table", name=t.name, role=t.kind))
        w = written.get(t.name)
        out_tables[t.name] = TopologyTable(
            role=t.kind, location=t.location, writer=t.writer, readers=list(t.readers),
            written_barrier=w.barrier if w else None, version=w.version if w else None,
            written_at_ms=w.written_at_ms if w else None,
            lag=(newest.barrier - w.barrier) if (w and newest) else None,
            **({"freshness_target_s": f.target_s, "freshness_lag_s": f.lag_s, "freshness_missed": f.missed,
                "bottleneck": f.bottleneck} if (f := fresh.get(t.name)) else {}),
        )
    now = now_ms()
    failed = {job_id: sinks for job_id, (_, sinks) in io.items() if jobs[job_id].status == JobStatus.FAILED}
    log_urls = access.task_log_urls(failed) if failed else {}
    out_jobs: dict[str, TopologyJob] = {}
    for job_id, (sources, sinks) in sorted(io.items()):
        j = jobs[job_id]
        nodes.append(TopologyNode(id=f"job:{job_id}", kind="job", name=job_id))
        edges.extend(TopologyEdge(source=f"table:{s}", target=f"job:{job_id}") for s in sources)
        edges.extend(TopologyEdge(source=f"job:{job_id}", target=f"table:{s}") for s in sinks)
        out_jobs[job_id] = TopologyJob(
            application=j.application, status=j.status, last_heartbeat_ms=j.last_heartbeat_ms,
            current_barrier=j.current_barrier, stale=j.is_stale(stale_after_s, now), sources=list(sources),
            sinks=list(sinks), message=j.message, log_url=log_urls.get(job_id),
        )
    return TopologyOut(
        name=topology, newest_barrier=newest.barrier if newest else None,
        newest_barrier_ts_ms=newest.ts_ms if newest else None, nodes=nodes, edges=edges, tables=out_tables,
        jobs=out_jobs,
    )


@router.get("/barriers", response_model=BarrierPage)
def get_barriers(
    store: StoreDep,
    access: AccessDep,
    topology: TopologyQuery = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: BarrierQuery = None,
) -> BarrierPage:
    """Barriers of a topology, newest first, ``limit`` per page; ``before`` pages backwards."""
    name = _pick_topology(store, access, topology)
    items = store.barriers.list(name, limit=limit, before=before)
    return BarrierPage(
        topology=name,
        items=[
            BarrierOut(
                topology=b.topology, barrier=b.barrier, ts_ms=b.ts_ms, ts_kind=b.ts_kind,
                created_at_ms=b.created_at_ms, run_key=b.run_key, root_versions=b.root_versions,
            )
            for b in items
        ],
        next_before=items[-1].barrier if len(items) == limit and items[-1].barrier > 1 else None,
    )


@router.get("/tables/{catalog}/{database}/{table}/barriers", response_model=TableBarriersOut)
def get_table_barriers(
    store: StoreDep, access: AccessDep, catalog: NamePart, database: NamePart, table: NamePart,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: BarrierQuery = None,
) -> TableBarriersOut:
    """One table's barrier states (newest first, paged by ``before``) and the version a reader of
    that table alone gets at each level (``error`` says why a level has no answer)."""
    with client_errors():
        name = _table_name(catalog, database, table)
        _require_tables(store, access, READ, [name])
        info = store.registry.table(name)
        history = store.table_states.history(name, limit=limit, before=before)
    consistent: dict[str, LevelVersion] = {}
    for level in ConsistencyLevel:
        try:
            res = store.resolution.resolve([name], level)
        except TsbError as exc:
            consistent[level.value] = LevelVersion(error=str(exc))
            continue
        tv = res.tables[name]
        consistent[level.value] = LevelVersion(barrier=tv.barrier, version=tv.version, state=tv.state)
    return TableBarriersOut(
        table=name, topology=info.topology,  # type: ignore[union-attr]
        items=[
            TableStateOut(
                barrier=h.barrier, state=h.state, version=h.version, job_id=h.job_id,
                processed_at_ms=h.processed_at_ms, written_at_ms=h.written_at_ms, staged=h.manifest,
            )
            for h in history
        ],
        next_before=history[-1].barrier if len(history) == limit and history[-1].barrier > 1 else None,
        consistent=consistent,
    )


@router.get("/delays", response_model=DelaysOut)
def get_delays(
    store: StoreDep,
    access: AccessDep,
    topology: TopologyQuery = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 20,
    before: BarrierQuery = None,
) -> Response:
    """Per barrier (newest ``limit``, paged by ``before``): the end-to-end delay from generation to
    WRITTEN per table, per job its own processing delay (its sinks' WRITTEN minus its latest
    input WRITTEN) and the bottleneck job. Cost is bounded by ``limit`` x tables, independent
    of the barrier history length."""
    name = _pick_topology(store, access, topology)
    items, next_before = store.delays.list(name, limit=limit, before=before)
    return json_answer(DelaysOut(
        topology=name, barriers=[BarrierDelay.model_validate(d, from_attributes=True) for d in items],
        next_before=next_before,
    ))


@router.get("/freshness", response_model=FreshnessOut)
def get_freshness(store: StoreDep, access: AccessDep, topology: TopologyQuery = None) -> FreshnessOut:
    """Every non-root table's lag behind the newest generated barrier (seconds), its freshness
    target, whether it misses it and the upstream job furthest behind; every job's own lag
    (:mod:`airflow_provider_tsb.metastore.freshness`). Needs read access to the topology's DAGs."""
    name = _pick_topology(store, access, topology)
    report = store.freshness.report(name)
    return FreshnessOut.model_validate(
        {**report.__dict__, "missed": report.missed,
         "tables": {k: v.__dict__ for k, v in report.tables.items()},
         "jobs": {k: v.__dict__ for k, v in report.jobs.items()}},
    )


def create_metaservice_app(
    store: MetaStore | None = None,
    prefix: str = "",
    *,
    access: TopologyAccess | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """A standalone FastAPI app serving :data:`router` at ``prefix`` (no auth; tests, benchmarks).

    Args:
        store: the metastore to serve (default: :func:`get_store`).
        prefix: mount point, e.g. ``/tsb/api/v1``.
        access: the authorization policy (default :class:`AllowAll`: everything, anywhere).
        max_body_bytes: largest request body (413 above).
    """
    app = FastAPI(title="airflow-provider-tsb MetaService", version="1")
    app.include_router(router, prefix=prefix)
    install_exception_handlers(app)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=max_body_bytes)
    if store is not None:
        app.state.tsb_store = store
    policy = access or AllowAll()
    app.state.tsb_access = lambda _request, _store: policy
    return app
