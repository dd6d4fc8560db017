"""Trigger of the deferrable :class:`~airflow_provider_tsb.sensors.barrier_committed.TsbBarrierCommittedSensor`.

Polls ``barrier_committed(tables, barrier)`` in the triggerer without blocking its event loop:
each metastore query runs in a worker thread (``asyncio.to_thread``). It never touches
Airflow's metadata database (Airflow 3 forbids it in triggers); it reads the tsb metastore.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


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
        try:
            # resolve the connection once, off the event loop
            await asyncio.to_thread(hook.get_conn)
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
