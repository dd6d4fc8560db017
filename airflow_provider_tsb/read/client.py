"""Python client of the tsb REST API (FLIP-276 MetaService endpoints), on httpx.

Example::

    with TsbClient("http://airflow:8080", token=jwt) as client:  # or .../tsb/api/v1
        answer = client.versions(["tsb.mart.word_count", "tsb.mart.count_of_counts"])
        answer["barrier"], answer["tables"]["tsb.mart.word_count"]["version"]

Errors answered by the server are raised as the tsb exception named in the answer
(``UnknownTableError``, ``InconsistentReadError``, ``DoubleWriterError`` ...) carrying the
server's message; other HTTP errors raise :class:`TsbApiError`, which says which of the URL
(no tsb API there), the authentication (401: :class:`TsbAuthError`) or the role (403:
:class:`TsbPermissionError`) is wrong.

The URL is Airflow's base URL (``http://airflow:8080``, with its base path if it has one) or the
API root itself (``.../tsb/api/v1``, where the plugin mounts its FastAPI app). A token is an
Airflow JWT: :func:`fetch_token` gets one from Airflow's ``POST /auth/token`` with a user name
and password (Airflow 3 "API authentication"; SimpleAuthManager and FAB alike).

Monotonic reads: with ``monotonic=True`` the client remembers, per set of tables, the newest
barrier it was answered and sends it as ``min_barrier`` on the next :meth:`TsbClient.versions`
call, so successive reads never go backwards (a rollback gives ``InconsistentReadError``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import httpx

from airflow_provider_tsb import exceptions as exc_module
from airflow_provider_tsb.consistency import MAX_REQUEST_WAIT_S, ConsistencyLevel, ReadOptions
from airflow_provider_tsb.exceptions import (
    BadRequestError,
    CycleError,
    DoubleWriterError,
    InconsistentReadError,
    TsbApiError,
    TsbAuthError,
    TsbError,
    TsbPermissionError,
    UnknownConsistencyLevelError,
    UnknownTopologyError,
)
from airflow_provider_tsb.names import parse_table_name

#: where the plugin mounts the tsb REST API under Airflow's base URL
API_PATH = "/tsb/api/v1"
#: Airflow 3's token endpoint under its base URL (JSON ``{"username", "password"}`` -> ``access_token``)
TOKEN_PATH = "/auth/token"
_LOGIN_HINT = "pass a token (--token or $TSB_API_TOKEN) or log in (--user, and --password or $TSB_API_PASSWORD)"


def api_root(url: str) -> str:
    """The tsb API root for ``url``: Airflow's base URL or the API root itself.

    ``http://airflow:8080`` and ``http://airflow:8080/tsb/api/v1`` both give
    ``http://airflow:8080/tsb/api/v1``; a base path is kept (``http://h/airflow`` ->
    ``http://h/airflow/tsb/api/v1``). A bare path (``/tsb/api/v1``, for an ``http`` client that
    has its own base URL) is kept as it is.
    """
    root = url.strip().rstrip("/")
    return root if root.endswith(API_PATH) else root + API_PATH


def airflow_base(url: str) -> str:
    """Airflow's base URL for ``url`` (the inverse of :func:`api_root`)."""
    return api_root(url)[: -len(API_PATH)]


def fetch_token(url: str, username: str, password: str, *, timeout: float = 30.0) -> str:
    """Log in to Airflow and return its JWT for the tsb API.

    Args:
        url: Airflow's base URL, or the tsb API root (see :func:`api_root`).
        username, password: an Airflow user's credentials.
        timeout: seconds for the request.

    Returns:
        The access token (``Authorization: Bearer <token>``), valid for Airflow's
        ``[api_auth] jwt_expiration_time``.

    Raises:
        TsbAuthError: Airflow refused the user name or password (names the user and the URL).
        TsbApiError: Airflow is not reachable at ``url``, or has no token endpoint there (the
            URL is wrong: the message names it and what was expected).
    """
    endpoint = airflow_base(url) + TOKEN_PATH
    try:
        response = httpx.post(endpoint, json={"username": username, "password": password}, timeout=timeout)
    except httpx.HTTPError as exc:
        raise TsbApiError(f"cannot reach Airflow at {airflow_base(url)} ({exc}): check --api-url, which is "
                          "Airflow's base URL such as http://airflow:8080") from exc
    if response.status_code in (401, 403):
        raise TsbAuthError(f"Airflow at {airflow_base(url)} refused the login of user {username!r} "
                           f"({response.status_code}): check the user name and password", response.status_code)
    if response.status_code in (404, 405):
        raise TsbApiError(f"no Airflow token endpoint at {endpoint} ({response.status_code}): --api-url must be "
                          "Airflow's base URL (e.g. http://airflow:8080) or the tsb API URL ending in "
                          f"{API_PATH}", response.status_code)
    if not response.is_success:
        raise TsbApiError(f"Airflow login at {endpoint} failed: {response.status_code} {response.text[:200]}",
                          response.status_code)
    try:
        return str(response.json()["access_token"])
    except (ValueError, KeyError, TypeError) as exc:
        raise TsbApiError(f"{endpoint} did not answer an Airflow token (is this Airflow 3?): "
                          f"{response.text[:200]}", response.status_code) from exc


