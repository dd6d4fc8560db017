"""The UI's pages as a FastAPI router: ``/ui/lineage``, ``/ui/delays`` and ``/ui/freshness``.

:func:`pages_router` takes its collaborators from the app that mounts it
(:func:`airflow_provider_tsb.api.app.create_app`): the dependency that authenticates the user
(Airflow's login: bearer JWT or the UI's ``_token`` cookie), the metastore lookup and the
authorization policy of a user. So the pages hold only what they render
(:func:`~airflow_provider_tsb.ui.render_lineage` and its siblings), and ``ui/`` imports nothing
of the API. The renderers and the lookups may block, so they run in Starlette's worker threads.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse

__all__ = ["UI_PREFIX", "pages_router"]

UI_PREFIX = "/ui"
#: the longest topology name or DAG id a page takes (the API's limit)
NAME_MAX = 250


def pages_router(
    current_user: Callable[..., Awaitable[Any]],
    store: Callable[[], Any],
    access: Callable[[Any, Any], Any],
) -> APIRouter:
    """The pages' router (prefix :data:`UI_PREFIX`, not in the OpenAPI document).

    Args:
        current_user: the FastAPI dependency giving the authenticated Airflow user (raises 401 /
            403 first; the app answers those on a page with a login link).
        store: ``() -> MetaStore | None``: the deployment's metastore (``None``: the page
            renders and reports that the metastore is unreachable).
        access: ``(user, store) -> TopologyAccess | None``: what the user may read.
    """
    from starlette.concurrency import run_in_threadpool

    from airflow_provider_tsb.ui import render_delays, render_freshness, render_lineage

    router = APIRouter(prefix=UI_PREFIX, tags=["tsb-ui"], include_in_schema=False)

    @router.get("/lineage", response_class=HTMLResponse)
    async def lineage_page(
        user: Any = Depends(current_user),
        topology: Annotated[str | None, Query(max_length=NAME_MAX)] = None,
        dag_id: Annotated[str | None, Query(max_length=NAME_MAX)] = None,
        table: Annotated[str | None, Query(max_length=NAME_MAX)] = None,
    ) -> HTMLResponse:
        """The lineage graph of a topology (``?topology=``, or ``?dag_id=`` from the DAG tab);
        ``?table=`` opens that table's barrier history (the ``tsb_history`` link of its asset)."""
        metastore = await run_in_threadpool(store)
        body = await run_in_threadpool(render_lineage, metastore, user.get_name(), topology, dag_id,
                                       access(user, metastore), table)
        return HTMLResponse(body)

    @router.get("/delays", response_class=HTMLResponse)
    async def delays_page(
        user: Any = Depends(current_user),
        topology: Annotated[str | None, Query(max_length=NAME_MAX)] = None,
        dag_id: Annotated[str | None, Query(max_length=NAME_MAX)] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> HTMLResponse:
        """Barrier delays of a topology: end-to-end per table, per job, bottleneck (``limit`` barriers)."""
        metastore = await run_in_threadpool(store)
        body = await run_in_threadpool(render_delays, metastore, user.get_name(), topology, dag_id, limit,
                                       access(user, metastore))
        return HTMLResponse(body)

    @router.get("/freshness", response_class=HTMLResponse)
    async def freshness_page(
        user: Any = Depends(current_user),
        topology: Annotated[str | None, Query(max_length=NAME_MAX)] = None,
        dag_id: Annotated[str | None, Query(max_length=NAME_MAX)] = None,
    ) -> HTMLResponse:
        """Freshness of a topology's tables: lag, target, MISSED and the bottleneck job per table."""
        metastore = await run_in_threadpool(store)
        body = await run_in_threadpool(render_freshness, metastore, user.get_name(), topology, dag_id,
                                       access(user, metastore))
        return HTMLResponse(body)

    return router
