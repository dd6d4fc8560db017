"""The real-Airflow harness: DAGs run under the real scheduler, LocalExecutor and triggerer."""

from __future__ import annotations

import time

import pytest

from dev.airflow_harness import AirflowHandle, AirflowHarnessError
from tests.support.airflow_fixtures import DeployDag

pytestmark = pytest.mark.airflow

HELLO_DAG = """
from datetime import timedelta

from airflow.providers.standard.operators.python import PythonOperator
from airflow.providers.standard.sensors.time_delta import WaitSensor
from airflow.sdk import DAG


def produce():
    print("harness-marker: produced")
    return 41


def consume(ti):
    value = ti.xcom_pull(task_ids="produce")
    assert value == 41, value
    print(f"harness-marker: consumed {value + 1}")


with DAG(dag_id="harness_hello", schedule=None, catchup=False):
    p = PythonOperator(task_id="produce", python_callable=produce)
    w = WaitSensor(task_id="wait_deferred", time_to_wait=timedelta(seconds=4), deferrable=True)
    c = PythonOperator(task_id="consume", python_callable=consume)
    p >> w >> c
"""

FAILING_DAG = """
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG


def explode():
    raise ValueError("harness-boom-marker")


with DAG(dag_id="harness_failing", schedule=None, catchup=False):
    PythonOperator(task_id="explode", python_callable=explode)
"""

ASSET_DAG = """
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Asset

TABLE = Asset(name="harness_table", uri="file:///tmp/tsb-harness/harness_table")

with DAG(dag_id="harness_asset", schedule=None, catchup=False):
    PythonOperator(task_id="write", python_callable=lambda: None, outlets=[TABLE])
"""


def test_startup_is_fast_and_healthy(airflow_server: AirflowHandle) -> None:
    print(f"Airflow startup: {airflow_server.startup_seconds:.1f}s")
    assert airflow_server.startup_seconds < 120
    health = airflow_server.health()
    for component in ("metadatabase", "scheduler", "triggerer", "dag_processor"):
        assert health[component]["status"] == "healthy", health


def test_python_operator_and_deferrable_sensor_succeed(airflow_server: AirflowHandle, deploy_dag: DeployDag) -> None:
    deploy_dag(HELLO_DAG, name="harness_hello.py")
    run = airflow_server.trigger_dag("harness_hello", conf={"origin": "test"})
    run_id = run["dag_run_id"]
    assert run["conf"] == {"origin": "test"}

    # Watch the sensor: it must be handed to the triggerer (state "deferred"), not poke in a worker.
    seen: set[str | None] = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        seen.add(airflow_server.task_states("harness_hello", run_id).get("wait_deferred"))
        if airflow_server.get_dag_run("harness_hello", run_id)["state"] in ("success", "failed"):
            break
        time.sleep(0.3)
    final = airflow_server.wait_for_dag_run("harness_hello", run_id, timeout=5)
    assert final["state"] == "success", airflow_server.describe_run("harness_hello", run_id)
    assert "deferred" in seen, seen
    assert airflow_server.task_states("harness_hello", run_id) == {
        "produce": "success",
        "wait_deferred": "success",
        "consume": "success",
    }
    assert "harness-marker: produced" in airflow_server.task_log("harness_hello", run_id, "produce")
    assert "harness-marker: consumed 42" in airflow_server.task_log("harness_hello", run_id, "consume")


def test_failure_message_contains_task_log(airflow_server: AirflowHandle, deploy_dag: DeployDag) -> None:
    deploy_dag(FAILING_DAG, name="harness_failing.py")
    with pytest.raises(AirflowHarnessError) as excinfo:
        airflow_server.run_dag("harness_failing", expect="success", timeout=120)
    message = str(excinfo.value)
    assert "ended 'failed'" in message
    assert "explode" in message and "harness-boom-marker" in message


def test_asset_events_are_readable(airflow_server: AirflowHandle, deploy_dag: DeployDag) -> None:
    deploy_dag(ASSET_DAG, name="harness_asset.py")
    run = airflow_server.run_dag("harness_asset", timeout=120)
    events = airflow_server.asset_events(source_dag_id="harness_asset", source_run_id=run["dag_run_id"])
    assert [e["uri"] for e in events] == ["file:///tmp/tsb-harness/harness_table"], events
    assert events[0]["source_task_id"] == "write"
