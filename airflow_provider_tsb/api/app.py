"""The TSB FastAPI app, mounted by :class:`~airflow_provider_tsb.plugins.tsb_plugin.TsbPlugin` at ``/tsb``.

Authentication is Airflow's own: every route depends on :func:`get_current_user`, which delegates
to ``airflow.api_fastapi.core_api.security.get_user`` -- the dependency the Airflow REST API uses.
It accepts the JWT from ``POST /auth/token`` as ``Authorization: Bearer <jwt>`` and, for browser
pages, the ``_token`` session cookie that the Airflow UI login sets. No (or an invalid) credential
gives 401 (403 for a malformed/forged JWT) before any route code runs.

Authorization: every MetaService route asks Airflow's auth manager about the DAGs of the
topology it touches (:mod:`airflow_provider_tsb.api.access`,
:class:`~airflow_provider_tsb.api.airflow_access.AirflowTopologyAccess`): read access to read,
edit access to register, unregister or take a lease; lists and the UI pages show only the
topologies the user may read. The helpers below wrap Airflow's ``requires_access_*`` checks for
routes keyed by a DAG id. Request bodies are limited (``[tsb] max_request_body_bytes``, 413) and
validation errors are short (:mod:`airflow_provider_tsb.api.limits`).

The Airflow security module imports the ORM, so it is imported lazily, inside the dependencies:
the plugin module is also imported by every task process (plugins provide macros/listeners there),
and those processes must not pay for (or touch) the API server's machinery.

The Delta Sharing server (:mod:`airflow_provider_tsb.api.sharing.routes`) is mounted at ``/tsb/sharing``
with the same authentication and roles, and also takes the tokens of Delta Sharing recipients
(:func:`sharing_user`: one share, read-only; no other route accepts them). Its
``/files/{token}`` route takes no bearer token (the client fetches file URLs without one: the
URL's encrypted, expiring grant is the credential, refused once its recipient is revoked).

The OpenAPI document (``/tsb/openapi.json``) and Swagger UI (``/tsb/docs``) need the same login
as the API. Swagger UI's JavaScript and CSS, like the lineage graph's pan/zoom library, are
vendored in the package (``ui/static/vendor``, served without login at ``/tsb/static/vendor``:
public library code, no data), so the pages work without internet.

Extend with routers::

    router = APIRouter(prefix="/api/v1", dependencies=[Depends(get_current_user)])
    app.include_router(router)
"""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Literal

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.responses import Response

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.ui.pages import UI_PREFIX, pages_router

if TYPE_CHECKING:
    from airflow_provider_tsb.api.access import TopologyAccess
    from airflow_provider_tsb.metastore.store import MetaStore

URL_PREFIX = "/tsb"
API_PREFIX = "/api/v1"
STATIC_PREFIX = "/static"

ResourceMethod = Literal["GET", "POST", "PUT", "DELETE"]

_bearer_scheme = HTTPBearer(
    auto_error=False,
    description="Airflow JWT from `POST /auth/token`; browsers may use the `_token` cookie instead.",
)


#: default seconds a validated bearer token's user is kept per process (``[tsb] auth_cache_seconds``)
DEFAULT_AUTH_CACHE_SECONDS = 5.0


class TokenCache:
    """Users of validated bearer JWTs, kept per process for a few seconds (thread-safe).

    Airflow validates a JWT on every request: the signature, then ``RevokedToken.is_revoked``,
    a query of Airflow's metadata database run on the event loop. Under many readers that query
    serializes the api-server (docs/benchmarks.md, "REST API under many readers"). An entry
    lives ``seconds``, and never past the token's own ``exp``: a revoked (logged out) token is
    refused at most ``seconds`` later. Keys are SHA-256 digests, not the tokens.

    Args:
        seconds: time to live (``0``: nothing is kept, every request is validated).
        maxsize: most tokens kept.
    """

    def __init__(self, seconds: float, maxsize: int = 10_000) -> None:
        import threading

        from cachetools import TTLCache

        self.seconds = seconds
        self._cache: TTLCache[bytes, tuple[float, BaseUser]] = TTLCache(maxsize, max(seconds, 1e-3))
        self._lock = threading.Lock()

    @staticmethod
    def _key(token: str) -> bytes:
        import hashlib

        return hashlib.sha256(token.encode()).digest()

    def get(self, token: str) -> BaseUser | None:
        """The user of ``token`` if validated within the last ``seconds`` and not expired."""
        if self.seconds <= 0:
            return None
        import time

        with self._lock:
            entry = self._cache.get(self._key(token))
        return entry[1] if entry is not None and time.time() < entry[0] else None

    def put(self, token: str, user: BaseUser) -> None:
        """Keep ``user`` for ``token`` (just validated) until its ``exp`` or ``seconds`` from now."""
        if self.seconds <= 0:
            return
        import time

        import jwt

        exp = jwt.decode(token, options={"verify_signature": False}).get("exp")  # already verified
        until = time.time() + self.seconds if exp is None else min(float(exp), time.time() + self.seconds)
        with self._lock:
            self._cache[self._key(token)] = (until, user)


