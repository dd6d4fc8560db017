"""Triggers on committed barriers: :class:`TsbBarrierCommittedTrigger` (the deferrable
:class:`~airflow_provider_tsb.sensors.barrier_committed.TsbBarrierCommittedSensor`) and
:class:`TsbBarrierCommittedEventTrigger` (an ``AssetWatcher``: event-driven DAG scheduling).

Both poll ``barrier_committed(tables, barrier)`` in the triggerer without blocking its event loop:
each metastore query runs in a worker thread (``asyncio.to_thread``). It never touches
Airflow's metadata database (Airflow 3 forbids it in triggers); it reads the tsb metastore.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from airflow_provider_tsb.names import normalize_table_name


class TsbBarrierCommittedTrigger(BaseTrigger):
    """Fire when ``barrier`` is WRITTEN in every table, or when ``timeout_s`` has passed.

    :param tables: canonical table names.
    :param barrier: barrier id to wait for.
    :param tsb_conn_id: metastore connection id.
    :param poll_interval_s: seconds between polls.
    :param timeout_s: seconds after ``started_at`` (epoch seconds) to give up; the event then
        carries the lag report naming each table, the barrier it reached and how long it lags.
    :param max_staleness_s: bounded staleness: fire when the newest COMMIT barrier over the
        tables is at most this many seconds old and not older than ``barrier`` (the event's
        ``barrier`` is that COMMIT barrier; a timeout carries the ``StaleReadError`` message).

    Events: ``{"status": "committed", "barrier": n, "tables": [...]}`` or
    ``{"status": "timeout", "barrier": n, "message": "..."}`` or
    ``{"status": "error", "message": "..."}``.
    """

    def __init__(
        self,
        tables: list[str],
        barrier: int,
        tsb_conn_id: str = "tsb_default",
        poll_interval_s: float = 5.0,
        timeout_s: float | None = None,
        started_at: float | None = None,
        max_staleness_s: float | None = None,
    ) -> None:
        super().__init__()
        self.tables = list(tables)
        self.barrier = int(barrier)
        self.tsb_conn_id = tsb_conn_id
        self.poll_interval_s = float(poll_interval_s)
        self.timeout_s = timeout_s
        self.started_at = started_at if started_at is not None else time.time()
        self.max_staleness_s = max_staleness_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_provider_tsb.triggers.barrier_committed.TsbBarrierCommittedTrigger",
            {
                "tables": self.tables,
                "barrier": self.barrier,
                "tsb_conn_id": self.tsb_conn_id,
                "poll_interval_s": self.poll_interval_s,
                "timeout_s": self.timeout_s,
                "started_at": self.started_at,
                "max_staleness_s": self.max_staleness_s,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook

        hook = TsbMetastoreHook(self.tsb_conn_id)
        try:  # the connection looked up once, with the SDK's async call (TsbMetastoreHook.aget_conn)
            await hook.aget_conn()
        except Exception as exc:
            yield TriggerEvent({"status": "error", "message": f"tsb metastore unreachable: {exc}"})
            return
        if self.max_staleness_s is not None:
            async for event in self._run_fresh(hook):
                yield event
            return
        while True:
            try:
                done = await asyncio.to_thread(hook.barrier_committed, self.tables, self.barrier)
            except Exception as exc:
                yield TriggerEvent({"status": "error", "message": str(exc)})
                return
            if done:
                yield TriggerEvent({"status": "committed", "barrier": self.barrier, "tables": self.tables})
                return
            if self.timeout_s is not None and time.time() - self.started_at > self.timeout_s:
                report = await asyncio.to_thread(hook.lag_report, self.tables, self.barrier)
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "barrier": self.barrier,
                        "message": f"barrier {self.barrier} not committed after {self.timeout_s:.0f} s: {report}",
                    }
                )
                return
            await asyncio.sleep(self.poll_interval_s)

    def _fresh(self, hook: Any) -> tuple[int | None, str]:
        """(fresh COMMIT barrier, "") or (None, why not) -- one bounded staleness check."""
        from airflow_provider_tsb.exceptions import InconsistentReadError

        try:
            res = hook.get_conn().resolution.resolve(self.tables, max_staleness_s=self.max_staleness_s,
                                          min_barrier=self.barrier)
        except InconsistentReadError as exc:
            return None, str(exc)
        return res.barrier, ""

    async def _run_fresh(self, hook: Any) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                barrier, why = await asyncio.to_thread(self._fresh, hook)
            except Exception as exc:
                yield TriggerEvent({"status": "error", "message": str(exc)})
                return
            if barrier is not None:
                yield TriggerEvent({"status": "committed", "barrier": barrier, "tables": self.tables})
                return
            if self.timeout_s is not None and time.time() - self.started_at > self.timeout_s:
                yield TriggerEvent({
                    "status": "timeout", "barrier": self.barrier,
                    "message": f"no COMMIT barrier at most {self.max_staleness_s:g} s old after "
                    f"{self.timeout_s:.0f} s: {why}",
                })
                return
            await asyncio.sleep(self.poll_interval_s)


#: key of the asset state store (Airflow 3.3) holding the newest barrier a watcher announced
WATERMARK_KEY_PREFIX = "tsb_committed_barrier:"


class TsbBarrierCommittedEventTrigger(BaseEventTrigger):
    """Event-driven scheduling on committed barriers: one event per barrier committed in ``tables``.

    For an Airflow :class:`~airflow.sdk.AssetWatcher` (Airflow docs "Event-driven scheduling"):
    ``Asset(..., watchers=[AssetWatcher(name=..., trigger=TsbBarrierCommittedEventTrigger(...))])``
    in a DAG's ``schedule`` runs the DAG when a barrier is committed (WRITTEN in every table of
    ``tables``), with no polling sensor task. The triggerer runs it; it reads the tsb metastore,
    never Airflow's database.

    :param tables: canonical table names (the barrier must be WRITTEN in all of them).
    :param tsb_conn_id: metastore connection id.
    :param poll_interval_s: seconds between metastore polls (one indexed query per table and poll).
    :param from_barrier: announce barriers above this id on the first start; ``None``: only
        barriers committed after the first start (the backlog is not replayed).

    Each event's payload is
    :func:`~airflow_provider_tsb.hooks.metastore.committed_barrier_payload` (``barrier``,
    ``barrier_ts_ms``, ``barrier_ts``, ``ts_kind``, ``commit_state``, ``versions``, ``lag_s``,
    ``tables``, ``topology``, ``tsb_history``); Airflow stores it as the asset event's
    ``extra["payload"]`` (next to ``extra["from_trigger"] = True``). Barriers are announced in
    ascending order, each once: the newest announced barrier is kept in the watched asset's state
    store (Airflow 3.3 ``asset_state_store``, key ``tsb_committed_barrier:<tables>``), so a
    restarted triggerer goes on after it. Several barriers committed before the scheduler creates
    the next DAG run are folded by Airflow into that one run (its ``triggering_asset_events`` list
    them all). A metastore error is logged and retried after ``poll_interval_s``.
    """

    def __init__(
        self,
        tables: list[str],
        tsb_conn_id: str = "tsb_default",
        poll_interval_s: float = 5.0,
        from_barrier: int | None = None,
    ) -> None:
        super().__init__()
        if not tables:
            raise ValueError("TsbBarrierCommittedEventTrigger: tables must name at least one table")
        self.tables = sorted(normalize_table_name(t) for t in tables)
        self.tsb_conn_id = tsb_conn_id
        self.poll_interval_s = float(poll_interval_s)
        self.from_barrier = None if from_barrier is None else int(from_barrier)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_provider_tsb.triggers.barrier_committed.TsbBarrierCommittedEventTrigger",
            {"tables": self.tables, "tsb_conn_id": self.tsb_conn_id, "poll_interval_s": self.poll_interval_s,
             "from_barrier": self.from_barrier},
        )

    @property
    def watermark_key(self) -> str:
        """Key of the newest announced barrier in the watched asset's state store."""
        return WATERMARK_KEY_PREFIX + ",".join(self.tables)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook, committed_head

        hook = TsbMetastoreHook(self.tsb_conn_id)
        store = None
        while store is None:  # the SDK's async lookup, once: the hook keeps the URL (TsbMetastoreHook.aget_conn)
            try:
                store = await hook.aget_conn()
            except Exception as exc:
                self.log.warning("tsb metastore connection not readable (%s); retrying in %s s", exc,
                                 self.poll_interval_s)
                await asyncio.sleep(self.poll_interval_s)
        after = await self._stored_watermark()
        while after is None:
            try:
                head = await asyncio.to_thread(committed_head, store, self.tables)
            except Exception as exc:
                self.log.warning("tsb metastore not readable (%s); retrying in %s s", exc, self.poll_interval_s)
                await asyncio.sleep(self.poll_interval_s)
                continue
            after = self.from_barrier if self.from_barrier is not None else head
            await self._store_watermark(after)
        while True:
            try:
                payloads, scanned = await asyncio.to_thread(hook.committed_barriers, self.tables, after)
            except Exception as exc:
                self.log.warning("polling committed barriers of %s failed (%s); retrying", self.tables, exc)
                payloads, scanned = [], after
            for payload in payloads:
                self.log.info("barrier %s committed in %s", payload["barrier"], self.tables)
                yield TriggerEvent(payload)
                await self._store_watermark(payload["barrier"])
            if scanned > after:
                after = scanned
                await self._store_watermark(after)
            if not payloads:
                await asyncio.sleep(self.poll_interval_s)

    async def _stored_watermark(self) -> int | None:
        """The newest barrier announced before (the asset state store), or None."""
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return None
        try:
            value = await store.aget(self.watermark_key)
        except Exception as exc:  # several assets share this trigger, or no state store service
            self.log.warning("no asset state store for %s (%s): starting from the metastore", self.tables, exc)
            return None
        return None if value is None else int(value)

    async def _store_watermark(self, barrier: int) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return
        try:
            await store.aset(self.watermark_key, int(barrier))
        except Exception as exc:
            self.log.warning("could not keep barrier %s in the asset state store: %s", barrier, exc)
