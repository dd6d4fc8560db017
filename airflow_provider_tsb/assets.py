"""Airflow Assets for the tables of a topology, and what their asset events carry.

Each table is an Airflow :class:`~airflow.sdk.Asset` named by its canonical table name, with
the Delta location as URI (``file:///...`` for local paths), in the asset group ``tsb``. The
asset's own ``extra`` holds ``tsb_topology`` and ``tsb_history``: the path of the table's
barrier history in the TSB UI (:func:`~airflow_provider_tsb.ui.links.history_path`; Airflow
shows an asset's extra on its page, Airflow docs "Asset definitions", "extra").

The job operator emits one asset event per sink and run (Airflow docs "Asset events",
``outlet_events[asset].extra``) whose ``extra`` is :func:`barrier_event_extra`: the barrier,
its timestamp, the Delta version, the commit state and the lag (keys in
:data:`EVENT_EXTRA_KEYS`; docs/airflow.md lists them).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetWatcher

from airflow_provider_tsb.names import normalize_table_name
from airflow_provider_tsb.topology import Topology
from airflow_provider_tsb.ui.links import history_path, iso_utc

if TYPE_CHECKING:
    from airflow_provider_tsb.metastore.store import MetaStore

#: keys of an asset event's ``extra`` written by :func:`barrier_event_extra`
EVENT_EXTRA_KEYS = (
    "barrier", "barrier_ts_ms", "barrier_ts", "ts_kind", "version", "state", "commit_state", "lag_s",
    "table", "topology", "job", "tsb_history",
)


def location_uri(location: str) -> str:
    """``/abs/path`` -> ``file:///abs/path``; URIs with a scheme (``s3://``...) unchanged."""
    if "://" in location:
        return location
    return "file://" + os.path.abspath(location)


def table_asset(topology: Topology, table: str) -> Asset:
    """The Asset of ``table`` (a table of ``topology``), its ``extra`` linking to its TSB history:
    the outlet of the job that writes it.

    For event-driven scheduling on committed barriers use :func:`committed_barrier_asset`, an
    asset of its own: Airflow keeps one set of watchers per asset, taken from the DAG file parsed
    last, so a watcher on a table's asset is cancelled each time a DAG file whose job task has
    that asset as an outlet (without the watcher) is parsed, and a DAG scheduled on it also runs
    from the job's own asset events.
    """
    name = normalize_table_name(table)
    return Asset(
        name=name,
        uri=location_uri(topology.location(name)),
        group="tsb",
        extra={"tsb_topology": topology.name, "tsb_history": history_path(topology.name, name)},
    )


def committed_barrier_asset(
    topology: Topology, tables: Sequence[str], *, tsb_conn_id: str = "tsb_default", poll_interval_s: float = 5.0,
    from_barrier: int | None = None,
) -> Asset:
    """An Asset that receives one event per barrier committed in every table of ``tables``: put
    it in a DAG's ``schedule`` to run the DAG once per committed barrier (Airflow docs
    "Event-driven scheduling").

    Its identity is its own (name ``tsb.committed.<topology>.<digest of the tables>``, URI
    ``tsb://committed/<topology>/<digest>``, group ``tsb``), so no job task has it as an outlet:
    its watcher keeps running whatever DAG file is parsed, and only the watcher's events (one per
    barrier, the barrier in ``extra["payload"]``) schedule the DAG. Every DAG file that builds it
    from the same topology and tables builds the same asset and watcher.

    Args:
        tables: table names of ``topology`` (the barrier must be WRITTEN in all of them).
        tsb_conn_id, poll_interval_s, from_barrier: the watcher's trigger's
            (:class:`~airflow_provider_tsb.triggers.barrier_committed.TsbBarrierCommittedEventTrigger`).

    Raises:
        UnknownTableError: a table is not one of ``topology``'s.

    Example::

        commits = committed_barrier_asset(topology, ["flights.carrier_ranking"])
        with DAG("report", schedule=[commits]):
            TsbBarrierCommittedSensor(task_id="barrier", tables=["flights.carrier_ranking"])
    """
    import hashlib

    from airflow_provider_tsb.exceptions import UnknownTableError

    names = sorted({normalize_table_name(t) for t in tables})
    unknown = [n for n in names if n not in topology.tables]
    if unknown or not names:
        raise UnknownTableError(f"committed_barrier_asset: {unknown or 'no table'} of topology {topology.name!r}; "
                                f"its tables are {sorted(topology.tables)}")
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:12]
    watcher = committed_barrier_watcher(names, name=f"tsb_committed_{digest}", tsb_conn_id=tsb_conn_id,
                                        poll_interval_s=poll_interval_s, from_barrier=from_barrier)
    return Asset(
        name=f"tsb.committed.{topology.name}.{digest}",
        uri=f"tsb://committed/{topology.name}/{digest}",
        group="tsb",
        extra={"tsb_topology": topology.name, "tsb_tables": names,
               "tsb_history": {n: history_path(topology.name, n) for n in names}},
        watchers=[watcher],
    )