_token_cache: TokenCache | None = None


def _forget_tokens() -> None:
    global _token_cache
    _token_cache = None


CACHES.on_clear("api.tokens", _forget_tokens)


def token_cache() -> TokenCache:
    """The process's :class:`TokenCache` (from ``[tsb] auth_cache_seconds``, default 5 s, 0: off)."""
    global _token_cache
    if _token_cache is None:
        from airflow_provider_tsb.api.limits import config_seconds

        _token_cache = TokenCache(config_seconds("auth_cache_seconds", DEFAULT_AUTH_CACHE_SECONDS, maximum=300))
    return _token_cache


async def get_current_user(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
) -> BaseUser:
    """Authenticate exactly like the Airflow REST API (bearer JWT first, then ``_token`` cookie);
    a bearer token validated in the last ``[tsb] auth_cache_seconds`` is not validated again
    (:class:`TokenCache`)."""
    from airflow.api_fastapi.core_api.security import get_user

    bearer = credentials.credentials if credentials and credentials.scheme.lower() == "bearer" else None
    cache = token_cache()
    user = cache.get(bearer) if bearer is not None else None
    if user is None:
        user = await get_user(request=request, _oauth_token=None, bearer_credentials=credentials)
        if bearer is not None:
            cache.put(bearer, user)
    request.state.tsb_user = user  # for the authorization policy (airflow_access)
    return user


CurrentUser = Annotated[BaseUser, Depends(get_current_user)]


async def sharing_user(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
) -> object:
    """Authentication of the Delta Sharing routes: a recipient's token (one share, read-only:
    :func:`~airflow_provider_tsb.api.sharing.auth.authenticate_recipient`), else the Airflow user
    exactly as :func:`get_current_user`. No other route accepts a recipient token."""
    from airflow_provider_tsb.metastore.recipients import is_recipient_token

    bearer = credentials.credentials if credentials and credentials.scheme.lower() == "bearer" else None
    if bearer is not None and is_recipient_token(bearer):
        from airflow_provider_tsb.api.sharing.auth import authenticate_recipient

        return await authenticate_recipient(request, bearer)
    return await get_current_user(request, credentials)


def requires_dag_access(
    method: ResourceMethod = "GET", dag_id_param: str = "dag_id"
) -> Callable[[Request, BaseUser], Awaitable[BaseUser]]:
    """Dependency: the user may ``method`` the DAG named by path/query parameter ``dag_id_param``.

    Without the parameter, the check is "any DAG" (as Airflow's list endpoints do).
    """
    from starlette.concurrency import run_in_threadpool

    async def dependency(request: Request, user: CurrentUser) -> BaseUser:
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
        from airflow.models.dag import DagModel

        dag_id = request.path_params.get(dag_id_param) or request.query_params.get(dag_id_param)

        def check() -> bool:
            team_name = DagModel.get_team_name(dag_id) if dag_id else None
            return get_auth_manager().is_authorized_dag(
                method=method, details=DagDetails(id=dag_id, team_name=team_name), user=user
            )

        if not await run_in_threadpool(check):
            raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")
        return user

    return dependency


def requires_asset_access(method: ResourceMethod = "GET") -> Callable[[BaseUser], Awaitable[BaseUser]]:
    """Dependency: the user may ``method`` assets (TSB tables are published as Airflow assets)."""

    async def dependency(user: CurrentUser) -> BaseUser:
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import AssetDetails

        if not get_auth_manager().is_authorized_asset(method=method, details=AssetDetails(), user=user):
            raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")
        return user

    return dependency


def _login_url(request: Request) -> str:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager().get_url_login(next_url=str(request.url))


def _app_relative_path(request: Request) -> str:
    path: str = request.scope.get("path", "")
    root: str = request.scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


async def _ui_auth_error(request: Request, exc: HTTPException) -> Response:
    """HTML pages answer 401/403 with a login link (and no data); the JSON API keeps JSON."""
    if _app_relative_path(request).startswith((f"{UI_PREFIX}/", "/docs")):
        if exc.status_code in (status.HTTP_401_UNAUTHORIZED, status.HTTP_403_FORBIDDEN):
            login = html.escape(_login_url(request), quote=True)
            body = (
                "<!doctype html><html><head><title>Login required</title></head><body>"
                f"<p>Login required. <a id='tsb-login' href='{login}'>Log in to Airflow</a></p>"
                "</body></html>"
            )
            return HTMLResponse(body, status_code=exc.status_code)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


api_router = APIRouter(prefix=API_PREFIX, tags=["tsb"], dependencies=[Depends(get_current_user)])


@api_router.get("/health")
async def health() -> dict[str, str]:
    """Liveness of the TSB API (authenticated)."""
    return {"status": "ok"}


