"""Jobs go on over sink logs that snapshot expiry cleaned up (Delta "Metadata Cleanup",
``delta/log_cleanup.py``), the way production runs it: ``TsbSnapshotExpiryOperator`` and the job
operators' own processes on the metastore catalog (PostgreSQL), the flights topology on
nycflights13 days, Spark Connect.

Barriers 1-4 run in batch; every table then gets a checkpoint (what delta-rs writes every 100
commits, here made by hand to stay within CI's time), barrier 5 runs, and the expiry operator
keeps one barrier: each table's log now starts at its checkpoint, but for the table
``carrier_ranking`` (registered, never run) has still to read, whose log is kept whole. Barriers 6-8 then stream
through both jobs, in micro-batches, from the cleaned logs: each job's sink log walk, previous
state and input changes start there. Checked on the data: the rows and the downstream aggregate
at every kept barrier, each barrier one version tagged with it, an expired barrier refused and
out of the lineage without error, ``check_integrity`` clean.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta.barriers import version_of_barrier
from airflow_provider_tsb.delta.log_cleanup import list_log, log_start
from airflow_provider_tsb.exceptions import ExpiredVersionError
from airflow_provider_tsb.maintenance.integrity import check_integrity
from airflow_provider_tsb.operators.maintenance import TsbSnapshotExpiryOperator
from tests.support.orchestration import flights_barrier, flights_deployment, flights_engines, flights_job
from tsb_examples.datasets import nycflights13 as nyc

pytestmark = [pytest.mark.spark]

FLIGHTS, WEATHER = "tsb.raw.flights", "tsb.raw.weather"
ENRICHED, DAILY = "tsb.flights.flights_enriched", "tsb.flights.carrier_daily_delay"
JOBS = ("enrich_flights", "carrier_daily_delay")
DAYS = 8


def _context() -> dict:
    from airflow.sdk.execution_time.context import OutletEventAccessors

    run = SimpleNamespace(dag_id="flights_streaming", run_id="cleanup-1", start_date=dt.datetime.now(dt.UTC))
    return {"dag_run": run, "outlet_events": OutletEventAccessors()}


@pytest.mark.parametrize("metastore_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_streaming_jobs_go_on_over_logs_that_expiry_cleaned_up(
    tmp_path: Path, metastore_url: str, spark_remote: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flights_engines(monkeypatch, metastore_url, spark_remote)
    dep = flights_deployment(metastore_url, tmp_path / "warehouse")
    store, topology = dep.store, dep.topology
    context = _context()
    days = nyc.days(dt.date(2013, 1, 1), DAYS)

    def barrier(n: int) -> None:
        assert flights_barrier(dep, days[n - 1], final=n == DAYS) == n

    def run(mode: str, **kwargs: Any) -> list[list[int]]:
        return [flights_job(dep, job, mode, "spark_connect", **kwargs).execute(context)["barriers"] for job in JOBS]

    for n in range(1, 5):
        barrier(n)
    assert run("batch") == [[1, 2, 3, 4]] * 2
    tables = {FLIGHTS: dep.flights, WEATHER: dep.weather, ENRICHED: topology.location(ENRICHED),
              DAILY: topology.location(DAILY)}
    checkpoints = {}
    for location in tables.values():  # what delta-rs writes every 100 commits
        table = DeltaTable(location)
        table.create_checkpoint()
        checkpoints[location] = table.version()
    barrier(5)
    assert run("batch") == [[5]] * 2
    results = {r["table"]: r for r in TsbSnapshotExpiryOperator(task_id="expire", topology=topology,
                                                                keep_barriers=1).execute(context)}
    for name in (FLIGHTS, WEATHER, ENRICHED):
        location = tables[name]
        assert results[name]["log_start"] == checkpoints[location] > 0, results[name]
        assert log_start(location) == min(list_log(location).commits) == checkpoints[location]
    # carrier_ranking, registered and never run, still has to read every version of DAILY: kept
    assert results[DAILY]["log_start"] is None and results[DAILY]["removed_log_files"] == 0, results[DAILY]
    assert log_start(tables[DAILY]) == 0
    assert version_of_barrier(topology.location(ENRICHED), 2) is None  # out of the lineage, no error
    with pytest.raises(ExpiredVersionError, match="barrier 3"):
        store.resolution.resolve([ENRICHED], as_of=3)

    for n in range(6, DAYS + 1):
        barrier(n)
    assert run("streaming", max_barriers_per_trigger=3) == [[6, 7, 8]] * 2
    flights_so_far = sum(nyc.flights_of_day(d).num_rows for d in days[:4])
    for b in range(5, DAYS + 1):
        flights_so_far += nyc.flights_of_day(days[b - 1]).num_rows
        res = store.resolution.resolve([FLIGHTS, ENRICHED, DAILY], as_of=b)
        enriched_v, daily_v = res.tables[ENRICHED].version, res.tables[DAILY].version
        assert version_of_barrier(topology.location(ENRICHED), b) == enriched_v
        assert DeltaTable(topology.location(ENRICHED), version=enriched_v).to_pyarrow_table().num_rows == flights_so_far
        per_day = DeltaTable(topology.location(DAILY), version=daily_v).to_pyarrow_table()
        assert pc.sum(per_day.column("flights")).as_py() == flights_so_far, b
    assert store.resolution.resolve([FLIGHTS, ENRICHED, DAILY]).barrier == DAYS
    report = check_integrity(store, topology.name)
    assert report.findings == [] and report.checked >= 8, report
    store.dispose()
