"""Freshness targets as Airflow Deadline Alerts (Airflow 3.1+, ``airflow.sdk.DeadlineAlert``).

A Deadline Alert is per DAG run: ``reference + interval`` is the need-by time, and when the run
has not finished by then Airflow's triggerer runs the alert's callback (Airflow docs, "Deadline
Alerts"). A batch topology's DAG run is one barrier through every job, so "the run finishes
within ``target`` seconds of being queued" is what a freshness target of ``target`` seconds
asks of the tables (Snowflake ``TARGET_LAG``; :mod:`airflow_provider_tsb.metastore.freshness`):
:func:`freshness_deadlines` gives one alert per distinct target of the topology's tables,
referenced to the run's queued time (``DeadlineReference.DAGRUN_QUEUED_AT``: slightly before the
barrier is generated, so the alert errs early, never late). Its callback,
:func:`report_freshness_misses`, reads the freshness report and names each table that really
misses its target (lag, target, committed barrier, bottleneck job).

What a Deadline Alert cannot express, and :class:`~airflow_provider_tsb.sensors.freshness.TsbFreshnessSensor`
still covers:

* streaming mode: one DAG run is a whole stretch (hours) and its deadline is evaluated once, so
  a per-barrier lag inside the run is invisible to it (:func:`freshness_deadlines` refuses a
  streaming group's topology only through the docs: it cannot know the DAG's mode);
* a table that goes stale between DAG runs (a paused DAG, a gap in the schedule): no run is
  queued, so no deadline exists;
* a per-table alert: a deadline belongs to the DAG run, not to a table; tables sharing a target
  share one alert, whose callback then looks at each of them.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from airflow.sdk import AsyncCallback, DeadlineAlert, DeadlineReference

from airflow_provider_tsb.names import normalize_table_name
from airflow_provider_tsb.topology import Topology

log = logging.getLogger(__name__)

#: dotted path of the default deadline callback (the triggerer imports it by name)
CALLBACK_PATH = "airflow_provider_tsb.deadlines.report_freshness_misses"


def freshness_targets(topology: Topology) -> dict[float, list[str]]:
    """``{target seconds: [tables]}`` of the topology's intermediate tables that have a target."""
    targets: dict[float, list[str]] = {}
    for name, table in sorted(topology.tables.items()):
        if table.kind == "intermediate" and table.freshness_s is not None:
            targets.setdefault(float(table.freshness_s), []).append(name)
    return targets


def freshness_deadlines(
    topology: Topology, *, callback: str = CALLBACK_PATH, tsb_conn_id: str = "tsb_default",
) -> list[DeadlineAlert]:
    """One ``DeadlineAlert`` per distinct freshness target of ``topology`` (``DAG(deadline=...)``).

    :param topology: a batch topology (one barrier per DAG run; see the module docstring for
        streaming mode).
    :param callback: dotted path of an ``async`` callable run in the triggerer when the deadline
        passes, with keyword arguments ``topology`` (name), ``tables`` (the tables of that target),
        ``target_s`` and ``tsb_conn_id`` (default :func:`report_freshness_misses`).
    :param tsb_conn_id: metastore connection the callback reads.

    Raises:
        ValueError: no table of the topology has a freshness target (names the topology and
            how to set one).
    """
    targets = freshness_targets(topology)
    if not targets:
        raise ValueError(
            f"topology {topology.name!r} has no freshness target; set Topology(..., freshness=...) or "
            "topology.table(name, freshness=...)"
        )
    return [
        DeadlineAlert(
            reference=DeadlineReference.DAGRUN_QUEUED_AT,
            interval=dt.timedelta(seconds=target),
            callback=AsyncCallback(callback, kwargs={
                "topology": topology.name, "tables": tables, "target_s": target, "tsb_conn_id": tsb_conn_id,
            }),
            name=f"tsb freshness {target:g} s: {', '.join(tables)}",
        )
        for target, tables in sorted(targets.items())
    ]


def freshness_misses(topology: str, tables: list[str], tsb_conn_id: str = "tsb_default") -> dict[str, Any]:
    """What misses its target now among ``tables`` of ``topology`` (one metastore read).

    Returns:
        ``{"topology", "missed": [tables], "message": "..."}``; ``message`` names each missing
        table with its lag, target, committed barrier and bottleneck job, or says none misses.
    """
    from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook

    report = TsbMetastoreHook(tsb_conn_id).get_conn().freshness.report(topology)
    names = [normalize_table_name(t) for t in tables]
    missed = [t for t in names if t in report.tables and report.tables[t].missed]
    if missed:
        message = f"freshness target missed in topology {topology!r}: {report.describe_misses(missed)}"
    else:
        message = f"deadline passed, but no table of {names} misses its freshness target now"
    return {"topology": topology, "missed": missed, "message": message}


async def report_freshness_misses(
    topology: str, tables: list[str], target_s: float, tsb_conn_id: str = "tsb_default", **_: Any,
) -> str:
    """Default deadline callback: log (warning) the tables that miss their target.

    Returns the message of :func:`freshness_misses` (Airflow stores the callback's result in its
    ``callback.output`` column: a string, as Airflow 3.3 cannot store a dict there on SQLite).
    """
    import asyncio

    found = await asyncio.to_thread(freshness_misses, topology, tables, tsb_conn_id)
    log.warning("%s (deadline: DAG run queued + %g s)", found["message"], target_s)
    return str(found["message"])
