"""The flights topology, shared by ``flights_topology`` (batch) and ``flights_streaming``.

A topology used by several DAG files lives in a plain module like this one (importing one DAG
file from another gives Airflow's duplicate-DAG error); ``dags/.airflowignore`` keeps the
folder out of DAG parsing. The DAG folder is on ``sys.path`` in Airflow, so DAG files import it
as ``from common.flights import topology``.

    raw.flights, raw.weather -> enrich_flights -> flights.flights_enriched
        -> carrier_daily_delay -> flights.carrier_daily_delay
        -> carrier_ranking -> flights.carrier_ranking

With ``TSB_FLIGHTS_WINDOWS=1`` in the environment that parses the DAGs (opt-in; the README's
"Event-time windows and late data"), the topology also holds the event-time window job:

    raw.flights -> origin_hourly_delay -> flights.origin_hourly_delay (emitted hourly windows)
                                       -> flights.origin_hourly_open (open windows: the state)
                                       -> flights.origin_hourly_late (late rows dropped, per barrier)

It needs event-time barriers (``ts_kind="event"``, as ``flights_topology`` and
``flights_streaming`` generate). It is opt-in because every job of this topology runs in many CI
tests and benchmarks (one more ``spark-submit`` per DAG run); it is a switch of this topology
rather than a topology of its own so that the windows are of the same barriers as the other
flights tables and run in the same DAG runs.

Freshness targets (Snowflake ``TARGET_LAG``; the UI's *Freshness* page, ``/tsb/ui/freshness``):
every sink table should be at most 5 minutes behind the newest barrier, and the end of the
chain, ``flights.carrier_ranking``, at most 20 seconds -- tighter than three chained Spark jobs
can keep on a laptop, so the demo shows a table that misses its target (MISSED) and its
bottleneck job next to tables that meet theirs.

``TSB_SPARK_APPS`` is the ``spark_apps`` folder itself (default: the one next to ``dags/``).
The jobs declare the examples' small-machine Spark settings (``LOCAL_SPARK_CONF``: 4 shuffle
partitions, a 1 GB driver); the provider adds none of its own.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from airflow_provider_tsb.topology import Topology
from tsb_examples.spark_conf import LOCAL_SPARK_CONF

#: freshness target of every sink table, and the tighter one of the last table of the chain
SINK_FRESHNESS = timedelta(minutes=5)
RANKING_FRESHNESS = timedelta(seconds=20)
APPS = Path(os.environ.get("TSB_SPARK_APPS") or Path(__file__).resolve().parents[2] / "spark_apps")


def flights_topology(*, windows: bool = False, warehouse: str | None = None) -> Topology:
    """The flights topology; ``windows``: with the event-time window job ``origin_hourly_delay``.

    ``warehouse``: where tables without a location go (default ``$TSB_WAREHOUSE``, see
    :func:`airflow_provider_tsb.topology.default_warehouse`).
    """
    topology = Topology("flights", warehouse=warehouse, freshness=SINK_FRESHNESS)
    topology.root_table("raw.flights", event_time_column="time_hour")
    topology.root_table("raw.weather", event_time_column="time_hour")
    topology.job(
        "enrich_flights",
        str(APPS / "flights" / "enrich_flights.py"),
        sources=["raw.flights", "raw.weather"],
        sinks=["flights.flights_enriched"],
        conf=LOCAL_SPARK_CONF,
    )
    topology.job(
        "carrier_daily_delay",
        str(APPS / "flights" / "carrier_daily_delay.py"),
        sources=["flights.flights_enriched"],
        sinks=["flights.carrier_daily_delay"],
        conf=LOCAL_SPARK_CONF,
    )
    topology.job(
        "carrier_ranking",
        str(APPS / "flights" / "carrier_ranking.py"),
        sources=["flights.carrier_daily_delay"],
        sinks=["flights.carrier_ranking"],
        conf=LOCAL_SPARK_CONF,
    )
    topology.table("flights.carrier_ranking", freshness=RANKING_FRESHNESS)
    if windows:
        topology.job(
            "origin_hourly_delay",
            str(APPS / "flights" / "origin_hourly_delay.py"),
            sources=["raw.flights"],
            sinks=["flights.origin_hourly_delay", "flights.origin_hourly_open", "flights.origin_hourly_late"],
            conf=LOCAL_SPARK_CONF,
        )
    return topology


topology = flights_topology(windows=os.environ.get("TSB_FLIGHTS_WINDOWS", "") == "1")
