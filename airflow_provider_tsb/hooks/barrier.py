"""Barrier generation (FLIP-276 "Timestamp Barrier"): :class:`TsbBarrierHook`.

Generating barrier n records, in one metastore transaction, the current Delta version of every
root table of the topology: the (barrier, offset) map that makes replay deterministic. The
barrier's timestamp is system time or the event-time watermark (the min over root tables of
the max of their ``event_time_column``). A run key (``<dag_id>/<run_id>``) makes generation
idempotent: a retried task of the same DAG run gets the same barrier back. Every barrier is
also written to the topology's barrier log in Delta (:func:`barrier_log_of`), from which
``tsb db rebuild`` restores a lost metastore.

The emitter (:meth:`TsbBarrierHook.emit`) generates barriers for a streaming topology while
new root versions arrive, with backpressure, and a *final* barrier at end of input (FLIP-147).
:class:`~airflow_provider_tsb.operators.barrier.TsbBarrierOperator` and
:class:`~airflow_provider_tsb.operators.barrier.TsbBarrierEmitterOperator` hold the parameters
and call this hook.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_tsb.exceptions import RootTableError, TopologyError
from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook, use_storage_connection
from airflow_provider_tsb.metastore.records import TsKind
from airflow_provider_tsb.metastore.store import BarrierInfo, MetaStore
from airflow_provider_tsb.topology import Topology

#: seconds an emitter's lease of its topology lasts without renewal (at least 3 intervals)
EMITTER_LEASE_S = 30.0


def barrier_log_of(topology: Topology) -> str:
    """Location of ``topology``'s barrier log: ``<warehouse>/_tsb/<topology>/barrier_log``
    (:func:`airflow_provider_tsb.delta.barrier_log.barrier_log_location`)."""
    from airflow_provider_tsb.delta.barrier_log import barrier_log_location

    return barrier_log_location(topology.warehouse, topology.name)


def read_root_versions(topology: Topology) -> dict[str, int]:
    """Current Delta version of every root table of ``topology``: ``{table name: version}``.

    Raises:
        RootTableError: a root table is missing or unreadable (names the table and location).
    """
    from airflow_provider_tsb.delta.barriers import root_version
    from airflow_provider_tsb.delta.storage import configured_options, is_remote

    versions: dict[str, int] = {}
    for table in topology.root_tables:
        location = topology.location(table.name)
        try:
            versions[table.name] = root_version(location)
        except Exception as exc:  # TableNotFoundError, or an unreadable log
            try:
                unset = not configured_options()
            except ValueError:  # a malformed $TSB_STORAGE_OPTIONS: the error below is about the table
                unset = False
            hint = ""
            if is_remote(location) and unset:
                hint = (" (no storage options are set in this process: give the task the Airflow connection of "
                        "the object storage, storage_conn_id=..., or set $TSB_STORAGE_OPTIONS)")
            raise RootTableError(
                f"root table {table.name!r} at {location!r} cannot be read for barrier generation{hint}: {exc}"
            ) from exc
    return versions


def domain_root_reader(topology: Topology) -> Callable[[str, str], int]:
    """The ``read_root_version`` of :meth:`~airflow_provider_tsb.metastore.barriers.BarrierManager.create`
    for ``topology``: the current Delta version of another root table of its barrier domain, at
    its registered location (a barrier records every root version of the domain;
    :mod:`~airflow_provider_tsb.metastore.domains`).

    The reader raises RootTableError when that table cannot be read (names it, its location and
    the topology whose barrier is generated).
    """
    from airflow_provider_tsb.delta.barriers import root_version

    def read(name: str, location: str) -> int:
        try:
            return root_version(location)
        except Exception as exc:  # TableNotFoundError, or an unreadable log
            raise RootTableError(
                f"root table {name!r} at {location!r} of the barrier domain of topology {topology.name!r} "
                f"cannot be read for barrier generation of {topology.name!r}: {exc}"
            ) from exc

    return read


def root_figures(topology: Topology, versions: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """``{root table: (live data files, their bytes)}`` of ``topology``'s root tables at
    ``versions`` (Delta versions), recorded with the barrier: root tables are written by
    ingestion (``write_deltalake``), whose commits carry none, so the barrier's
    generation records what the log gives then, and readers and ``tsb check --integrity`` verify
    later reads against it. Cost per root table: the commits since the previous barrier's
    version (:func:`~airflow_provider_tsb.delta.integrity.live_figures`, flat in the table's history).

    Raises:
        RootTableError: a root table's log cannot give them (names the table and version).
    """
    from airflow_provider_tsb.delta.integrity import live_figures

    figures = {}
    for table in topology.root_tables:
        version = versions.get(table.name)
        if version is None:
            continue
        location = topology.location(table.name)
        try:
            fig = live_figures(location, version)
        except Exception as exc:  # TableNotFoundError, DeltaLogError
            raise RootTableError(
                f"root table {table.name!r} at {location!r}: the live files of Delta version {version} cannot be "
                f"read for barrier generation: {exc}"
            ) from exc
        figures[table.name] = (fig.files, fig.size_bytes)
    return figures


class TsbBarrierHook(BaseHook):
    """Generate the timestamp barriers of ``topology`` (see module doc).

    :param topology: the topology (declared in the DAG file).
    :param ts_kind: ``system`` (barrier timestamp = now) or ``event`` (the event-time watermark).
    :param tsb_conn_id: metastore connection (default ``tsb_default``).
    :param storage_conn_id: Airflow connection (``aws``, ``wasb``/``adls``,
        ``google_cloud_platform``) whose credentials open tables on object storage: the root
        tables read for their versions and the barrier log written
        (:mod:`airflow_provider_tsb.delta.storage`). ``None``: this process's own
        (``$TSB_STORAGE_OPTIONS``, or none for local tables).
    """

    conn_name_attr = "tsb_conn_id"
    default_conn_name = TsbMetastoreHook.default_conn_name
    hook_name = "TSB barriers"

    def __init__(
        self, topology: Topology, *, ts_kind: TsKind | str = TsKind.SYSTEM, tsb_conn_id: str = default_conn_name,
        storage_conn_id: str | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.ts_kind = ts_kind
        self.tsb_conn_id = tsb_conn_id
        self.storage_conn_id = storage_conn_id

    def get_conn(self) -> MetaStore:
        """The metastore of ``tsb_conn_id`` (see :class:`TsbMetastoreHook`), with the storage
        options of ``storage_conn_id`` set for this process first."""
        use_storage_connection(self.storage_conn_id)
        return TsbMetastoreHook(self.tsb_conn_id).get_conn()

    def watermark(self, versions: dict[str, int]) -> int | None:
        """Event-time watermark (epoch ms) at ``versions``: the min over root tables of the max of
        their ``event_time_column`` (from Delta file statistics); ``None`` while no root table
        has rows."""
        from airflow_provider_tsb.delta.roots import event_time_watermark

        marks = [
            event_time_watermark(self.topology.location(t.name), versions[t.name], t.event_time_column)
            for t in self.topology.root_tables
            if t.event_time_column
        ]
        known = [m for m in marks if m is not None]
        return min(known) if known else None

    def generate(self, run_key: str | None) -> BarrierInfo:
        """Register the topology and generate its next barrier at the root tables' current versions.

        ``run_key``: idempotency key (a retry with the same key gets the same barrier back).

        Raises:
            RootTableError: a root table is missing, or (``ts_kind="event"``) every root table
                is empty, so there is no watermark yet, or none declares an ``event_time_column``.
            BarrierHistoryError: the metastore lost barriers that the Delta tables or the
                barrier log hold (run ``tsb db rebuild``).
        """
        store = self.get_conn()
        store.registry.register_topology(self.topology)
        versions = read_root_versions(self.topology)
        ts_ms = None
        if self.ts_kind == TsKind.EVENT:
            ts_ms = self.watermark(versions)
            if ts_ms is None:
                declared = any(t.event_time_column for t in self.topology.root_tables)
                raise RootTableError(
                    f"topology {self.topology.name!r}: no event-time watermark yet (root tables are empty)" if declared
                    else f"topology {self.topology.name!r}: event-time barriers need a root table with an "
                    "event_time_column (Topology.root_table(name, event_time_column=...)); none declares one"
                )
        info = store.barriers.create(
            self.topology.name, versions, ts_ms=ts_ms, ts_kind=self.ts_kind, run_key=run_key,
            barrier_log=barrier_log_of(self.topology), root_figures=root_figures(self.topology, versions),
            read_root_version=domain_root_reader(self.topology),
        )
        self.log.info(
            "%s barrier %s of topology %s at %s (%s time); root versions %s",
            "generated" if info.created else "reused (retry of the same run)",
            info.barrier, info.topology, info.ts_ms, info.ts_kind, info.root_versions,
        )
        return info

    # ------------------------------------------------------------------ streaming: the emitter
    def current_versions(self) -> dict[str, int] | None:
        """Root versions now (Delta versions by table name), or ``None`` while a root table does
        not exist yet. Cost: a ``stat`` per root table and commit since the last call, not a log
        listing per root table to check that it exists at every interval.

        Raises:
            RootTableError: a root table exists but cannot be read.
        """
        from airflow_provider_tsb.exceptions import TableNotFoundError

        try:
            return read_root_versions(self.topology)
        except RootTableError as exc:
            if isinstance(exc.__cause__, TableNotFoundError):
                return None
            raise

    def input_ended(self, since_ms: int | None = None) -> bool:
        """Whether every root table's newest version is marked end of input (FLIP-147), by a
        mark committed at or after ``since_ms`` (epoch ms; ``None``: any mark)."""
        from airflow_provider_tsb.delta.roots import input_ended

        return all(input_ended(self.topology.location(t.name), since_ms) for t in self.topology.root_tables)

    def has_room(self, store: MetaStore, last: BarrierInfo | None, max_in_flight: int | None) -> bool:
        """Whether fewer than ``max_in_flight`` barriers are generated but not COMMIT (WRITTEN in
        every intermediate table); always with ``max_in_flight=None`` or before any barrier."""
        if max_in_flight is None or last is None:
            return True
        from airflow_provider_tsb.names import normalize_table_name

        sinks = [normalize_table_name(t.name) for t in self.topology.tables.values() if t.kind == "intermediate"]
        if not sinks:
            return True
        # one query for every table's head (a transaction and two queries per table before: the
        # emitter asks every interval while the topology is behind)
        heads = store.table_states.newest_written_by_table(self.topology.name)
        committed = min(heads[t].barrier if t in heads else 0 for t in sinks)
        return last.barrier - committed < max_in_flight

    def generate_at(
        self, store: MetaStore, versions: dict[str, int], run_key: str, *, final: bool = False
    ) -> BarrierInfo | None:
        """One barrier at root ``versions``; ``None`` while an event-time watermark is unknown
        (no rows yet). An event-time barrier never goes back in time: an empty final epoch keeps
        the previous watermark."""
        ts_ms = None
        if self.ts_kind == TsKind.EVENT:
            ts_ms = self.watermark(versions)
            if ts_ms is None:
                return None
        # one metastore transaction: the domain's other root versions are read under its lock, the
        # live-file figures go in with the root versions, the barrier log commit is its last step
        return store.barriers.create(
            self.topology.name, versions, ts_ms=ts_ms, ts_kind=self.ts_kind, run_key=run_key, final=final,
            barrier_log=barrier_log_of(self.topology), root_figures=root_figures(self.topology, versions),
            read_root_version=domain_root_reader(self.topology), raise_late_watermark=True,
        )

    def emit(
        self, run_prefix: str, *, interval_s: float, duration_s: float, count: int | None = None,
        final_on_stop: bool = True, max_in_flight: int | None = 2, since_ms: int | None = None,
        watch: Callable[[], None] | None = None,
    ) -> list[int]:
        """Generate a barrier every ``interval_s`` seconds while a root table has a new version,
        until end of input, ``duration_s`` seconds or ``count`` barriers; returns the barrier ids.

        One emitter generates a topology's barriers at a time: this one first takes the
        topology's emitter lease (:mod:`~airflow_provider_tsb.metastore.emitters`), waiting as a
        standby, and saying which emitter runs, while another holds it; it takes over if that
        one's lease lapses (``max(30 s, 3 intervals)`` without renewal) and returns ``[]`` if its
        duration runs out first.

        Run keys are ``<run_prefix>#<n>`` and ``<run_prefix>#final``. A final barrier is
        generated at end of input, or when the duration or count runs out and
        ``final_on_stop``. ``max_in_flight``: see :meth:`has_room`. Root tables that do not
        exist yet are waited for.

        Args:
            since_ms: end-of-input marks committed before this time (epoch ms; the DAG run's
                start) belong to an earlier run and are ignored.
            watch: called once per interval; it raises to stop the emitter (the operator's
                check that no streaming job of the DAG run failed for good).

        Raises:
            RootTableError: a root table exists but cannot be read.
            TopologyError: this emitter stalled past its lease and another one took over.
            Exception: whatever ``watch`` raises, unchanged.
        """
        store = self.get_conn()
        store.registry.register_topology(self.topology)
        deadline = time.monotonic() + duration_s
        owner = run_prefix  # a retry of the same DAG run's emitter takes over at once
        lease_s = max(EMITTER_LEASE_S, 3 * interval_s)
        if not self._lead(store, owner, lease_s, interval_s, deadline, watch):
            return []
        try:
            return self._emit_barriers(store, run_prefix, owner, lease_s, interval_s, deadline, count,
                                       final_on_stop, max_in_flight, since_ms, watch)
        finally:
            store.emitters.release(self.topology.name, owner)

    def _lead(self, store: MetaStore, owner: str, lease_s: float, interval_s: float, deadline: float,
              watch: Callable[[], None] | None) -> bool:
        """Take the topology's emitter lease, waiting as a standby while another emitter holds it
        (:mod:`~airflow_provider_tsb.metastore.emitters`); ``False`` when the duration ran out
        first (this emitter generated nothing)."""
        holder = store.emitters.acquire(self.topology.name, owner, lease_s)
        if holder is None:
            return True
        self.log.warning("standby: topology %r has a running barrier emitter, %s; this one (%s) waits for it to "
                         "stop and takes over if its lease lapses", self.topology.name, holder.describe(), owner)
        while time.monotonic() < deadline:
            if watch is not None:
                watch()
            time.sleep(interval_s)
            holder = store.emitters.acquire(self.topology.name, owner, lease_s)
            if holder is None:
                self.log.info("took over barrier generation for topology %r", self.topology.name)
                return True
        self.log.warning("stopping as a standby: %s still generates the barriers of topology %r",
                         holder.describe(), self.topology.name)
        return False

    def _emit_barriers(
        self, store: MetaStore, run_prefix: str, owner: str, lease_s: float, interval_s: float, deadline: float,
        count: int | None, final_on_stop: bool, max_in_flight: int | None, since_ms: int | None,
        watch: Callable[[], None] | None,
    ) -> list[int]:
        """The generation loop of :meth:`emit`, renewing the emitter lease every interval."""
        emitted: list[int] = []
        seq = 0
        while True:
            if watch is not None:
                watch()
            holder = store.emitters.acquire(self.topology.name, owner, lease_s)
            if holder is not None:  # this emitter stalled past its lease and another took over
                raise TopologyError(f"topology {self.topology.name!r}: {holder.describe()} took over barrier "
                                    f"generation while this emitter ({owner}) was stalled past its lease")
            versions = self.current_versions()
            # ended at exactly these versions: the markers are the newest commits and no commit
            # landed between reading the versions and the markers (else the final barrier could
            # miss the flights table's marker commit written just after the weather's)
            ended = versions is not None and self.input_ended(since_ms) and self.current_versions() == versions
            out_of_time = time.monotonic() >= deadline or (count is not None and len(emitted) >= count)
            if versions is not None and (ended or (out_of_time and final_on_stop)):
                info = self.generate_at(store, versions, f"{run_prefix}#final", final=True)
                if info is not None:
                    emitted.append(info.barrier)
                    why = "end of input" if ended else "duration or count reached"
                    self.log.info("final barrier %s (%s): root versions %s", info.barrier, why, versions)
                break
            if out_of_time:
                if versions is None:
                    self.log.warning("stopping without a final barrier: a root table does not exist yet")
                else:
                    self.log.info("stopping without a final barrier (final_on_stop=False) at root versions %s",
                                  versions)
                break
            info = self._barrier_if_changed(store, versions, f"{run_prefix}#{seq}", max_in_flight)
            if info is not None:
                seq += 1
                emitted.append(info.barrier)
            time.sleep(interval_s)
        return emitted

    def _barrier_if_changed(
        self, store: MetaStore, versions: dict[str, int] | None, run_key: str, max_in_flight: int | None
    ) -> BarrierInfo | None:
        """The barrier generated at ``versions`` if a root table moved since the latest barrier
        and there is room in flight (:meth:`has_room`), else ``None``."""
        last = store.barriers.latest(self.topology.name)
        unchanged = last is not None and versions == last.root_versions
        if versions is None or unchanged or not self.has_room(store, last, max_in_flight):
            return None
        info = self.generate_at(store, versions, run_key)
        if info is not None:
            self.log.info("barrier %s: root versions %s", info.barrier, versions)
        return info