def committed_barrier_watcher(
    tables: Sequence[str], *, name: str = "tsb_barrier_committed", tsb_conn_id: str = "tsb_default",
    poll_interval_s: float = 5.0, from_barrier: int | None = None,
) -> AssetWatcher:
    """The ``AssetWatcher`` of :func:`committed_barrier_asset`: it fires once per barrier
    committed in every table of ``tables``
    (:class:`~airflow_provider_tsb.triggers.barrier_committed.TsbBarrierCommittedEventTrigger`;
    arguments as there). Give it to an asset of its own, never a table's (see :func:`table_asset`)."""
    from airflow_provider_tsb.triggers.barrier_committed import TsbBarrierCommittedEventTrigger

    trigger = TsbBarrierCommittedEventTrigger(list(tables), tsb_conn_id=tsb_conn_id,
                                              poll_interval_s=poll_interval_s, from_barrier=from_barrier)
    return AssetWatcher(name=name, trigger=trigger)


def barrier_event_extra(
    store: MetaStore, topology: Topology, table: str, barrier: int, *, job_id: str | None = None
) -> dict[str, Any]:
    """The ``extra`` of the asset event announcing ``barrier`` WRITTEN in ``table``.

    Keys (JSON values): ``barrier`` (id), ``barrier_ts_ms`` (barrier timestamp, epoch ms: system
    time or the event-time watermark, see ``ts_kind``) and ``barrier_ts`` (the same, ISO 8601
    UTC), ``version`` (the Delta version of ``table`` tagged with the barrier), ``state`` (the
    table's state: ``WRITTEN``), ``commit_state`` (``COMMIT`` when the barrier is WRITTEN in every
    intermediate table of the topology, ``PRECOMMIT`` when some are only PROCESSED, ``None``
    while some have not processed it; FLIP-276 "Data Consistency Type"), ``lag_s`` (seconds from
    the barrier's generation to its WRITTEN in ``table``: the table's end-to-end delay), ``table``,
    ``topology``, ``job`` and ``tsb_history`` (see :func:`history_path`).

    Raises:
        UnknownBarrierError: the barrier was not generated in the topology.
    """
    from airflow_provider_tsb.metastore.records import CommitState

    name = normalize_table_name(table)
    info = store.barriers.get(topology.name, barrier)
    state = store.table_states.get(name, barrier)
    written_ms = state.written_at_ms if state is not None else None
    intermediate = {n for n, t in topology.tables.items() if t.kind == "intermediate"}
    states = {s.table: s.state for s in store.table_states.states_at(topology.name, [barrier])}
    commit = CommitState.of(states.get(n) for n in sorted(intermediate)) if intermediate else None
    return {
        "barrier": barrier,
        "barrier_ts_ms": info.ts_ms,
        "barrier_ts": iso_utc(info.ts_ms),
        "ts_kind": str(info.ts_kind),
        "version": state.version if state is not None else None,
        "state": str(state.state) if state is not None else None,
        "commit_state": str(commit) if commit is not None else None,
        "lag_s": round(max(0.0, (written_ms - info.created_at_ms) / 1000), 3) if written_ms is not None else None,
        "table": name,
        "topology": topology.name,
        "job": job_id,
        "tsb_history": history_path(topology.name, name),
    }
