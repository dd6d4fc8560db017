"""Wait for ``barrier_committed(table, barrier)``: :class:`TsbBarrierCommittedSensor`.

A barrier is committed in a set of tables when a Delta version tagged with it is WRITTEN in
every one of them (docs/design.md "Vocabulary"); a task gated by the sensor then reads the tables at
REPEATABLE_READ and sees the same consistent epoch.

With ``max_staleness_s`` the sensor waits for freshness instead (bounded staleness, Materialize
``BOUNDED STALENESS``): until the newest COMMIT barrier over the tables is at most that many
seconds old (see :mod:`airflow_provider_tsb.metastore.staleness` for the age).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowSensorTimeout

from airflow_provider_tsb.exceptions import InconsistentReadError, TsbError
from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook
from airflow_provider_tsb.names import normalize_table_name
from airflow_provider_tsb.triggers.barrier_committed import TsbBarrierCommittedTrigger


class TsbBarrierCommittedSensor(BaseSensorOperator):
    """Wait until ``barrier`` is WRITTEN in every table of ``tables``.

    :param tables: one table name or several (``catalog.database.table``); templated.
    :param barrier: barrier id (templated). ``None``: take the newest ``extra["barrier"]`` of
        the asset events that triggered the DAG run (an upstream job operator's outlet), or
        ``extra["payload"]["barrier"]`` (an event of a
        :class:`~airflow_provider_tsb.triggers.barrier_committed.TsbBarrierCommittedEventTrigger`).
    :param deferrable: free the worker slot and poll in the triggerer.
    :param tsb_conn_id: metastore connection (default ``tsb_default``).
    :param max_staleness_s: bounded staleness: instead of one barrier, wait until the newest
        COMMIT barrier over ``tables`` is at most this many seconds old (and, when ``barrier``
        is given, not older than it). Asset events are not consulted.
    :param kwargs: ``BaseSensorOperator``'s: ``poke_interval`` (seconds between checks, in poke
        mode and deferrable mode; default 60), ``timeout``, ``mode``, and the operator's own.

    Returns (XCom) the barrier id (with ``max_staleness_s``: the fresh COMMIT barrier). On
    timeout raises ``AirflowSensorTimeout`` whose message lists each table, the barrier it has
    reached, and how long it lags (with ``max_staleness_s``: the ``StaleReadError`` message
    naming the lagging tables, their writer jobs and the age of the newest COMMIT barrier).
    """

    template_fields: Sequence[str] = ("tables", "barrier")
    ui_color = "#c9e4ca"

    def __init__(
        self,
        *,
        tables: str | Sequence[str],
        barrier: int | str | None = None,
        deferrable: bool = False,
        tsb_conn_id: str = TsbMetastoreHook.default_conn_name,
        max_staleness_s: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tables = [tables] if isinstance(tables, str) else list(tables)
        self.barrier = barrier
        self.deferrable = deferrable
        self.tsb_conn_id = tsb_conn_id
        if max_staleness_s is not None and not (isinstance(max_staleness_s, int | float) and max_staleness_s >= 0):
            raise ValueError(f"{kwargs.get('task_id')}: max_staleness_s must be seconds >= 0, got {max_staleness_s!r}")
        self.max_staleness_s = max_staleness_s
        self._resolved: int | None = None
        self._stale = ""

    def _table_names(self) -> list[str]:
        return [normalize_table_name(t) for t in self.tables]

    def resolve_barrier(self, context: Any) -> int:
        """The barrier to wait for: explicit/templated, or from the triggering asset events.

        Raises:
            TsbError: none given and no triggering asset event carries ``extra["barrier"]`` or
                ``extra["payload"]["barrier"]``.
        """
        value = self.barrier
        if value is not None and not (isinstance(value, str) and value.strip() in ("", "None")):
            try:
                return int(value)
            except (TypeError, ValueError):
                raise TsbError(f"{self.task_id}: barrier must be an integer, got {value!r}") from None
        found: list[int] = []
        events = context.get("triggering_asset_events") or {}
        for asset_events in events.values():
            for event in asset_events:
                extra = getattr(event, "extra", None) or {}
                payload = extra.get("payload") if isinstance(extra.get("payload"), dict) else {}
                for source in (extra, payload):  # a job operator's event, or an AssetWatcher's
                    if source.get("barrier") is not None:
                        found.append(int(source["barrier"]))
        if not found:
            raise TsbError(
                f"{self.task_id}: no barrier given and no triggering asset event carries extra['barrier']; "
                "pass barrier=... or schedule the DAG on the upstream tables' assets"
            )
        return max(found)

    def _min_barrier(self) -> int:
        """With ``max_staleness_s``: the explicit barrier (never answer older), else 0."""
        value = self.barrier
        if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
            return 0
        try:
            return int(value)
        except (TypeError, ValueError):
            raise TsbError(f"{self.task_id}: barrier must be an integer, got {value!r}") from None

    def poke_fresh(self) -> bool:
        """Bounded staleness: is the newest COMMIT barrier over the tables fresh enough?"""
        store = TsbMetastoreHook(self.tsb_conn_id).get_conn()
        try:
            res = store.resolution.resolve(self._table_names(), max_staleness_s=self.max_staleness_s,
                                min_barrier=self._min_barrier())
        except InconsistentReadError as exc:  # StaleReadError, or no COMMIT barrier yet
            self._stale = str(exc)
            self.log.info("waiting: %s", exc)
            return False
        self._resolved = res.barrier
        return True

    def poke(self, context: Any) -> bool:
        if self.max_staleness_s is not None:
            return self.poke_fresh()
        if self._resolved is None:
            self._resolved = self.resolve_barrier(context)
        hook = TsbMetastoreHook(self.tsb_conn_id)
        done = hook.barrier_committed(self._table_names(), self._resolved)
        if not done:
            self.log.info("waiting: %s", hook.lag_report(self._table_names(), self._resolved))
        return done

    def execute(self, context: Any) -> int:
        if self.max_staleness_s is not None:
            return self._execute_fresh(context)
        self._resolved = self.resolve_barrier(context)
        if not self.deferrable:
            try:
                super().execute(context)
            except AirflowSensorTimeout as exc:
                report = TsbMetastoreHook(self.tsb_conn_id).lag_report(self._table_names(), self._resolved)
                raise AirflowSensorTimeout(
                    f"barrier {self._resolved} not committed within {self.timeout:.0f} s: {report}"
                ) from exc
            return self._resolved
        if self.poke(context):
            return self._resolved
        self.defer(
            trigger=TsbBarrierCommittedTrigger(
                tables=self._table_names(),
                barrier=self._resolved,
                tsb_conn_id=self.tsb_conn_id,
                poll_interval_s=float(self.poke_interval),
                timeout_s=float(self.timeout),
                started_at=time.time(),
            ),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=float(self.timeout) + 120),
        )
        return self._resolved  # not reached: defer() raises

    def _execute_fresh(self, context: Any) -> int:
        if not self.deferrable:
            try:
                super().execute(context)
            except AirflowSensorTimeout as exc:
                raise AirflowSensorTimeout(
                    f"no COMMIT barrier over {self._table_names()} at most {self.max_staleness_s:g} s old within "
                    f"{self.timeout:.0f} s: {self._stale}"
                ) from exc
            assert self._resolved is not None
            return self._resolved
        if self.poke_fresh():
            assert self._resolved is not None
            return self._resolved
        self.defer(
            trigger=TsbBarrierCommittedTrigger(
                tables=self._table_names(),
                barrier=self._min_barrier(),
                tsb_conn_id=self.tsb_conn_id,
                poll_interval_s=float(self.poke_interval),
                timeout_s=float(self.timeout),
                started_at=time.time(),
                max_staleness_s=float(self.max_staleness_s),  # type: ignore[arg-type]
            ),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=float(self.timeout) + 120),
        )
        return 0  # not reached: defer() raises

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> int:
        """Resume after the trigger fired."""
        event = event or {}
        if event.get("status") == "committed":
            self.log.info("barrier %s committed in %s", event["barrier"], event.get("tables"))
            return int(event["barrier"])
        if event.get("status") == "timeout":
            raise AirflowSensorTimeout(event.get("message", "timed out"))
        raise TsbError(f"{self.task_id}: waiting for the barrier failed: {event.get('message')}")
