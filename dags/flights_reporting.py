"""A downstream team's DAG gated by ``TsbBarrierCommittedSensor``.

Scheduled on the asset of ``tsb.flights.carrier_ranking``: every committed barrier of the
flights topology triggers it. The deferrable sensor waits until the barrier is committed in
every table the report reads, then the report reads them at exactly that barrier.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_tsb.sensors.barrier_committed import TsbBarrierCommittedSensor

TABLES = ["tsb.flights.flights_enriched", "tsb.flights.carrier_daily_delay", "tsb.flights.carrier_ranking"]

try:  # the asset is defined by the flights topology's DAG file
    from common.flights import topology

    from airflow_provider_tsb.assets import table_asset

    schedule = [table_asset(topology, "flights.carrier_ranking")]
except ImportError:  # copied alone: run it manually with a barrier param
    schedule = None

with DAG(
    dag_id="flights_reporting",
    schedule=schedule,
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["tsb", "example"],
) as dag:
    wait = TsbBarrierCommittedSensor(
        task_id="wait_for_barrier",
        tables=TABLES,
        deferrable=True,
        poke_interval=2,
        timeout=600,
    )

    @task
    def report(barrier: int) -> dict:
        """Read the three tables at AS OF the barrier and check the flights invariants."""
        from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook
        from airflow_provider_tsb.read.readers import read_tables_arrow

        store = TsbMetastoreHook().get_conn()
        tables = read_tables_arrow(TABLES, as_of=int(barrier), store=store)
        enriched = tables["tsb.flights.flights_enriched"].num_rows
        daily = sum(tables["tsb.flights.carrier_daily_delay"].column("flights").to_pylist())
        if enriched != daily:
            raise ValueError(f"barrier {barrier}: {enriched} enriched flights but {daily} counted per carrier")
        return {"barrier": int(barrier), "flights": enriched}

    report(wait.output)
