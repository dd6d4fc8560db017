"""Consistent Delta versions of a set of tables as JSON: the answer behind ``tsb versions``.

:func:`resolve_versions` resolves tables Q with :class:`~airflow_provider_tsb.consistency.ReadOptions`
at one of the four levels of FLIP-276 "Data Consistency Type", through the REST API when an
``api_url`` is given (see :class:`~airflow_provider_tsb.read.client.TsbClient`) or from the
metastore (:meth:`store.resolution.resolve <airflow_provider_tsb.metastore.resolution.ResolutionManager.resolve>`)
otherwise, and returns :meth:`Resolution.to_dict
<airflow_provider_tsb.metastore.records.Resolution.to_dict>`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from airflow_provider_tsb.consistency import ConsistencyLevel, ReadOptions, table_list

if TYPE_CHECKING:
    from airflow_provider_tsb.metastore.store import MetaStore

#: environment variable holding the bearer token :func:`resolve_versions` sends to the REST API
API_TOKEN_ENV = "TSB_API_TOKEN"
#: environment variables of an Airflow user to log in as when no token is given
API_USER_ENV = "TSB_API_USER"
API_PASSWORD_ENV = "TSB_API_PASSWORD"


def resolve_versions(
    tables: Iterable[str],
    level: ReadOptions | ConsistencyLevel | str | None = None,
    *,
    api_url: str | None = None,
    token: str | None = None,
    username: str | None = None,
    password: str | None = None,
    store: MetaStore | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Resolve versions and return them as a JSON-ready dict.

    Args:
        tables: ``catalog.database.table`` names (Q).
        level: a :class:`ReadOptions`, or a level (default REPEATABLE_READ).
        api_url: Airflow's base URL (``http://airflow:8080``) or the tsb API root
            (``.../tsb/api/v1``); when given, the answer comes from ``POST /versions`` with bearer
            ``token`` (default ``$TSB_API_TOKEN``), or else with a token Airflow's
            ``POST /auth/token`` gives ``username`` and ``password`` (default ``$TSB_API_USER``
            and ``$TSB_API_PASSWORD``).
        username, password: an Airflow user to log in as when there is no token.
        store: the metastore to read when no ``api_url`` is given (default: the
            ``tsb_default`` connection through ``TsbMetastoreHook``).
        **options: :class:`ReadOptions` fields (``as_of``, ``min_barrier``, ``lease_seconds``,
            ``lease_holder``, ``max_staleness_s``, ``wait_s``).

    Returns:
        The shape of :meth:`Resolution.to_dict`: {level, barrier, as_of, tables{name: {version,
        barrier, state, location, staged}}, lease}.

    Raises:
        TsbAuthError: no token and no user, a refused login, or a 401 answer.
        TsbPermissionError: the user's role may not read these tables (403).
        TsbApiError: no tsb API at ``api_url`` (names the URL and what was expected).
        The errors of ``store.resolution.resolve`` (rebuilt from the server's answer when going
        through the API).
    """
    opts = ReadOptions.of(level, **options)
    names = table_list(tables)
    if api_url:
        from airflow_provider_tsb.read.client import TsbClient, fetch_token

        token = token or os.environ.get(API_TOKEN_ENV)
        username = username or os.environ.get(API_USER_ENV)
        if not token and username:
            token = fetch_token(api_url, username, password or os.environ.get(API_PASSWORD_ENV) or "")
        with TsbClient(api_url, token=token) as client:
            return client.versions(names, opts)
    if store is None:
        from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook

        store = TsbMetastoreHook().get_conn()
    return store.resolution.resolve(names, opts).to_dict()


__all__ = ["API_PASSWORD_ENV", "API_TOKEN_ENV", "API_USER_ENV", "resolve_versions"]
