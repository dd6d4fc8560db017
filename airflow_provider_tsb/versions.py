"""Consistent Delta versions of a set of tables at a consistency level (FLIP-276 "MetaService").

:class:`VersionResolver` answers "which Delta version of each table of Q do I read?" at the
four levels of FLIP-276 "Data Consistency Type":

* ``READ_UNCOMMITTED``: each table at its latest Delta version, read from the Delta log with
  delta-rs (``DeltaTable(location).version()``), tagged with the barrier the metastore records
  at that version when there is one. Fast; may mix barriers (inconsistent).
* ``READ_COMMITTED`` / ``REPEATABLE_READ`` / AS OF a barrier: delegated to
  :meth:`MetaStore.resolve <airflow_provider_tsb.metastore.store.MetaStore.resolve>`.

:func:`resolve_versions` returns the same answer as a JSON-ready dict, through the REST API when
an ``api_url`` is given (see :class:`~airflow_provider_tsb.client.TsbClient`) or from the
metastore otherwise. It backs ``tsb versions``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.metastore.store import Resolution, TableVersion
from airflow_provider_tsb.names import normalize_table_name

if TYPE_CHECKING:
    from airflow_provider_tsb.metastore.store import MetaStore

#: ``TableVersion.state`` of a READ_UNCOMMITTED answer (the table's latest Delta version).
LATEST = "LATEST"
#: environment variable holding the bearer token :func:`resolve_versions` sends to the REST API
API_TOKEN_ENV = "TSB_API_TOKEN"


def latest_delta_version(location: str) -> int | None:
    """The latest version of the Delta table at ``location`` (``None`` if there is no table yet).

    Cost: one delta-rs snapshot load (log since the last checkpoint).

    Raises:
        DeltaLogError: the table exists but its log cannot be read (message names the location).
    """
    from airflow_provider_tsb.delta.log import normalize_location, open_table, table_exists

    loc = normalize_location(location)
    if not table_exists(loc):
        return None
    return int(open_table(loc).version())


class VersionResolver:
    """Resolve the versions of tables Q at a consistency level.

    Args:
        store: the metastore.
    """

    def __init__(self, store: MetaStore) -> None:
        self.store = store

    def resolve(
        self,
        tables: Iterable[str],
        level: ConsistencyLevel | str = ConsistencyLevel.REPEATABLE_READ,
        as_of: int | None = None,
        min_barrier: int | None = None,
        lease_seconds: float | None = None,
        lease_holder: str | None = None,
    ) -> Resolution:
        """Resolve the Delta version of every table of Q.

        Args:
            tables: ``catalog.database.table`` names (Q).
            level: a :class:`ConsistencyLevel` or its name (``read-committed`` ...).
            as_of: AS OF barrier n (REPEATABLE_READ only).
            min_barrier: the client's last seen barrier (monotonic reads; ignored at
                READ_UNCOMMITTED, which promises nothing).
            lease_seconds: pin the returned versions for this many seconds.
            lease_holder: free text naming the lease holder.

        Returns:
            A :class:`Resolution`. At READ_UNCOMMITTED its ``barrier_id`` is ``None``, each
            table's ``state`` is ``LATEST``, ``version`` its latest Delta version (``None``
            when the Delta table does not exist yet) and ``barrier_id`` the barrier the
            metastore records at that version (``None`` when untagged, e.g. a root table
            ingested after the newest barrier).

        Raises:
            UnknownTableError, InconsistentReadError, TopologyError: see ``MetaStore.resolve``.
            UnknownConsistencyLevelError: ``level`` is not a level.
            ValueError: ``as_of`` with a level other than REPEATABLE_READ, or an empty Q.
        """
        level = ConsistencyLevel.parse(level)
        if level is not ConsistencyLevel.READ_UNCOMMITTED:
            return self.store.resolve(
                tables, level, as_of=as_of, min_barrier=min_barrier, lease_seconds=lease_seconds,
                lease_holder=lease_holder,
            )
        if as_of is not None:
            raise ValueError(
                "as_of is time travel to a COMMIT barrier: use level REPEATABLE_READ, not READ_UNCOMMITTED"
            )
        if lease_seconds is not None and not lease_seconds > 0:
            raise ValueError(f"lease_seconds must be positive, got {lease_seconds}")
        names = list(dict.fromkeys(normalize_table_name(t) for t in tables))
        if not names:
            raise ValueError("resolve() needs at least one table")
        infos = {name: self.store.table(name) for name in names}
        versions = {name: latest_delta_version(info.location) for name, info in infos.items()}  # type: ignore[union-attr]
        barriers = self.store.barriers_at_versions(versions)
        result = {
            name: TableVersion(name, infos[name].location, versions[name], barriers.get(name), LATEST)  # type: ignore[union-attr]
            for name in names
        }
        lease_id = expires = None
        pinned = {name: v for name, v in versions.items() if v is not None}
        if lease_seconds is not None and pinned:
            lease_id, expires = self.store.create_lease(pinned, lease_seconds, lease_holder)
        return Resolution(level, None, result, lease_id, expires, None)


def resolution_to_dict(resolution: Resolution) -> dict[str, Any]:
    """JSON-ready form of a :class:`Resolution` (the shape of ``POST /versions``).

    Shape::

        {"level": "REPEATABLE_READ", "barrier": 7, "as_of": null,
         "tables": {"c.d.t": {"version": 3, "barrier": 7, "state": "WRITTEN",
                              "location": "/wh/c/d/t", "staged": null}},
         "lease": {"id": "...", "expires_at_ms": 1700000000000} | null}
    """
    lease = None
    if resolution.lease_id is not None:
        lease = {"id": resolution.lease_id, "expires_at_ms": resolution.lease_expires_at_ms}
    return {
        "level": resolution.level.value,
        "barrier": resolution.barrier_id,
        "as_of": resolution.as_of,
        "tables": {
            name: {
                "version": tv.version,
                "barrier": tv.barrier_id,
                "state": tv.state,
                "location": tv.location,
                "staged": tv.staged,
            }
            for name, tv in resolution.tables.items()
        },
        "lease": lease,
    }


def resolution_from_dict(data: Mapping[str, Any]) -> Resolution:
    """Inverse of :func:`resolution_to_dict` (for answers received from the REST API)."""
    lease = data.get("lease") or {}
    tables = {
        name: TableVersion(
            name, str(tv["location"]), tv.get("version"), tv.get("barrier"), str(tv["state"]), tv.get("staged")
        )
        for name, tv in dict(data["tables"]).items()
    }
    return Resolution(
        ConsistencyLevel.parse(data["level"]), data.get("barrier"), tables, lease.get("id"),
        lease.get("expires_at_ms"), data.get("as_of"),
    )


def resolve_versions(
    tables: Iterable[str],
    level: ConsistencyLevel | str = ConsistencyLevel.REPEATABLE_READ,
    as_of: int | None = None,
    min_barrier: int | None = None,
    lease_seconds: float | None = None,
    api_url: str | None = None,
    store: MetaStore | None = None,
    *,
    token: str | None = None,
    lease_holder: str | None = None,
) -> dict[str, Any]:
    """Resolve versions and return them as JSON-ready dict (see :func:`resolution_to_dict`).

    Args:
        tables, level, as_of, min_barrier, lease_seconds, lease_holder: see
            :meth:`VersionResolver.resolve`.
        api_url: base URL of the tsb REST API (e.g. ``http://airflow:8080/tsb/api/v1``); when
            given, the answer comes from ``POST /versions`` with bearer ``token`` (default
            ``$TSB_API_TOKEN``).
        store: the metastore to read when no ``api_url`` is given (default: the
            ``tsb_default`` connection through ``TsbMetastoreHook``).

    Raises:
        The errors of :meth:`VersionResolver.resolve` (rebuilt from the server's answer when
        going through the API).
    """
    names = list(tables)
    if api_url:
        from airflow_provider_tsb.client import TsbClient

        with TsbClient(api_url, token=token or os.environ.get(API_TOKEN_ENV)) as client:
            return client.versions(
                names, level=level, as_of=as_of, min_barrier=min_barrier, lease_seconds=lease_seconds,
                lease_holder=lease_holder,
            )
    if store is None:
        from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook

        store = TsbMetastoreHook().get_conn()
    resolution = VersionResolver(store).resolve(
        names, level, as_of=as_of, min_barrier=min_barrier, lease_seconds=lease_seconds, lease_holder=lease_holder
    )
    return resolution_to_dict(resolution)


__all__ = [
    "LATEST",
    "VersionResolver",
    "latest_delta_version",
    "resolution_from_dict",
    "resolution_to_dict",
    "resolve_versions",
]
