"""Alert on freshness targets (Snowflake ``TARGET_LAG``): :class:`TsbFreshnessSensor`.

Each poke reads :meth:`store.freshness.report <airflow_provider_tsb.metastore.freshness.FreshnessManager.report>`
of a topology: the lag of every non-root table behind the newest generated barrier (seconds),
its target and the bottleneck job (see :mod:`airflow_provider_tsb.metastore.freshness`).

* ``fail_on_miss=False`` (default): wait until no watched table misses its target; on timeout
  ``AirflowSensorTimeout`` names each missing table, its lag, target and bottleneck job.
* ``fail_on_miss=True``: a check, not a wait: the first poke that finds a miss fails the task
  with ``AirflowFailException`` (same message), so the task's failure alerting fires.

``soft_fail=True`` turns either failure into a skip, as for every Airflow sensor. The
``on_freshness_miss`` callback, if given, is called with ``(report, context)`` on each poke
that finds a miss (e.g. to page someone or post to a chat) before the sensor waits or fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook
from airflow_provider_tsb.metastore.freshness import FreshnessReport
from airflow_provider_tsb.names import normalize_table_name

#: ``on_freshness_miss(report, context)``
FreshnessMissCallback = Callable[[FreshnessReport, Any], None]


class TsbFreshnessSensor(BaseSensorOperator):
    """Wait until (or check that) the tables of a topology meet their freshness targets.

    :param topology: topology name (templated).
    :param tables: the tables to watch (default: every table of the topology with a target).
    :param fail_on_miss: fail at the first miss instead of waiting (see module docstring).
    :param on_freshness_miss: called with ``(FreshnessReport, context)`` on each poke with a miss.
    :param tsb_conn_id: metastore connection (default ``tsb_default``).

    Returns (XCom) ``{table: lag in seconds}`` of the watched tables when none misses.
    """

    template_fields: Sequence[str] = ("topology", "tables")
    ui_color = "#f6e3c6"

    def __init__(
        self,
        *,
        topology: str,
        tables: Sequence[str] | None = None,
        fail_on_miss: bool = False,
        on_freshness_miss: FreshnessMissCallback | None = None,
        tsb_conn_id: str = TsbMetastoreHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.tables = None if tables is None else [tables] if isinstance(tables, str) else list(tables)
        self.fail_on_miss = fail_on_miss
        self.on_freshness_miss = on_freshness_miss
        self.tsb_conn_id = tsb_conn_id
        self._report: FreshnessReport | None = None
        self._misses = ""

    def _watched(self, report: FreshnessReport) -> list[str]:
        if self.tables is None:
            return [t for t, f in report.tables.items() if f.target_s is not None]
        names = [normalize_table_name(t) for t in self.tables]
        unknown = [t for t in names if t not in report.tables]
        if unknown:
            raise AirflowFailException(
                f"{self.task_id}: {unknown} are not non-root tables of topology {self.topology!r}; "
                f"its tables: {sorted(report.tables)}"
            )
        return names

    def poke(self, context: Any) -> bool:
        report = TsbMetastoreHook(self.tsb_conn_id).get_conn().freshness.report(self.topology)
        self._report = report
        watched = self._watched(report)
        missed = [t for t in watched if report.tables[t].missed]
        if not missed:
            return True
        self._misses = report.describe_misses(missed)
        self.log.warning("freshness target missed: %s", self._misses)
        if self.on_freshness_miss is not None:
            self.on_freshness_miss(report, context)
        if self.fail_on_miss:
            raise AirflowFailException(f"freshness target missed in topology {self.topology!r}: {self._misses}")
        return False

    def execute(self, context: Any) -> dict[str, float]:
        try:
            super().execute(context)
        except AirflowSensorTimeout as exc:
            raise AirflowSensorTimeout(
                f"freshness targets of topology {self.topology!r} still missed after {self.timeout:.0f} s: "
                f"{self._misses}"
            ) from exc
        assert self._report is not None
        return {t: self._report.tables[t].lag_s for t in self._watched(self._report)}
