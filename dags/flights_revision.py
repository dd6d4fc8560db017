"""Revision of the flights topology: roll a table and everything downstream of it back to a
barrier, triggered by hand with the table and the barrier as params::

    airflow dags trigger flights_revision --conf '{"table": "flights.carrier_daily_delay", "barrier": 2}'

The rollback is recorded as a plan in the metastore before any table is touched. If the task
fails midway (a crash, a storage error), its retry finishes the plan; until then the jobs of the
rolled-back tables are refused, and readers at REPEATABLE_READ get the barrier rolled back to.
The next run of ``flights_topology`` then processes the barriers after it again. Pass
``"reprocess": true`` to empty the tables and process every barrier again from barrier 1.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param
from common.flights import topology

from airflow_provider_tsb.operators.maintenance import TsbRollbackOperator

with DAG(
    dag_id="flights_revision",
    schedule=None,
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["tsb", "example"],
    doc_md=__doc__,
    params={
        "table": Param("flights.carrier_daily_delay", type="string", description="intermediate table"),
        "barrier": Param(1, type="integer", minimum=1, description="the barrier to go back to"),
        "reprocess": Param(False, type="boolean", description="empty the tables, reprocess from barrier 1"),
    },
) as dag:
    TsbRollbackOperator(
        task_id="rollback",
        topology=topology,
        table="{{ params.table }}",
        barrier="{{ params.barrier }}",
        reprocess="{{ params.reprocess }}",
        retries=2,
    )
