"""Error answers of the tsb REST API and the route class that produces them.

Errors are JSON ``{"detail": message, "error": exception class}``: unknown table / job /
barrier / topology -> 404; a version or barrier that snapshot expiry removed
(:class:`~airflow_provider_tsb.exceptions.ExpiredVersionError`) -> 410; malformed names, unknown
level, bad parameters -> 422; not allowed by the user's Airflow roles -> 403 (a fixed message,
see :mod:`airflow_provider_tsb.api.access`);
DoubleWriterError, CycleError, InconsistentReadError (the level cannot be satisfied) and other
conflicts with the registered state -> 409; metastore unreachable -> 503; request body over the
limit -> 413. Messages are cut to :data:`~airflow_provider_tsb.api.limits.MAX_DETAIL` characters
and validation errors echo at most :data:`~airflow_provider_tsb.api.limits.MAX_ECHO` characters
of an input (:mod:`airflow_provider_tsb.api.limits`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.responses import Response

from airflow_provider_tsb.api.limits import non_finite_number_error, short_text, validation_error_response
from airflow_provider_tsb.exceptions import (
    AccessDeniedError,
    BadRequestError,
    BarrierNotReadyError,
    CycleError,
    DeltaLogError,
    DoubleWriterError,
    ExpiredVersionError,
    InconsistentReadError,
    LeaseLimitError,
    MetastoreError,
    RecipientTokenError,
    TopologyError,
    TsbError,
)


def status_for(exc: BaseException) -> int:
    """HTTP status of a tsb error (see module docstring)."""
    if isinstance(exc, AccessDeniedError):
        return 403
    if isinstance(exc, LeaseLimitError):
        return 429
    if isinstance(exc, RecipientTokenError):
        return 401
    if isinstance(exc, ExpiredVersionError):
        return 410
    if isinstance(exc, LookupError):
        return 404
    if isinstance(exc, DoubleWriterError | CycleError | InconsistentReadError | BarrierNotReadyError | TopologyError):
        return 409
    if isinstance(exc, ValueError):
        return 422
    if isinstance(exc, MetastoreError):
        return 503
    if isinstance(exc, DeltaLogError):  # a log cleaned up, unreadable or failing its integrity check
        return 409
    return 400


def error_response(exc: TsbError) -> JSONResponse:
    """The JSON answer for a tsb error (shape :class:`~airflow_provider_tsb.api.schemas.ErrorOut`)."""
    body: dict[str, Any] = {"detail": short_text(str(exc)), "error": type(exc).__name__}
    if isinstance(exc, DoubleWriterError):
        body["table"] = exc.table
        body["jobs"] = list(exc.jobs)
    if isinstance(exc, CycleError):
        body["cycle"] = list(exc.cycle)
    return JSONResponse(body, status_code=status_for(exc))


async def _tsb_error_handler(request: Request, exc: Exception) -> Response:
    return error_response(exc)  # type: ignore[arg-type]


def install_exception_handlers(app: FastAPI) -> None:
    """Map every :class:`TsbError` raised by a route of ``app`` to its JSON error answer, and
    answer validation errors with short 422s."""
    app.add_exception_handler(TsbError, _tsb_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_response)


class TsbRoute(APIRoute):
    """Route class that answers tsb errors itself, so the router is correct in any app, and
    refuses JSON bodies holding non-finite numbers with a 422 naming the field."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """Wrap the default handler: non-finite numbers -> 422; :class:`TsbError` -> :func:`error_response`."""
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            if request.method in ("POST", "PUT", "PATCH"):
                problem = non_finite_number_error(await request.body())
                if problem is not None:
                    return await validation_error_response(request, problem)
            try:
                return await handler(request)
            except TsbError as exc:
                return error_response(exc)

        return guarded


@contextmanager
def client_errors() -> Iterator[None]:
    """Plain ValueErrors raised on client input (e.g. as_of with READ_COMMITTED) become 422s."""
    try:
        yield
    except TsbError:
        raise
    except ValueError as exc:
        raise BadRequestError(str(exc)) from exc