def _access(user: BaseUser, store: MetaStore | None) -> TopologyAccess | None:
    from airflow_provider_tsb.api.airflow_access import AirflowTopologyAccess

    return AirflowTopologyAccess(user, store) if store is not None else None


def _store_or_none() -> MetaStore | None:
    from airflow_provider_tsb.api.routes import configured_store

    try:
        return configured_store()
    except Exception:  # noqa: BLE001 - the page still renders and reports the error
        return None


docs_router = APIRouter(include_in_schema=False, dependencies=[Depends(get_current_user)])


@docs_router.get("/openapi.json")
async def openapi_json(request: Request) -> JSONResponse:
    """The OpenAPI document of the TSB API (authenticated, like the API it describes)."""
    return JSONResponse(request.app.openapi())


@docs_router.get("/docs", response_class=HTMLResponse)
async def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI from the package's vendored ``swagger-ui-dist`` (no CDN: works offline).

    FastAPI's documented recipe for self-hosted docs assets (``get_swagger_ui_html`` with local
    ``swagger_js_url`` / ``swagger_css_url``); paths are relative to the mount point (``/tsb``).
    """
    from fastapi.openapi.docs import get_swagger_ui_html

    root = request.scope.get("root_path", "").rstrip("/")
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json", title="airflow-provider-tsb API",
        swagger_js_url=f"{root}{STATIC_PREFIX}/vendor/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{STATIC_PREFIX}/vendor/swagger-ui/swagger-ui.css",
        swagger_favicon_url=f"{root}{STATIC_PREFIX}/vendor/swagger-ui/favicon-32x32.png",
    )


def _mount_static(app: FastAPI) -> None:
    """Serve the UI's vendored JavaScript/CSS (``ui/static/vendor``) at ``/tsb/static/vendor``."""
    from importlib import resources

    from starlette.staticfiles import StaticFiles

    vendor = resources.files("airflow_provider_tsb.ui").joinpath("static", "vendor")
    app.mount(f"{STATIC_PREFIX}/vendor", StaticFiles(directory=str(vendor)), name="tsb-static-vendor")


def airflow_access(request: Request, store: MetaStore) -> TopologyAccess:
    """The Airflow app's authorization policy of a request (``app.state.tsb_access``): Airflow's
    auth manager for the user :func:`get_current_user` authenticated (401 when none did)."""
    from airflow_provider_tsb.api.airflow_access import AirflowTopologyAccess

    recipient = getattr(request.state, "tsb_recipient", None)
    if recipient is not None:  # a sharing route, authenticated by a recipient's token (sharing_user)
        from airflow_provider_tsb.api.sharing.auth import RecipientAccess

        return RecipientAccess(recipient, store)
    user = getattr(request.state, "tsb_user", None)
    if user is None:  # get_current_user runs first on every tsb route; fail closed if it did not
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Not authenticated")
    return AirflowTopologyAccess(user, store)


def create_app() -> FastAPI:
    """Build the FastAPI app that the plugin mounts at ``/tsb``."""
    app = FastAPI(
        title="airflow-provider-tsb",
        description="Timestamp barriers (FLIP-276) MetaService API. Authenticate with an Airflow JWT.",
        version="1",
        openapi_url=None,  # served by docs_router behind Airflow's auth, with Swagger UI from the package
        docs_url=None,
        redoc_url=None,
    )
    app.add_exception_handler(HTTPException, _ui_auth_error)  # type: ignore[arg-type]
    app.include_router(api_router)
    from airflow_provider_tsb.api.limits import BodySizeLimitMiddleware, max_request_body_bytes
    from airflow_provider_tsb.api.routes import install_exception_handlers
    from airflow_provider_tsb.api.routes import router as metaservice_router

    # The MetaService views (/topology, /delays, ...) at /tsb/api/v1, behind Airflow's auth; each
    # route asks the auth manager about the DAGs of the topology it touches (api/access.py).
    app.include_router(metaservice_router, prefix=API_PREFIX, dependencies=[Depends(get_current_user)])
    app.state.tsb_access = airflow_access
    # Delta Sharing recipients at /tsb/api/v1/recipients (api/recipients.py): the Airflow JWT only
    from airflow_provider_tsb.api.recipients import router as recipients_router

    app.include_router(recipients_router, prefix=API_PREFIX, dependencies=[Depends(get_current_user)])
    # The Delta Sharing server at /tsb/sharing (api/sharing/routes.py): the same auth and roles; its
    # file route is authenticated by the URL's signature instead.
    from airflow_provider_tsb.api.sharing.routes import install_sharing

    install_sharing(app, dependencies=[Depends(sharing_user)])
    install_exception_handlers(app)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=max_request_body_bytes())
    from airflow_provider_tsb.api.heap import FreezeHeapMiddleware

    app.add_middleware(FreezeHeapMiddleware)  # the api-server's startup heap out of full collections
    app.include_router(pages_router(get_current_user, _store_or_none, _access))  # ui/pages.py: the UI's pages
    app.include_router(docs_router)
    _mount_static(app)
    return app
