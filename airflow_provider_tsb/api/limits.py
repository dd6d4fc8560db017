"""Request limits of the tsb REST API: body size, finite JSON numbers, short validation errors.

* :class:`BodySizeLimitMiddleware` (pure ASGI): a request body larger than ``max_bytes``
  (``[tsb] max_request_body_bytes``, default 1 MiB) gets ``413`` with
  ``{"detail": "request body is larger than ... bytes ..."}`` -- from ``Content-Length`` before
  anything is read, or while a chunked body streams in. The body is never echoed.
* :func:`non_finite_number_error`: JSON allows no ``NaN``/``Infinity`` and Python's parser turns
  ``1e999`` into ``inf``; a body holding one gets ``422`` naming the field
  (``loc: ["body", "lease_seconds"]``) instead of a 500 (Starlette cannot render ``NaN`` back).
* :func:`validation_error_response`: 422 answers (pydantic validation errors) carry ``loc``,
  ``msg``, ``type`` and at most :data:`MAX_ECHO` characters of the offending input, so a 50 MB
  field is not sent back.

Configuration (Airflow config, also ``AIRFLOW__TSB__<KEY>`` environment variables):
``[tsb] max_request_body_bytes`` and ``[tsb] max_lease_seconds`` (see :func:`max_lease_seconds`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from airflow_provider_tsb.caches import CACHES

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Default largest request body, bytes (``[tsb] max_request_body_bytes``).
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
#: Default longest lease a reader may take through the API, seconds (``[tsb] max_lease_seconds``).
DEFAULT_MAX_LEASE_SECONDS = 6 * 3600
#: Characters of an offending input shown in a 422 answer.
MAX_ECHO = 100
#: Characters of an error message shown in any error answer.
MAX_DETAIL = 2000


#: ``[tsb]`` settings read so far in this process: {key: (its environment variables, value)}
_read: dict[str, tuple[tuple[str | None, ...], str | None]] = CACHES.add("api.settings", {})


def config_value(key: str) -> str | None:
    """``[tsb] <key>`` from the Airflow config as written; ``None`` when unset or without Airflow
    (the standalone MetaService app).

    Read from Airflow once per process and key: Airflow parses its config file once, at start,
    and ``conf.get`` costs tens of microseconds (5 % of a sharing query's CPU when read per
    request). The value is read again when ``AIRFLOW__TSB__<KEY>`` (or its ``_CMD`` or
    ``_SECRET`` form) changes in the environment.
    """
    env = tuple(os.environ.get(f"AIRFLOW__TSB__{key.upper()}{suffix}") for suffix in ("", "_CMD", "_SECRET"))
    kept = _read.get(key)
    if kept is not None and kept[0] == env:
        return kept[1]
    try:
        from airflow.configuration import conf
    except ImportError:
        return None
    raw = conf.get("tsb", key, fallback=None)
    value = None if raw in (None, "") else str(raw)
    _read[key] = (env, value)
    return value


def config_flag(key: str, default: bool) -> bool:
    """``[tsb] <key>`` from the Airflow config as a boolean (``True``/``False``, ``1``/``0``,
    ``yes``/``no``, ``on``/``off``; ``default`` without Airflow or when unset).

    Raises:
        ValueError: any other value (names the setting and the value).
    """
    raw = config_value(key)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"[tsb] {key} must be True or False, got {raw!r}")


def config_number(key: str, default: int) -> int:
    """``[tsb] <key>`` from the Airflow config as a positive integer (``default`` without Airflow)."""
    raw = config_value(key)
    if raw is None:
        return default
    try:
        value = int(float(raw))
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"[tsb] {key} must be a positive number, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"[tsb] {key} must be a positive number, got {raw!r}")
    return value


def config_seconds(key: str, default: float, maximum: float = 3600.0) -> float:
    """``[tsb] <key>`` from the Airflow config as seconds from 0 to ``maximum`` (``default``
    without Airflow or when unset).

    Raises:
        ValueError: the setting is not a number in range (names the setting and the value).
    """
    raw = config_value(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not 0 <= value <= maximum:
        raise ValueError(f"[tsb] {key} must be a number of seconds from 0 to {maximum:g}, got {raw!r}")
    return value


def max_request_body_bytes() -> int:
    """``[tsb] max_request_body_bytes``: largest request body in bytes (default 1 MiB)."""
    return config_number("max_request_body_bytes", DEFAULT_MAX_BODY_BYTES)


def max_lease_seconds() -> int:
    """``[tsb] max_lease_seconds``: longest lease through the API in seconds (default 6 h)."""
    return config_number("max_lease_seconds", DEFAULT_MAX_LEASE_SECONDS)


#: default of ``[tsb] max_leased_versions``: Delta versions one user may hold in live leases
DEFAULT_MAX_LEASED_VERSIONS = 2000


def max_leased_versions() -> int:
    """``[tsb] max_leased_versions``: how many Delta versions one principal's live leases taken
    through the API may pin, over every table (default 2,000): a reader cannot pin the warehouse."""
    return config_number("max_leased_versions", DEFAULT_MAX_LEASED_VERSIONS)


#: default of ``[tsb] request_retry_seconds``
DEFAULT_REQUEST_RETRY_SECONDS = 10


def request_retry_seconds() -> int:
    """``[tsb] request_retry_seconds``: how long a request's metastore call is retried through an
    outage before the API answers 503 (default 10 s; a request holds a worker thread meanwhile,
    so this is shorter than the jobs' ``$TSB_METASTORE_RETRY_SECONDS``)."""
    return config_number("request_retry_seconds", DEFAULT_REQUEST_RETRY_SECONDS)


def too_large_detail(max_bytes: int) -> str:
    """The 413 message."""
    return (
        f"request body is larger than {max_bytes} bytes, the limit of the tsb API "
        "([tsb] max_request_body_bytes); send fewer or shorter values"
    )


class BodySizeLimitMiddleware:
    """ASGI middleware: refuse request bodies over ``max_bytes`` with 413 (see module docstring).

    Args:
        app: the ASGI app to wrap.
        max_bytes: the limit in bytes.
    """

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        detail = too_large_detail(self.max_bytes)
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    response = JSONResponse(
                        # errorCode/message: the Delta Sharing error shape (api/sharing/routes.py)
                        {"detail": detail, "error": "RequestTooLarge", "errorCode": "RESOURCE_LIMIT_EXCEEDED",
                         "message": detail},
                        status_code=413,
                    )
                    await response(scope, _drained(receive), send)
                    return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # an HTTPException passes FastAPI's body parsing unchanged: the app answers 413
                    raise HTTPException(413, detail)
            return message

        await self.app(scope, limited, send)


def _drained(receive: Receive) -> Receive:
    """A receive callable that never hands the (refused) body to anyone."""

    async def nothing() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    return nothing


class _NonFinite(float):
    """A non-finite JSON number, remembered with its spelling."""

    token: str

    def __new__(cls, token: str) -> _NonFinite:
        value = super().__new__(cls, float("nan"))
        value.token = token
        return value


def _parse_float(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _find_non_finite(value: Any, path: tuple[str | int, ...] = ()) -> tuple[tuple[str | int, ...], str] | None:
    if isinstance(value, _NonFinite):
        return path, value.token
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _find_non_finite(item, (*path, key))
        if found is not None:
            return found
    return None


def non_finite_number_error(body: bytes) -> RequestValidationError | None:
    """The 422 error for a JSON body holding ``NaN``, ``Infinity`` or an overflowing number
    (``1e999``), naming its location; ``None`` for any other body (invalid JSON included: FastAPI
    reports that itself)."""
    if not body:
        return None
    try:
        parsed = json.loads(body, parse_constant=_NonFinite, parse_float=_parse_float)
    except (ValueError, RecursionError):
        return None
    found = _find_non_finite(parsed)
    if found is None:
        return None
    path, token = found
    return RequestValidationError(
        [{
            "type": "finite_number",
            "loc": ("body", *path),
            "msg": f"Input should be a finite number; JSON has no {token} (numbers must be finite)",
            "input": token[:MAX_ECHO],
        }]
    )


def _short(value: Any) -> Any:
    """An input as shown in a 422 answer: scalars up to MAX_ECHO characters, containers elided."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= MAX_ECHO else f"{text[:MAX_ECHO]}... ({len(text)} characters)"


def short_errors(errors: Any) -> list[dict[str, Any]]:
    """Validation errors with ``loc``, ``msg``, ``type`` and a shortened ``input`` (no ``ctx``
    objects, no ``url``): small and always JSON-serialisable."""
    out = []
    for err in errors:
        item = {"type": str(err.get("type", "")), "loc": [_short(p) for p in err.get("loc", ())],
                "msg": short_text(str(err.get("msg", "")))}
        if "input" in err:
            item["input"] = _short(err["input"])
        out.append(item)
    return out


def short_text(text: str, limit: int = MAX_DETAIL) -> str:
    """``text`` cut to ``limit`` characters (error messages may quote client input)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


async def validation_error_response(request: Request, exc: Exception) -> Response:
    """Exception handler for :class:`RequestValidationError`: a short 422 (module docstring)."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    return JSONResponse({"detail": short_errors(errors)}, status_code=422)
