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

    def _watermark(self, versions: dict[str, int]) -> int | None:
        """Event-time watermark (epoch ms) at ``versions``: the min over root tables of the max of
        their ``event_time_column``; ``None`` while no root table has rows."""
        marks = [
            event_time_watermark(self.topology.location(t.name), versions[t.name], t.event_time_column)
            for t in self.topology.root_tables
            if t.event_time_column
        ]
        known = [m for m in marks if m is not None]
        return min(known) if known else None

    def execute(self, context: Any) -> int:
        store = TsbMetastoreHook(self.tsb_conn_id).get_conn()
        store.register_topology(self.topology)
        versions = read_root_versions(self.topology)
        ts_ms = None
        if self.ts_kind == "event":
            ts_ms = self._watermark(versions)
            if ts_ms is None:
                raise RootTableError(
                    f"topology {self.topology.name!r}: no event-time watermark yet (root tables are empty)"
                )
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
    """Emit barriers every few seconds for a streaming topology, and a final one at end of input.

    Every ``interval_s`` seconds it reads the root tables' Delta versions and generates a
    barrier when one of them has a new version (no new data, no barrier). Its timestamps are
    system time or, with ``ts_kind="event"``, the event-time watermark (as
    :class:`TsbBarrierOperator`). Run it in the same DAG run as the
    :class:`~airflow_provider_tsb.operators.spark_job.TsbSparkJobOperator` tasks in
    ``mode="streaming"`` (``TopologyTaskGroup(..., mode="streaming")`` renders both), which
    pick up each barrier as it appears.

    End of input (FLIP-147): when every root table's newest version is marked
    ``tsb.end_of_input`` (:func:`airflow_provider_tsb.delta.roots.mark_end_of_input`), it
    generates a *final* barrier and returns; the streaming jobs stop once they have committed
    it, and the DAG run can succeed. When ``duration_s`` or ``count`` runs out first, a final
    barrier is generated too (``final_on_stop=False`` leaves the jobs running instead).
    Root tables that do not exist yet are waited for. A retry of the task in the same DAG run
    gets the barriers of its run keys back (``<dag_id>/<run_id>#<n>``, ``...#final``).

    :param interval_s: seconds between barrier attempts (> 0; templated).
    :param duration_s: stop after this many seconds (templated).
    :param count: stop after this many barriers (``None``: only the duration or the end of
        input bound it).
    :param final_on_stop: generate a final barrier when ``duration_s``/``count`` runs out.
    :param max_in_flight: backpressure: generate a barrier only while fewer than this many
        barriers are generated but not yet COMMIT (WRITTEN in every table of the topology), like
        Flink's maximum of concurrent checkpoints. A topology that cannot keep up with
        ``interval_s`` then gets fewer, larger barriers instead of a queue that grows without
        bound, and the delay from a barrier to its COMMIT stays bounded. ``None``: no limit.

    Returns (XCom) the list of barrier ids generated, the final one last.

    Raises:
        RootTableError: a root table exists but cannot be read.
    """

    template_fields: Sequence[str] = ("interval_s", "duration_s")

    def __init__(
        self,
        *,
        interval_s: float | str = 5.0,
        duration_s: float | str = 3600.0,
        count: int | None = None,
        final_on_stop: bool = True,
        max_in_flight: int | None = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.interval_s = interval_s
        self.duration_s = duration_s
        if not isinstance(interval_s, str):  # templated values are checked when rendered
            self._seconds("interval_s")
        if not isinstance(duration_s, str):
            self._seconds("duration_s")
        self.interval_s = interval_s
        self.duration_s = duration_s
        self.count = count
        self.final_on_stop = final_on_stop
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"{self.task_id}: max_in_flight must be at least 1 (or None), got {max_in_flight}")
        self.max_in_flight = max_in_flight

    def _seconds(self, field_name: str) -> float:
        """A positive number of seconds from ``field_name`` (rendered template or number).

        Raises:
            ValueError: not a positive number (names the task, the field and the value).
        """
        value = getattr(self, field_name)
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = float("nan")
        if not (seconds > 0 and seconds != float("inf")):
            raise ValueError(f"{self.task_id}: {field_name} must be a positive number of seconds, got {value!r}")
        return seconds

    def _current_versions(self) -> dict[str, int] | None:
        """Root versions now, or ``None`` while a root table does not exist yet."""
        from airflow_provider_tsb.delta.log import table_exists

        if not all(table_exists(self.topology.location(t.name)) for t in self.topology.root_tables):
            return None
        return read_root_versions(self.topology)

    def _input_ended(self) -> bool:
        from airflow_provider_tsb.delta.roots import input_ended

        return all(input_ended(self.topology.location(t.name)) for t in self.topology.root_tables)

    def execute(self, context: Any) -> list[int]:  # type: ignore[override]
        import time

        store = TsbMetastoreHook(self.tsb_conn_id).get_conn()
        store.register_topology(self.topology)
        run = context.get("dag_run")
        prefix = f"{run.dag_id}/{run.run_id}" if run is not None else f"emitter/{time.time()}"
        interval_s, duration_s = self._seconds("interval_s"), self._seconds("duration_s")
        emitted: list[int] = []
        deadline = time.monotonic() + duration_s
        seq = 0
        while True:
            versions = self._current_versions()
            # ended at exactly these versions: the markers are the newest commits and no commit
            # landed between reading the versions and the markers (else the final barrier could
            # miss the flights table's marker commit written just after the weather's)
            ended = versions is not None and self._input_ended() and self._current_versions() == versions
            out_of_time = time.monotonic() >= deadline or (self.count is not None and len(emitted) >= self.count)
            if versions is not None and (ended or (out_of_time and self.final_on_stop)):
                info = self._generate(store, versions, f"{prefix}#final", final=True)
                if info is not None:
                    emitted.append(info.barrier_id)
                    why = "end of input" if ended else "duration or count reached"
                    self.log.info("final barrier %s (%s): root versions %s", info.barrier_id, why, versions)
                break
            if out_of_time:
                self.log.warning("stopping without a final barrier: root tables %s not readable", versions)
                break
            last = store.latest_barrier(self.topology.name)
            changed = versions is not None and (last is None or versions != last.root_versions)
            if changed and self._has_room(store, last):
                info = self._generate(store, versions, f"{prefix}#{seq}")
                if info is not None:
                    seq += 1
                    emitted.append(info.barrier_id)
                    self.log.info("barrier %s: root versions %s", info.barrier_id, versions)
            time.sleep(interval_s)
        return emitted

    def _has_room(self, store: Any, last: Any) -> bool:
        """Whether fewer than ``max_in_flight`` barriers are generated but not COMMIT."""
        if self.max_in_flight is None or last is None:
            return True
        sinks = [t.name for t in self.topology.tables.values() if t.kind == "intermediate"]
        heads = [store.newest_written(t) for t in sinks]
        committed = min((h.barrier_id if h is not None else 0) for h in heads) if heads else last.barrier_id
        return last.barrier_id - committed < self.max_in_flight

    def _generate(self, store: Any, versions: dict[str, int], run_key: str, *, final: bool = False) -> Any:
        """One barrier at ``versions``; ``None`` while an event-time watermark is unknown (no rows yet)."""
        ts_ms = None
        if self.ts_kind == "event":
            ts_ms = self._watermark(versions)
            if ts_ms is None:
                return None
            last = store.latest_barrier(self.topology.name)
            if last is not None and last.ts_kind == "event":
                ts_ms = max(ts_ms, last.ts_ms)  # an empty final epoch keeps the watermark
        return store.create_barrier(
            self.topology.name, versions, ts_ms=ts_ms, ts_kind=self.ts_kind, run_key=run_key, final=final
        )
