"""REST endpoints of the MetaService (FLIP-276 "MetaService": registration and versions).

:data:`router` is a FastAPI ``APIRouter`` without authentication; the plugin mounts it behind
Airflow's auth at ``/tsb/api/v1``::

    from airflow_provider_tsb.api.routes import install_exception_handlers, router as metaservice_router
    api_router.include_router(metaservice_router)       # api_router carries Depends(get_current_user)
    app.include_router(api_router)
    install_exception_handlers(app)

Endpoints (paths relative to the mount point):

* ``POST /register/source/{job_id}/{catalog}/{database}/{table}``, ``POST /register/sink/...``:
  add a source / sink to a job, creating the job on its first registration (FLIP-276
  ``/register/source``, ``/register/sink``);
* ``POST /unregister/{job_id}`` (FLIP-276 ``/unregister``);
* ``GET /version/{consistency_type}/{catalog}/{database}/{table}`` (FLIP-276 ``/version``);
* ``POST /versions``: consistent versions of a set of tables, with AS OF, monotonic reads
  (``min_barrier``) and leases;
* ``GET /topology``, ``GET /barriers``, ``GET /tables/{catalog}/{database}/{table}/barriers``,
  ``GET /delays``: the lineage graph, barrier history and delay views.

Errors are JSON ``{"detail": message, "error": exception class}``: unknown table / job /
barrier / topology -> 404; malformed names, unknown level, bad parameters -> 422;
DoubleWriterError, CycleError, InconsistentReadError (the level cannot be satisfied) and other
conflicts with the registered state -> 409; metastore unreachable -> 503. Every route maps
errors itself (see :class:`TsbRoute`), and :func:`install_exception_handlers` installs the
same mapping on an app for anything raised outside the routes.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.responses import Response

from airflow_provider_tsb.api.schemas import (
    MAX_INT,
    BarrierDelay,
    BarrierOut,
    BarrierPage,
    DelaysOut,
    ErrorOut,
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
    TopologyTable,
    UnregisterOut,
    VersionsOut,
    VersionsRequest,
)
from airflow_provider_tsb.client import BadRequestError, UnknownTopologyError
from airflow_provider_tsb.consistency import ConsistencyLevel, ReadOptions
from airflow_provider_tsb.exceptions import (
    BarrierNotReadyError,
    CycleError,
    DoubleWriterError,
    InconsistentReadError,
    MetastoreError,
    TopologyError,
    TsbError,
    UnknownJobError,
)
from airflow_provider_tsb.metastore.store import JobInfo, MetaStore, now_ms
from airflow_provider_tsb.names import normalize_table_name, validate_job_id
from airflow_provider_tsb.topology import Table


def get_store() -> MetaStore:
    """Dependency: the metastore (``TsbMetastoreHook().get_conn()``; override in tests/apps)."""
    from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook

    return TsbMetastoreHook().get_conn()


StoreDep = Annotated[MetaStore, Depends(get_store)]


# ------------------------------------------------------------------ error mapping
def status_for(exc: BaseException) -> int:
    """HTTP status of a tsb error (see module docstring)."""
    if isinstance(exc, LookupError):
        return 404
    if isinstance(exc, DoubleWriterError | CycleError | InconsistentReadError | BarrierNotReadyError | TopologyError):
        return 409
    if isinstance(exc, ValueError):
        return 422
    if isinstance(exc, MetastoreError):
        return 503
    if type(exc).__name__ == "DeltaLogError":
        return 409
    return 400


def error_response(exc: TsbError) -> JSONResponse:
    """The JSON answer for a tsb error (shape :class:`~airflow_provider_tsb.api.schemas.ErrorOut`)."""
    body: dict[str, Any] = {"detail": str(exc), "error": type(exc).__name__}
    if isinstance(exc, DoubleWriterError):
        body["table"] = exc.table
        body["jobs"] = list(exc.jobs)
    if isinstance(exc, CycleError):
        body["cycle"] = list(exc.cycle)
    return JSONResponse(body, status_code=status_for(exc))


async def _tsb_error_handler(request: Request, exc: Exception) -> Response:
    return error_response(exc)  # type: ignore[arg-type]


def install_exception_handlers(app: FastAPI) -> None:
    """Map every :class:`TsbError` raised by a route of ``app`` to its JSON error answer."""
    app.add_exception_handler(TsbError, _tsb_error_handler)


class TsbRoute(APIRoute):
    """Route class that answers tsb errors itself, so the router is correct in any app."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """Wrap the default handler: :class:`TsbError` -> :func:`error_response`."""
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except TsbError as exc:
                return error_response(exc)

        return guarded


@contextmanager
def _client_errors() -> Iterator[None]:
    """Plain ValueErrors raised on client input (e.g. as_of with READ_COMMITTED) become 422s."""
    try:
        yield
    except TsbError:
        raise
    except ValueError as exc:
        raise BadRequestError(str(exc)) from exc


_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "unknown table, job, barrier or topology"},
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


def _table_name(catalog: str, database: str, table: str) -> str:
    return normalize_table_name(f"{catalog}.{database}.{table}")


def _job_out(info: JobInfo, stale_after_s: float | None = None) -> JobOut:
    return JobOut(
        id=info.id, topology=info.topology, application=info.application, status=info.status,
        registered_at_ms=info.registered_at_ms, last_heartbeat_ms=info.last_heartbeat_ms,
        current_barrier=info.current_barrier, sources=list(info.sources), sinks=list(info.sinks),
        stale=info.is_stale(stale_after_s) if stale_after_s is not None else False,
    )


def _pick_topology(store: MetaStore, name: str | None) -> str:
    if name is not None:
        validate_job_id(name)
        if name not in store.topologies():
            raise UnknownTopologyError(f"topology {name!r} is not registered; known: {store.topologies()}")
        return name
    names = store.topologies()
    if len(names) == 1:
        return names[0]
    if not names:
        raise UnknownTopologyError("no topology is registered yet")
    raise BadRequestError(f"several topologies are registered ({names}); choose one with the topology name parameter")


# ------------------------------------------------------------------ FLIP-276 registration
def _register(
    store: MetaStore, kind: str, job_id: str, name: str, body: RegisterBody | None
) -> JobOut:
    validate_job_id(job_id)
    body = body or RegisterBody()
    if body.topology is not None:
        validate_job_id(body.topology)
    table = store.table(name, required=False)
    created = False
    try:
        job = store.job(job_id)
    except UnknownJobError:
        if kind == "source" and table is None and not body.root:
            raise UnknownJobError(
                f"cannot register source {name!r} for job {job_id!r}: neither the job nor the table is "
                "registered; register the table's writer first or pass root=true to create a root table"
            ) from None
        topology = body.topology or (table.topology if table is not None else None)
        if topology is None:
            raise BadRequestError(
                f"job {job_id!r} is not registered and table {name!r} is unknown: give 'topology' in the "
                "body to create the job"
            ) from None
        job = store.create_job(topology, job_id, body.application or "")
        created = True
    if body.topology is not None and body.topology != job.topology:
        raise TopologyError(
            f"job {job_id!r} is registered in topology {job.topology!r}, not {body.topology!r}"
        )
    try:
        if kind == "source":
            if table is None and body.root:
                store.register_table(job.topology, Table(name, "root", body.location))
            info = store.register_source(job_id, name)
        else:
            info = store.register_sink(job_id, name, location=body.location)
    except Exception:
        if created:
            store.unregister_job(job_id)
        raise
    return _job_out(info)


@router.post("/register/source/{job_id}/{catalog}/{database}/{table}", response_model=JobOut)
def register_source(
    store: StoreDep, job_id: JobIdPath, catalog: NamePart, database: NamePart, table: NamePart,
    body: Annotated[RegisterBody | None, Body()] = None,
) -> JobOut:
    """FLIP-276 ``/register/source``: job ``job_id`` reads ``catalog.database.table``.

    Creates the job on its first registration (topology: ``body.topology`` or the table's).
    Errors: 404 unknown table (unless ``root``), 409 cycle / other topology, 422 bad names.
    """
    with _client_errors():
        return _register(store, "source", job_id, _table_name(catalog, database, table), body)


@router.post("/register/sink/{job_id}/{catalog}/{database}/{table}", response_model=JobOut)
def register_sink(
    store: StoreDep, job_id: JobIdPath, catalog: NamePart, database: NamePart, table: NamePart,
    body: Annotated[RegisterBody | None, Body()] = None,
) -> JobOut:
    """FLIP-276 ``/register/sink``: job ``job_id`` writes ``catalog.database.table``.

    Creates the job on its first registration and the table (intermediate, at ``location``) if
    unknown. Errors: 409 DoubleWriterError (names both jobs) / CycleError (shows the cycle) /
    root table as sink, 422 bad names or missing topology.
    """
    with _client_errors():
        return _register(store, "sink", job_id, _table_name(catalog, database, table), body)


@router.post("/unregister/{job_id}", response_model=UnregisterOut)
def unregister(store: StoreDep, job_id: JobIdPath) -> UnregisterOut:
    """FLIP-276 ``/unregister``: remove the job's registration (its tables and data stay). 404 if unknown."""
    validate_job_id(job_id)
    if not store.unregister_job(job_id):
        raise UnknownJobError(f"job {job_id!r} is not registered; nothing to unregister")
    return UnregisterOut(job_id=job_id, unregistered=True)


# ------------------------------------------------------------------ versions
@router.get("/version/{consistency_type}/{catalog}/{database}/{table}", response_model=SingleVersionOut)
def get_version(
    store: StoreDep,
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
    with _client_errors():
        level = ConsistencyLevel.parse(consistency_type)
        name = _table_name(catalog, database, table)
        res = store.resolve([name], ReadOptions(level, as_of=as_of, min_barrier=min_barrier))
    tv = res.tables[name]
    return SingleVersionOut(
        table=name, level=level.value, version=tv.version, barrier=tv.barrier, state=tv.state,
        location=tv.location, staged=tv.staged,
    )


@router.post("/versions", response_model=VersionsOut)
def post_versions(store: StoreDep, request: VersionsRequest) -> dict[str, Any]:
    """Consistent versions of tables Q at a level (FLIP-276 "Data Consistency Type").

    Body: ``tables``, ``level``, ``as_of`` (AS OF barrier n), ``min_barrier`` (monotonic reads:
    409 when the newest consistent barrier is older), ``lease_seconds`` (pin the versions).
    """
    with _client_errors():
        res = store.resolve(request.tables, request.to_options())
    return res.to_dict()


# ------------------------------------------------------------------ views
@router.get("/topology", response_model=TopologyOut)
def get_topology(
    store: StoreDep,
    name: TopologyQuery = None,
    stale_after_s: Annotated[float, Query(gt=0, le=10**7, allow_inf_nan=False)] = 300.0,
) -> TopologyOut:
    """The topology graph: nodes (tables with role, jobs), edges, per table its newest WRITTEN
    barrier, version and lag (barriers behind the topology's newest), per job status and a
    ``stale`` flag (running, no heartbeat for ``stale_after_s`` seconds)."""
    topology = _pick_topology(store, name)
    tables = store.tables(topology)
    io = store.job_io(topology)
    jobs = {j.id: j for j in store.jobs(topology)}
    newest = store.latest_barrier(topology)
    written = store.newest_written_by_table(topology)
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
        )
    now = now_ms()
    out_jobs: dict[str, TopologyJob] = {}
    for job_id, (sources, sinks) in sorted(io.items()):
        j = jobs[job_id]
        nodes.append(TopologyNode(id=f"job:{job_id}", kind="job", name=job_id))
        edges.extend(TopologyEdge(source=f"table:{s}", target=f"job:{job_id}") for s in sources)
        edges.extend(TopologyEdge(source=f"job:{job_id}", target=f"table:{s}") for s in sinks)
        out_jobs[job_id] = TopologyJob(
            application=j.application, status=j.status, last_heartbeat_ms=j.last_heartbeat_ms,
            current_barrier=j.current_barrier, stale=j.is_stale(stale_after_s, now), sources=list(sources),
            sinks=list(sinks),
        )
    return TopologyOut(
        name=topology, newest_barrier=newest.barrier if newest else None,
        newest_barrier_ts_ms=newest.ts_ms if newest else None, nodes=nodes, edges=edges, tables=out_tables,
        jobs=out_jobs,
    )


@router.get("/barriers", response_model=BarrierPage)
def get_barriers(
    store: StoreDep,
    topology: TopologyQuery = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: BarrierQuery = None,
) -> BarrierPage:
    """Barriers of a topology, newest first, ``limit`` per page; ``before`` pages backwards."""
    name = _pick_topology(store, topology)
    items = store.barriers(name, limit=limit, before=before)
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
    store: StoreDep, catalog: NamePart, database: NamePart, table: NamePart,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: BarrierQuery = None,
) -> TableBarriersOut:
    """One table's barrier states (newest first, paged by ``before``) and the version a reader of
    that table alone gets at each level (``error`` says why a level has no answer)."""
    with _client_errors():
        name = _table_name(catalog, database, table)
        info = store.table(name)
        history = store.table_history(name, limit=limit, before=before)
    consistent: dict[str, LevelVersion] = {}
    for level in ConsistencyLevel:
        try:
            res = store.resolve([name], level)
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
    topology: TopologyQuery = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 20,
    before: BarrierQuery = None,
) -> DelaysOut:
    """Per barrier (newest ``limit``, paged by ``before``): the end-to-end delay from generation to
    WRITTEN per table, per job its own processing delay (its sinks' WRITTEN minus its latest
    input WRITTEN) and the bottleneck job. Cost is bounded by ``limit`` x tables, independent
    of the barrier history length."""
    name = _pick_topology(store, topology)
    items, next_before = store.delays(name, limit=limit, before=before)
    return DelaysOut(
        topology=name, barriers=[BarrierDelay.model_validate(d, from_attributes=True) for d in items],
        next_before=next_before,
    )


def create_metaservice_app(store: MetaStore | None = None, prefix: str = "") -> FastAPI:
    """A standalone FastAPI app serving :data:`router` at ``prefix`` (no auth; tests, benchmarks).

    Args:
        store: the metastore to serve (default: :func:`get_store`).
        prefix: mount point, e.g. ``/tsb/api/v1``.
    """
    app = FastAPI(title="airflow-provider-tsb MetaService", version="1")
    app.include_router(router, prefix=prefix)
    install_exception_handlers(app)
    if store is not None:
        app.dependency_overrides[get_store] = lambda: store
    return app