_LOCAL = {
    "BadRequestError": BadRequestError,
    "UnknownTopologyError": UnknownTopologyError,
    "UnknownConsistencyLevelError": UnknownConsistencyLevelError,
}


#: the server's refusals of a role: answered as the client's 403 (:class:`TsbPermissionError`)
_ACCESS_ERRORS = ("AccessDeniedError", "ForbiddenFileError")


def _error_class(name: str | None) -> type[TsbError] | None:
    if not name or name in _ACCESS_ERRORS:
        return None
    if name in _LOCAL:
        return _LOCAL[name]
    cls = getattr(exc_module, name, None)
    if isinstance(cls, type) and issubclass(cls, TsbError):
        return cls
    return None


def raise_for_answer(response: httpx.Response) -> None:
    """Raise the tsb exception an error answer names (message = server's ``detail``)."""
    if response.is_success:
        return
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text}
    if not isinstance(body, dict):
        body = {"detail": body}
    detail = body.get("detail")
    name = body.get("error")
    message = detail if isinstance(detail, str) else f"{response.status_code} {response.reason_phrase}: {detail}"
    cls = _error_class(name)
    if cls is DoubleWriterError:
        jobs = tuple(body.get("jobs") or ("?", "?"))
        raise DoubleWriterError(message, body.get("table") or "", (jobs[0], jobs[-1]))
    if cls is CycleError:
        raise CycleError(message, list(body.get("cycle") or []))
    if cls is not None:
        raise cls(message)
    if response.status_code == 422:
        raise BadRequestError(f"the tsb API refused the request: {message}")
    _raise_for_access(response, message, detail)
    raise TsbApiError(
        f"tsb API {response.request.method} {response.request.url} failed: {message}",
        response.status_code, detail,
    )


def _raise_for_access(response: httpx.Response, message: str, detail: Any) -> None:
    """Name which of URL, authentication or role is wrong (401, 403, a 404/405 with no tsb error)."""
    request = response.request
    where = f"tsb API {request.method} {request.url}"
    status = response.status_code
    if status == 401:
        raise TsbAuthError(f"{where}: not authenticated ({message}): {_LOGIN_HINT}", status, detail)
    if status == 403:
        raise TsbPermissionError(f"{where}: forbidden ({message}): the user is authenticated but its Airflow "
                                 "role may not do this; ask an admin for access to the topology's DAGs",
                                 status, detail)
    if status in (404, 405) and message.split(":")[-1].strip() in ("Not Found", "Method Not Allowed"):
        raise TsbApiError(f"{where}: no tsb API there ({status} {message}); --api-url must be Airflow's base "
                          f"URL (e.g. http://airflow:8080) or the API URL ending in {API_PATH}, on an Airflow "
                          "with the tsb provider installed", status, detail)


def _table_path(name: str) -> str:
    return "/".join(quote(part, safe="") for part in parse_table_name(name))


