"""Barrier generation: :class:`TsbBarrierOperator` (FLIP-276 "Timestamp Barrier", generation).

The operator reads the current Delta version of every root table of the topology and records
them, with a new barrier id, in one metastore transaction: the (barrier, offset) map that
makes replay deterministic. A retried task of the same DAG run gets the same barrier back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_tsb.exceptions import TsbError
from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook
from airflow_provider_tsb.topology import Topology


class RootTableError(TsbError):
    """A root table does not exist or cannot be read at barrier generation."""


def read_root_versions(topology: Topology) -> dict[str, int]:
    """Current Delta version of every root table of ``topology``.

    Raises:
        RootTableError: a root table is missing or unreadable (names the table and location).
    """
    from airflow_provider_tsb.delta.barriers import root_version

    versions: dict[str, int] = {}
    for table in topology.root_tables:
        location = topology.location(table.name)
        try:
            versions[table.name] = root_version(location)
        except Exception as exc:  # TableNotFoundError, or an unreadable log
            raise RootTableError(
                f"root table {table.name!r} at {location!r} cannot be read for barrier generation: {exc}"
            ) from exc
    return versions


def event_time_watermark(location: str, version: int, column: str) -> int | None:
    """Max of ``column`` at Delta ``version`` in epoch ms, from the files' statistics (no data scan).

    Returns ``None`` for an empty table or a column without statistics.
    """
    from deltalake import DeltaTable

    actions = DeltaTable(location, version=version).get_add_actions(flatten=True)
    name = f"max.{column}"
    if name not in actions.schema.names or actions.num_rows == 0:
        return None
    values = [v for v in actions.column(name).to_pylist() if v is not None]
    if not values:
        return None
    newest = max(values)
    if isinstance(newest, dt.datetime):
        if newest.tzinfo is None:
            newest = newest.replace(tzinfo=dt.UTC)
        return int(newest.timestamp() * 1000)
    if isinstance(newest, dt.date):
        return int(dt.datetime(newest.year, newest.month, newest.day, tzinfo=dt.UTC).timestamp() * 1000)
    return int(newest)


class TsbBarrierOperator(BaseOperator):
    """Generate the next timestamp barrier of a topology.

    :param topology: the topology (declared in the DAG file). Its tables and jobs are
        registered in the metastore first (atomic cycle and double-writer checks).
    :param ts_kind: ``system`` (barrier timestamp = now) or ``event`` (the event-time
        watermark: max of each root table's ``event_time_column`` at the recorded version).
    :param tsb_conn_id: metastore connection (default ``tsb_default``).

    Returns (XCom) the barrier id, an ``int``. Raises :class:`RootTableError` naming the table
    and its location when a root table is missing.
    """

    template_fields: Sequence[str] = ()
    ui_color = "#f4d58d"

    def __init__(
        self,
        *,
        topology: Topology,
        ts_kind: str = "system",
        tsb_conn_id: str = TsbMetastoreHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if ts_kind not in ("system", "event"):
            raise ValueError(f"{self.task_id}: ts_kind must be 'system' or 'event', got {ts_kind!r}")
        if ts_kind == "event" and not any(t.event_time_column for t in topology.root_tables):
            raise ValueError(
                f"{self.task_id}: ts_kind='event' needs a root table declared with event_time_column "
                f"in topology {topology.name!r}"
            )
        self.topology = topology
        self.ts_kind = ts_kind
        self.tsb_conn_id = tsb_conn_id

    def execute(self, context: Any) -> int:
        store = TsbMetastoreHook(self.tsb_conn_id).get_conn()
        store.register_topology(self.topology)
        versions = read_root_versions(self.topology)
        ts_ms = None
        if self.ts_kind == "event":
            marks = [
                event_time_watermark(self.topology.location(t.name), versions[t.name], t.event_time_column)
                for t in self.topology.root_tables
                if t.event_time_column
            ]
            known = [m for m in marks if m is not None]
            if not known:
                raise RootTableError(
                    f"topology {self.topology.name!r}: no event-time watermark yet (root tables are empty)"
                )
            ts_ms = min(known)
        run = context.get("dag_run")
        run_key = f"{run.dag_id}/{run.run_id}" if run is not None else None
        info = store.create_barrier(
            self.topology.name, versions, ts_ms=ts_ms, ts_kind=self.ts_kind, run_key=run_key
        )
        self.log.info(
            "%s barrier %s of topology %s at %s (%s time); root versions %s",
            "generated" if info.created else "reused (retry of the same run)",
            info.barrier_id, info.topology, info.ts_ms, info.ts_kind, info.root_versions,
        )
        return info.barrier_id


class TsbBarrierEmitterOperator(TsbBarrierOperator):
    """Emit barriers on a short interval (seconds) for streaming-mode topologies.

    Runs for ``duration_s`` seconds (or ``count`` barriers), generating a barrier every
    ``interval_s`` seconds when a root table has a new Delta version (no new data, no barrier).
    Pair it with :class:`~airflow_provider_tsb.operators.spark_job.TsbSparkJobOperator` in
    ``mode="streaming"`` tasks of the same DAG run, which pick up each new barrier as it
    appears. Barriers stay idempotent per (DAG run, sequence number).

    :param interval_s: seconds between barrier attempts (> 0).
    :param duration_s: stop after this many seconds.
    :param count: stop after this many barriers (``None``: only the duration bounds it).

    Returns (XCom) the list of barrier ids generated.
    """

    def __init__(
        self, *, interval_s: float = 5.0, duration_s: float = 300.0, count: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if interval_s <= 0:
            raise ValueError(f"{self.task_id}: interval_s must be positive, got {interval_s}")
        self.interval_s = interval_s
        self.duration_s = duration_s
        self.count = count

    def execute(self, context: Any) -> list[int]:  # type: ignore[override]
        import time

        store = TsbMetastoreHook(self.tsb_conn_id).get_conn()
        store.register_topology(self.topology)
        run = context.get("dag_run")
        prefix = f"{run.dag_id}/{run.run_id}" if run is not None else f"emitter/{time.time()}"
        emitted: list[int] = []
        deadline = time.monotonic() + self.duration_s
        seq = 0
        while time.monotonic() < deadline and (self.count is None or len(emitted) < self.count):
            versions = read_root_versions(self.topology)
            last = store.latest_barrier(self.topology.name)
            if last is None or versions != last.root_versions:
                info = store.create_barrier(self.topology.name, versions, ts_kind="system", run_key=f"{prefix}#{seq}")
                seq += 1
                emitted.append(info.barrier_id)
                self.log.info("barrier %s: root versions %s", info.barrier_id, versions)
            time.sleep(self.interval_s)
        return emitted
