"""A Delta Sharing protocol server over the topologies: barriers are the shared table versions.

Mounted at ``/tsb/sharing`` in the api-server (the profile ``endpoint``), it implements the REST
APIs of the Delta Sharing protocol (github.com/delta-io/delta-sharing, PROTOCOL.md) in the
``parquet`` response format, with the mapping of :mod:`airflow_provider_tsb.api.sharing.model`:

* ``GET /shares``, ``GET /shares/{share}`` ("List Shares", "Get Share"): topologies and
  barrier domains the user may read;
* ``GET /shares/{share}/schemas``, ``.../schemas/{schema}/tables``, ``/shares/{share}/all-tables``;
* ``GET .../tables/{table}/version`` ("Query Table Version"): header ``delta-table-version``,
  the newest barrier COMMIT over the share;
* ``GET .../tables/{table}/metadata`` ("Query Table Metadata"): NDJSON protocol + metaData;
* ``POST .../tables/{table}/query`` ("Read Data from a Table"): body ``version`` (AS OF that
  barrier) or ``timestamp`` (the newest barrier at or before it); NDJSON protocol, metaData and
  one ``file`` line per Parquet file with a signed URL (:mod:`.files`; on S3 a presigned
  URL of the store, :mod:`.presign`); the versions
  served are leased for as long as the URLs live (for a reader with the lease right:
  :func:`may_lease`), so snapshot expiry keeps the files;
  ``startingVersion`` answers as ``changes``;
* ``GET .../tables/{table}/changes`` ("Read Change Data Feed from a Table"):
  ``startingVersion``/``endingVersion`` (barriers, inclusive): per barrier ``k`` the files that
  barrier ``k`` added (``add``) and removed (``remove``) against barrier ``k-1``, so applying
  them to the read AS OF ``startingVersion - 1`` gives the read AS OF ``endingVersion``;
* ``GET /files/{token}``: the file behind a file URL (no bearer token; 403 when forged,
  expired, or its recipient was revoked).

Auth: a Delta Sharing recipient's token (:mod:`airflow_provider_tsb.metastore.recipients`:
one share, read-only, expiring, revocable; :class:`~.auth.RecipientAccess`), or an
Airflow user's JWT with the tsb REST API's roles: the routes depend on
:func:`~airflow_provider_tsb.api.routes.get_access`, which in the api-server asks the auth manager for read access to
every DAG of the share's topologies. Errors are the protocol's
``{"errorCode", "message"}``: 400 ``INVALID_PARAMETER_VALUE`` (bad or expired version, bad
body), 403 ``PERMISSION_DENIED``, 404 ``RESOURCE_DOES_NOT_EXIST``, 413, 429 (the user's leases
are at ``[tsb] max_leased_versions``, :mod:`~.lease_budget`), 500 ``INTERNAL_ERROR`` (a table
whose Delta log fails its integrity check: a server-side fault), 503.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Coroutine, Iterable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from airflow_provider_tsb.api.access import EDIT, READ, AllowAll, TopologyAccess
from airflow_provider_tsb.api.errors import status_for
from airflow_provider_tsb.api.lease_budget import lease_holder
from airflow_provider_tsb.api.limits import config_number, config_seconds, max_lease_seconds, short_text
from airflow_provider_tsb.api.routes import get_access, get_store
from airflow_provider_tsb.api.sharing import model as sm
from airflow_provider_tsb.api.sharing.auth import check_principal, principal_of, require_share
from airflow_provider_tsb.api.sharing.cache import DEFAULT_CHECK_SECONDS, SharingCache
from airflow_provider_tsb.api.sharing.files import file_id, grant, sign
from airflow_provider_tsb.api.sharing.lines import change_lines, file_response, metadata_lines, query_lines
from airflow_provider_tsb.api.sharing.presign import presigned_url
from airflow_provider_tsb.api.sharing.threads import in_sharing_threads
from airflow_provider_tsb.exceptions import (
    DeltaLogIntegrityError,
    ExpiredVersionError,
    TsbError,
    UnknownBarrierError,
)
from airflow_provider_tsb.metastore.records import now_ms
from airflow_provider_tsb.metastore.store import MetaStore

PREFIX = "/sharing"
NDJSON = "application/x-ndjson; charset=utf-8"
VERSION_HEADER = "delta-table-version"
CAPABILITIES_HEADER = "delta-sharing-capabilities"
#: default lifetime of a file URL and of the lease of a query, seconds (``[tsb] sharing_url_seconds``)
DEFAULT_URL_SECONDS = 300
_CODES = {400: "INVALID_PARAMETER_VALUE", 403: "PERMISSION_DENIED", 404: "RESOURCE_DOES_NOT_EXIST",
          413: "RESOURCE_LIMIT_EXCEEDED", 429: "RESOURCE_LIMIT_EXCEEDED", 500: "INTERNAL_ERROR",
          503: "TEMPORARILY_UNAVAILABLE", 401: "UNAUTHENTICATED"}


async def url_seconds(request: Request) -> int:
    """Dependency: lifetime of file URLs and query leases, seconds (``[tsb] sharing_url_seconds``,
    default 300; at most ``[tsb] max_lease_seconds``, the longest lease a reader may take; the
    app's ``state.tsb_url_seconds`` when set, :func:`create_sharing_app`). A coroutine: it reads
    Airflow's parsed configuration, which does not block (see :func:`~airflow_provider_tsb.api.routes.get_store`)."""
    fixed: int | None = getattr(request.app.state, "tsb_url_seconds", None)
    if fixed is not None:
        return fixed
    return min(config_number("sharing_url_seconds", DEFAULT_URL_SECONDS), max_lease_seconds())


def sharing_error(status: int, message: str) -> JSONResponse:
    """The protocol's error answer ``{"errorCode", "message"}`` (``detail`` repeats the message)."""
    status = 400 if status in (409, 410, 422) else status
    code = _CODES.get(status, "INTERNAL_ERROR")
    text = short_text(message)
    return JSONResponse({"errorCode": code, "message": text, "detail": text}, status_code=status)


class SharingRoute(APIRoute):
    """Answers every error of a sharing route in the protocol's shape (never a bare 500 for a
    client error): tsb errors by :func:`status_for`, expired and unknown barriers 400. A plain
    function endpoint runs in the sharing worker threads (:func:`~.threads.in_sharing_threads`)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            endpoint = in_sharing_threads(endpoint)
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """Wrap the default handler (see class docstring)."""
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except (ExpiredVersionError, UnknownBarrierError) as exc:
                return sharing_error(400, str(exc))
            except DeltaLogIntegrityError as exc:  # the server's table is corrupt: not the client's request
                return sharing_error(500, str(exc))
            except TsbError as exc:
                return sharing_error(status_for(exc), str(exc))
            except HTTPException as exc:
                return sharing_error(exc.status_code, str(exc.detail))
            except RequestValidationError as exc:
                return sharing_error(400, f"malformed request: {short_text(str(exc.errors()), 300)}")

        return guarded


router = APIRouter(prefix=PREFIX, tags=["tsb-delta-sharing"], route_class=SharingRoute)
files_router = APIRouter(prefix=PREFIX, tags=["tsb-delta-sharing"], route_class=SharingRoute)
StoreDep = Annotated[MetaStore, Depends(get_store)]
AccessDep = Annotated[TopologyAccess, Depends(get_access)]


def sharing_cache(request: Request, store: MetaStore) -> SharingCache:
    """The app's :class:`SharingCache` of ``store`` (made at the first request, and again when
    the app's store is replaced), checking the registry once per ``[tsb] sharing_check_seconds``
    (default :data:`~.cache.DEFAULT_CHECK_SECONDS`; the app's
    ``state.tsb_sharing_check_seconds`` when set, :func:`create_sharing_app`).

    Raises:
        ValueError: ``[tsb] sharing_check_seconds`` is not a number from 0 to 60.
    """
    cache: SharingCache | None = getattr(request.app.state, "tsb_sharing_cache", None)
    if cache is None or cache.store is not store:
        check: float | None = getattr(request.app.state, "tsb_sharing_check_seconds", None)
        if check is None:
            check = config_seconds("sharing_check_seconds", DEFAULT_CHECK_SECONDS, maximum=60.0)
        cache = SharingCache(store, check_seconds=check)
        request.app.state.tsb_sharing_cache = cache
    return cache


def _share(store: MetaStore, access: TopologyAccess, name: str) -> sm.Share:
    """The share ``name`` the user may read (403), or 404 (only to a user who may read all DAGs)."""
    require_share(access, name)
    try:
        share = sm.resolve_share(store, name)
    except sm.UnknownShareError:
        access.require_all_dags(READ)
        raise
    access.require(READ, share.topologies)
    return share


def _tables(request: Request, store: MetaStore, access: TopologyAccess, share: str
            ) -> tuple[sm.Share, list[sm.SharedTable]]:
    """The share ``name`` the user may read and its tables, looked up in one transaction
    (:meth:`SharingCache.share_and_tables`; 403 / 404 as :func:`_share`)."""
    require_share(access, share)
    try:
        found, tables = sharing_cache(request, store).share_and_tables(share)
    except sm.UnknownShareError:
        access.require_all_dags(READ)
        raise
    access.require(READ, found.topologies)
    return found, tables


def _page(items: list[dict[str, Any]], max_results: str | None, page_token: str | None) -> dict[str, Any]:
    """One page of a list answer (``maxResults``, ``pageToken`` = the offset as a string)."""
    try:
        start = int(page_token) if page_token else 0
        size = int(max_results) if max_results not in (None, "") else 1000
    except ValueError:
        raise sm.BadRequestError("maxResults and pageToken must be integers from this server") from None
    if start < 0 or size < 0:
        raise sm.BadRequestError("maxResults and pageToken must not be negative")
    out: dict[str, Any] = {"items": items[start : start + size]}
    if start + size < len(items):
        out["nextPageToken"] = str(start + size)
    return out


@router.get("/shares")
def list_shares(request: Request, store: StoreDep, access: AccessDep, maxResults: str | None = None,  # noqa: N803
                pageToken: str | None = None) -> dict[str, Any]:  # noqa: N803
    """"List Shares": topologies and barrier domains whose DAGs the user may all read."""
    scope = access.share_scope
    shares = sharing_cache(request, store).shares() if scope is None else []
    names = [scope] if scope is not None else [
        s.name for s in shares if set(s.topologies) <= access.allowed(READ, s.topologies)
    ]
    return _page([{"name": n, "id": n} for n in names], maxResults, pageToken)


@router.get("/shares/{share}")
def get_share(store: StoreDep, access: AccessDep, share: str) -> dict[str, Any]:
    """"Get Share"."""
    found = _share(store, access, share)
    return {"share": {"name": found.name, "id": found.name}}


@router.get("/shares/{share}/schemas")
def list_schemas(request: Request, store: StoreDep, access: AccessDep, share: str, maxResults: str | None = None,  # noqa: N803
                 pageToken: str | None = None) -> dict[str, Any]:  # noqa: N803
    """"List Schemas in a Share": the databases of the share's tables."""
    found, tables = _tables(request, store, access, share)
    return _page([{"name": s, "share": found.name} for s in sm.schemas_of(tables)], maxResults, pageToken)


def _table_items(tables: Iterable[sm.SharedTable]) -> list[dict[str, Any]]:
    return [{"name": t.name, "schema": t.schema, "share": t.share, "shareId": t.share, "id": t.full_name}
            for t in tables]


@router.get("/shares/{share}/schemas/{schema}/tables")
def list_tables(request: Request, store: StoreDep, access: AccessDep, share: str, schema: str,
                maxResults: str | None = None, pageToken: str | None = None) -> dict[str, Any]:  # noqa: N803
    """"List Tables in a Schema"."""
    _found, tables = _tables(request, store, access, share)
    sm.find_table(tables, schema)
    return _page(_table_items(t for t in tables if t.schema.lower() == schema.lower()), maxResults, pageToken)


@router.get("/shares/{share}/all-tables")
def list_all_tables(request: Request, store: StoreDep, access: AccessDep, share: str, maxResults: str | None = None,  # noqa: N803
                    pageToken: str | None = None) -> dict[str, Any]:  # noqa: N803
    """"List all Tables in a Share"."""
    _found, tables = _tables(request, store, access, share)
    return _page(_table_items(tables), maxResults, pageToken)


def _located(request: Request, store: MetaStore, access: TopologyAccess, share: str, schema: str, table: str
             ) -> tuple[sm.Share, list[sm.SharedTable], sm.SharedTable]:
    found, tables = _tables(request, store, access, share)
    return found, tables, sm.find_table(tables, schema, table)


@router.api_route("/shares/{share}/schemas/{schema}/tables/{table}/version", methods=["GET"])
@router.api_route("/shares/{share}/schemas/{schema}/tables/{table}", methods=["HEAD"])
def table_version(request: Request, store: StoreDep, access: AccessDep, share: str, schema: str, table: str,
                  startingTimestamp: str | None = None) -> Response:  # noqa: N803
    """"Query Table Version": ``delta-table-version`` = the newest barrier COMMIT over the share
    (with ``startingTimestamp``: the first barrier at or after it)."""
    found, tables, _t = _located(request, store, access, share, schema, table)
    version = sm.share_version(store, found, tables)
    if startingTimestamp is not None:
        version = sm.barrier_from(store, found, sm.parse_timestamp(startingTimestamp), version)
    return Response(status_code=200, headers={VERSION_HEADER: str(version)})


def _ndjson(lines: list[dict[str, Any]], version: int) -> Response:
    body = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    return Response(body, media_type=NDJSON,
                    headers={VERSION_HEADER: str(version), CAPABILITIES_HEADER: "responseformat=parquet"})


@router.get("/shares/{share}/schemas/{schema}/tables/{table}/metadata")
def table_metadata(request: Request, store: StoreDep, access: AccessDep, share: str, schema: str, table: str,
                   version: str | None = None, timestamp: str | None = None) -> Response:
    """"Query Table Metadata" at the share's version, or AS OF ``version`` / ``timestamp``."""
    found, tables, t = _located(request, store, access, share, schema, table)
    barrier = _barrier(store, found, tables, version, timestamp)
    tv = sm.resolve_table(store, found, t, barrier, lease_seconds=None).tables[t.full_name]
    return _ndjson(metadata_lines(tv), barrier)


def _barrier(store: MetaStore, share: sm.Share, tables: list[sm.SharedTable], version: object,
             timestamp: object) -> int:
    """The barrier a request reads: ``version`` as given (resolving the table AS OF it refuses a
    barrier not COMMIT there), else the newest barrier at or before ``timestamp``, else the
    share's version; the share's version is resolved only for the last two."""
    if version is not None and timestamp is not None:
        raise sm.BadRequestError("give version or timestamp, not both")
    if version is not None:
        return sm.parse_version(version)
    newest = sm.share_version(store, share, tables)
    if timestamp is not None:
        return sm.barrier_at(store, share, sm.parse_timestamp(timestamp), newest)
    return newest


@router.post("/shares/{share}/schemas/{schema}/tables/{table}/query")
def query_table(request: Request, store: StoreDep, access: AccessDep, seconds: Annotated[int, Depends(url_seconds)],
                share: str, schema: str, table: str,
                body: Annotated[dict[str, Any] | None, Body()] = None) -> Response:
    """"Read Data from a Table": the files of the table AS OF the barrier asked (see module doc);
    their versions are leased for ``seconds``, as long as the URLs live."""
    body = body or {}
    found, tables, t = _located(request, store, access, share, schema, table)
    if body.get("startingVersion") is not None:
        return _changes(request, store, access, found, tables, t, seconds, body.get("startingVersion"),
                        body.get("endingVersion"))
    barrier = _barrier(store, found, tables, body.get("version"), body.get("timestamp"))
    res = sharing_cache(request, store).leased(found, t, barrier, seconds, lease=may_lease(access, found),
                                               holder=lease_holder(request, f"delta-sharing {found.name}"))
    expires = res.lease_expires_at_ms or now_ms() + seconds * 1000
    lines = query_lines(res.tables[t.full_name], expires, _signer(request, expires))
    return _ndjson(lines, barrier)


def _signer(request: Request, expires: int) -> Callable[[str, str], tuple[str, str]]:
    """``(root, path) -> (url, file id)``: a presigned S3 URL when the store can give one, else
    the api-server's own signed URL (both valid until ``expires``, epoch ms)."""
    seconds = max(1, (expires - now_ms()) // 1000)
    principal = principal_of(request)

    def url(root: str, path: str) -> tuple[str, str]:
        presigned = presigned_url(root, path, seconds)
        own = presigned or str(request.url_for("sharing_file", token=sign(root, path, expires, principal=principal)))
        return own, file_id(root, path)

    return url


@router.get("/shares/{share}/schemas/{schema}/tables/{table}/changes")
def table_changes(request: Request, store: StoreDep, access: AccessDep, seconds: Annotated[int, Depends(url_seconds)],
                  share: str, schema: str, table: str, startingVersion: str | None = None,  # noqa: N803
                  endingVersion: str | None = None, startingTimestamp: str | None = None,  # noqa: N803
                  endingTimestamp: str | None = None) -> Response:  # noqa: N803
    """"Read Change Data Feed from a Table" between two barriers (see module doc)."""
    found, tables, t = _located(request, store, access, share, schema, table)
    newest = sm.share_version(store, found, tables)
    start: object = startingVersion
    end: object = endingVersion
    if startingTimestamp is not None:
        start = sm.barrier_from(store, found, sm.parse_timestamp(startingTimestamp), newest)
    if endingTimestamp is not None:
        end = sm.barrier_at(store, found, sm.parse_timestamp(endingTimestamp), newest)
    return _changes(request, store, access, found, tables, t, seconds, start, end)


def may_lease(access: TopologyAccess, share: sm.Share) -> bool:
    """The lease rule of every read path: a read pins versions only for a reader with the lease
    right, edit access to every DAG of the share's topologies (the right ``POST /versions`` with
    ``lease_seconds`` needs). A recipient and a Viewer read without pinning anything: snapshot
    expiry's retention keeps what they read, and a file it removed meanwhile answers 404."""
    return access.share_scope is None and set(share.topologies) <= access.allowed(EDIT, share.topologies)


def _changes(request: Request, store: MetaStore, access: TopologyAccess, share: sm.Share,
             tables: list[sm.SharedTable], t: sm.SharedTable, seconds: int, start: object, end: object) -> Response:
    if start is None:
        raise sm.BadRequestError("give startingVersion or startingTimestamp")
    first = sm.parse_version(start, "startingVersion")
    last = sm.parse_version(end, "endingVersion") if end is not None else sm.share_version(store, share, tables)
    steps = sm.barrier_versions(store, t, first, last, seconds, lease=may_lease(access, share),
                                holder=lease_holder(request, f"delta-sharing changes {share.name}"))
    lines = change_lines(t.full_name, steps, steps.lease_expires_ms, _signer(request, steps.lease_expires_ms))
    return _ndjson(lines, first)


@files_router.api_route("/files/{token}", methods=["GET", "HEAD"], name="sharing_file")
def sharing_file(token: str, request: Request, store: StoreDep) -> Response:
    """The Parquet file behind a file URL (no bearer token: the URL's encrypted grant is the
    credential, :mod:`.files`).

    Errors: 403 forged, expired, issued to a recipient since revoked or expired (or to an Airflow
    token since logged out), or a path outside its table; 404 the file is gone."""
    found = grant(token)
    check_principal(store, found)
    return file_response(found.root, found.path, request.headers.get("range"))


def create_sharing_app(store: MetaStore, access: TopologyAccess | None = None, *, prefix: str = "/tsb",
                       seconds: int | None = None, max_body_bytes: int | None = None,
                       check_seconds: float = 0.0) -> FastAPI:
    """A standalone app serving the sharing routes at ``prefix + /sharing`` without
    authentication (tests, benchmarks): ``access`` decides (default :class:`AllowAll`);
    ``seconds``: URL and lease lifetime; ``check_seconds``: as ``[tsb] sharing_check_seconds``
    (default 0: every listing checked against the metastore)."""
    from airflow_provider_tsb.api.limits import DEFAULT_MAX_BODY_BYTES, BodySizeLimitMiddleware

    app = FastAPI(title="airflow-provider-tsb Delta Sharing")
    install_sharing(app, prefix=prefix)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=max_body_bytes or DEFAULT_MAX_BODY_BYTES)
    policy = access or AllowAll()
    app.state.tsb_store = store
    app.state.tsb_access = lambda _request, _store: policy
    if seconds is not None:
        app.state.tsb_url_seconds = seconds
    app.state.tsb_sharing_check_seconds = check_seconds
    return app


def install_sharing(app: FastAPI, prefix: str = "", dependencies: list[Any] | None = None) -> None:
    """Include the protocol routes (with ``dependencies``, e.g. the Airflow authentication) and
    the file route (never authenticated: signed URLs) in ``app`` under ``prefix``."""
    app.include_router(router, prefix=prefix, dependencies=dependencies or [])
    app.include_router(files_router, prefix=prefix)


__all__ = [ "create_sharing_app", "install_sharing", "router"]