class TsbClient:
    """Client of the tsb REST API.

    Args:
        base_url: Airflow's base URL (``http://airflow:8080``) or the API root
            (``http://airflow:8080/tsb/api/v1``), see :func:`api_root`.
        token: Airflow JWT sent as ``Authorization: Bearer <token>`` (see :func:`fetch_token`,
            or :meth:`login`).
        timeout: seconds per request.
        monotonic: send the newest barrier seen for the same tables as ``min_barrier``.
        http: an existing ``httpx.Client`` (e.g. FastAPI's ``TestClient``); ``base_url`` is then
            a path prefix such as ``/tsb/api/v1``.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 30.0,
        *,
        monotonic: bool = False,
        http: httpx.Client | None = None,
    ) -> None:
        self.base_url = api_root(base_url)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._owned = http is None
        self.http = http if http is not None else httpx.Client(timeout=timeout, headers=headers)
        self._headers = headers
        self.timeout = timeout
        self.monotonic = monotonic
        self._seen: dict[frozenset[str], int] = {}

    @classmethod
    def login(cls, base_url: str, username: str, password: str, **kwargs: Any) -> TsbClient:
        """A client with a token from Airflow's ``POST /auth/token`` (:func:`fetch_token`);
        ``kwargs`` as the constructor's. Raises :class:`TsbAuthError` for a refused login."""
        timeout = float(kwargs.get("timeout", 30.0))
        return cls(base_url, fetch_token(base_url, username, password, timeout=timeout), **kwargs)

    def __enter__(self) -> TsbClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool (if the client created it)."""
        if self._owned:
            self.http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, self.base_url + path, headers=self._headers, **kwargs)
        except httpx.HTTPError as exc:
            raise TsbApiError(f"tsb API {method} {self.base_url + path} unreachable ({exc}): check --api-url, "
                              "Airflow's base URL such as http://airflow:8080") from exc
        raise_for_answer(response)
        return response.json()

    @staticmethod
    def _params(**values: Any) -> dict[str, Any]:
        return {k: v for k, v in values.items() if v is not None}

    # ------------------------------------------------------------ FLIP-276 registration
    def register_source(
        self, job_id: str, table: str, *, topology: str | None = None, application: str | None = None,
        location: str | None = None, root: bool = False,
    ) -> dict[str, Any]:
        """``POST /register/source/{job_id}/{c}/{d}/{t}``; returns the job (JobOut)."""
        body = self._params(topology=topology, application=application, location=location) | {"root": root}
        return self._call("POST", f"/register/source/{quote(job_id, safe='')}/{_table_path(table)}", json=body)

    def register_sink(
        self, job_id: str, table: str, *, topology: str | None = None, application: str | None = None,
        location: str | None = None,
    ) -> dict[str, Any]:
        """``POST /register/sink/{job_id}/{c}/{d}/{t}``; returns the job (JobOut)."""
        body = self._params(topology=topology, application=application, location=location)
        return self._call("POST", f"/register/sink/{quote(job_id, safe='')}/{_table_path(table)}", json=body)

    def unregister(self, job_id: str) -> dict[str, Any]:
        """``POST /unregister/{job_id}``."""
        return self._call("POST", f"/unregister/{quote(job_id, safe='')}")

    # ------------------------------------------------------------ versions
    def version(
        self, table: str, level: ConsistencyLevel | str = ConsistencyLevel.REPEATABLE_READ, *,
        as_of: int | None = None, min_barrier: int | None = None,
    ) -> dict[str, Any]:
        """``GET /version/{level}/{c}/{d}/{t}``: {table, level, version, barrier, state, location, staged}."""
        slug = ConsistencyLevel.parse(level).value
        return self._call(
            "GET", f"/version/{slug}/{_table_path(table)}", params=self._params(as_of=as_of, min_barrier=min_barrier)
        )

    def versions(
        self, tables: Iterable[str], level: ReadOptions | ConsistencyLevel | str | None = None, **options: Any
    ) -> dict[str, Any]:
        """``POST /versions``: consistent versions of tables Q.

        Args:
            tables: ``catalog.database.table`` names (Q).
            level: a :class:`~airflow_provider_tsb.consistency.ReadOptions`, or a level
                (default REPEATABLE_READ).
            **options: :class:`ReadOptions` fields (``as_of``, ``min_barrier``,
                ``lease_seconds``, ``lease_holder``, ``max_staleness_s``, ``wait_s``: bounded
                staleness, ``StaleReadError`` naming the lagging tables and jobs). With
                ``monotonic=True`` the client raises ``min_barrier`` to the newest barrier it
                has seen for the same tables.

        Returns:
            {level, barrier, as_of, tables{name: {version, barrier, state, location, staged}},
            lease}: the shape of :meth:`Resolution.to_dict
            <airflow_provider_tsb.metastore.records.Resolution.to_dict>`.

        Raises:
            ValueError: invalid options (before any request). The tsb error the server answered.
        """
        opts = ReadOptions.of(level, **options)
        names = list(tables)
        key = frozenset(names)
        if self.monotonic and opts.as_of is None and opts.level is not ConsistencyLevel.READ_UNCOMMITTED:
            seen = self._seen.get(key)
            if seen is not None:
                opts = ReadOptions.of(opts, min_barrier=max(opts.min_barrier or 0, seen))
        answer = self._post_versions(names, opts)
        if self.monotonic and answer.get("barrier") is not None and opts.as_of is None:
            self._seen[key] = max(self._seen.get(key, 0), int(answer["barrier"]))
        return answer

    def _post_versions(self, names: list[str], opts: ReadOptions) -> dict[str, Any]:
        """``POST /versions``; a ``wait_s`` longer than one request may wait
        (:data:`MAX_REQUEST_WAIT_S`) is split into several requests."""
        if not opts.wait_s:
            return self._call("POST", "/versions", json={"tables": names, **opts.to_json()})
        deadline = time.monotonic() + opts.wait_s
        while True:
            chunk = min(MAX_REQUEST_WAIT_S, max(0.0, deadline - time.monotonic()))
            body = {"tables": names, **dataclasses.replace(opts, wait_s=chunk).to_json()}
            # the server holds the request while it waits for a fresh barrier; the timeout is a number,
            # which httpx and the httpx2 of Starlette's TestClient (an ``http`` given) both take
            try:
                return self._call("POST", "/versions", json=body, timeout=chunk + self.timeout)
            except InconsistentReadError:
                if time.monotonic() >= deadline:
                    raise

    # ------------------------------------------------------------ views
    def topology(self, name: str | None = None, *, stale_after_s: float | None = None) -> dict[str, Any]:
        """``GET /topology``: nodes, edges, tables (newest WRITTEN barrier, lag), jobs (stale flag)."""
        return self._call("GET", "/topology", params=self._params(name=name, stale_after_s=stale_after_s))

    def barriers(
        self, topology: str | None = None, *, limit: int | None = None, before: int | None = None
    ) -> dict[str, Any]:
        """``GET /barriers``: {topology, items (newest first), next_before}."""
        return self._call("GET", "/barriers", params=self._params(topology=topology, limit=limit, before=before))

    def table_barriers(self, table: str, *, limit: int | None = None, before: int | None = None) -> dict[str, Any]:
        """``GET /tables/{c}/{d}/{t}/barriers``: {table, items, next_before, consistent{level: ...}}."""
        return self._call(
            "GET", f"/tables/{_table_path(table)}/barriers", params=self._params(limit=limit, before=before)
        )

    def delays(
        self, topology: str | None = None, *, limit: int | None = None, before: int | None = None
    ) -> dict[str, Any]:
        """``GET /delays``: per barrier table delays, job delays and the bottleneck job."""
        return self._call("GET", "/delays", params=self._params(topology=topology, limit=limit, before=before))

    def freshness(self, topology: str | None = None) -> dict[str, Any]:
        """``GET /freshness``: {topology, newest_barrier, missed [tables], tables {table: {target_s,
        lag_s, missed, committed_barrier, bottleneck, ...}}, jobs {job: {lag_s, ...}}}; lags in seconds."""
        return self._call("GET", "/freshness", params=self._params(topology=topology))

    # ------------------------------------------------------------ Delta Sharing recipients
    def create_recipient(self, share: str, *, name: str | None = None, expires_in: int | None = None
                         ) -> dict[str, Any]:
        """``POST /recipients``: a Delta Sharing recipient of ``share`` (edit access to its DAGs);
        ``expires_in`` seconds (default 7 days). The answer holds its ``token``, once."""
        body = self._params(share=share, name=name, expires_in=expires_in)
        return self._call("POST", "/recipients", json=body)

    def recipients(self, share: str | None = None, *, include_ended: bool = False) -> list[dict[str, Any]]:
        """``GET /recipients``: recipients of the shares the user may edit (never their tokens)."""
        params = self._params(share=share) | ({"include_ended": "true"} if include_ended else {})
        return self._call("GET", "/recipients", params=params)

    def revoke_recipient(self, recipient_id: str) -> dict[str, Any]:
        """``DELETE /recipients/{id}``: revoke a recipient; its token and file URLs stop now."""
        return self._call("DELETE", f"/recipients/{quote(recipient_id, safe='')}")
