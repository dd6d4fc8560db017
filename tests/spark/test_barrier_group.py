"""Several ready barriers in one micro-batch (``spark/barrier_group.py``), the way production runs
it: the streaming job operators' own processes on the metastore catalog, the flights topology on
nycflights13 days, on both engines: Spark Connect clients (the client drives the micro-batches)
and ``spark-submit`` drivers (a Structured Streaming query whose ``tsb`` source offers ranges of
barriers and whose ``foreachBatch`` runs them).

``enrich_flights`` (an ``append`` sink) starts streaming with barriers 2-6 ready and takes them as
micro-batches of at most 3: barriers 2-4 are written by one Spark job, and the process is SIGKILLed
after barrier 4's files are PROCESSED, before its commit (2 and 3 are committed). Its retry takes
4-6 as one micro-batch on Spark Connect; on ``spark-submit`` the query first replays the
micro-batch its checkpoint logged (up to barrier 4, from where the sinks are: 4 alone), then takes
5-6 as one. ``carrier_daily_delay`` (a ``merge`` sink: planned together, written barrier by
barrier) takes 1-4, then 5-6, on Spark Connect in both cases. Checked on the data: one version per
barrier tagged with it, exactly once, the FLIP-276 invariants at every barrier, the shared write
itself (a later barrier's files were written before an earlier barrier of its group committed), and
a staging area left with the committed attempts' files only.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta import version_of_barrier
from airflow_provider_tsb.delta.barriers import barrier_of_version
from tests.support.orchestration import flights_backlog, flights_deployment, flights_engines, flights_job
from tsb_examples.datasets import nycflights13 as nyc

pytestmark = [pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
FLIGHTS, WEATHER = "tsb.raw.flights", "tsb.raw.weather"
ENRICHED, DAILY = "tsb.flights.flights_enriched", "tsb.flights.carrier_daily_delay"
DAYS = 6


def _context(start: dt.datetime) -> dict:
    from airflow.sdk.execution_time.context import OutletEventAccessors

    run = SimpleNamespace(dag_id="flights_streaming", run_id="group-1", start_date=start)
    return {"dag_run": run, "outlet_events": OutletEventAccessors()}


def _commits(location: str) -> dict[int, dict]:
    """``{barrier: {"version", "timestamp" (commit, epoch ms), "paths" (data files at the version)}}``."""
    table = DeltaTable(location)
    out = {}
    for entry in table.history():
        version = entry["version"]
        barrier = barrier_of_version(location, version)
        if barrier is None:
            continue
        adds = pa.table(DeltaTable(location, version=version).get_add_actions(flatten=True))
        paths = set(adds.column("path").to_pylist())
        out[barrier] = {"version": version, "timestamp": entry["timestamp"], "paths": paths}
    return out


def _written_ms(location: str, paths: set[str]) -> int:
    """The newest modification time, epoch ms, of the data files ``paths`` of the table."""
    return max(int(Path(location, p).stat().st_mtime * 1000) for p in paths)


#: per engine: the retry's barriers, and the barrier whose commit came after barrier 6's files
#: were written (the retry's shared write)
RETRY = {"connect": ([4, 5, 6], 4), "submit": ([4, 5, 6], 5)}


# on PostgreSQL only: what the group changes is the data plane's order of work, not the SQL (CI time)
@pytest.mark.parametrize("metastore_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
@pytest.mark.parametrize("engine", sorted(RETRY))
def test_a_lagging_streaming_job_takes_ready_barriers_in_one_micro_batch(
    tmp_path: Path, metastore_url: str, spark_remote: str, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:

    # the engine under test runs enrich_flights' streaming micro-batches; the set-up barrier and
    # carrier_daily_delay run on Spark Connect either way (a spark-submit costs a JVM start: CI time)
    flights_engines(monkeypatch, metastore_url, spark_remote, engine)
    monkeypatch.setenv("TSB_STAGING_GRACE_SECONDS", "0")  # the killed attempt's files go at the retry's writes
    dep = flights_deployment(metastore_url, tmp_path / "warehouse")
    store, topology, flights = dep.store, dep.topology, dep.flights
    start = dt.datetime.now(dt.UTC)
    context = _context(start)

    days = nyc.days(dt.date(2013, 1, 1), DAYS)
    flights_backlog(dep, context, days)

    monkeypatch.setenv("TSB_KILL_AT", "after_files:enrich_flights:4")
    monkeypatch.setenv("TSB_KILL_ONCE_DIR", str(tmp_path / "killed"))
    with pytest.raises(Exception, match="enrich_flights"):
        flights_job(dep, "enrich_flights", "streaming", max_barriers_per_trigger=3).execute(context)
    # 2 and 3 committed, 4 PROCESSED only: in the Delta log, the truth; the WRITTEN reports of 2 and 3
    # run behind the next barrier's work (spark/report_queue.py), so the kill may have cut them off
    # (the retry re-reports them from the log)
    enriched_location = topology.location(ENRICHED)
    assert [version_of_barrier(enriched_location, b) is not None for b in (2, 3, 4)] == [True, True, False]
    assert 1 <= store.table_states.newest_written(ENRICHED).barrier <= 3
    monkeypatch.delenv("TSB_KILL_AT")
    enriched = flights_job(dep, "enrich_flights", "streaming", max_barriers_per_trigger=3).execute(context)
    daily = flights_job(dep, "carrier_daily_delay", "streaming", "spark_connect",
                        max_barriers_per_trigger=4).execute(context)
    retried, committed_after_6 = RETRY[engine]
    assert enriched["barriers"] == retried and daily["barriers"] == [1, 2, 3, 4, 5, 6]

    # every barrier its own version, tagged with it, and the invariants at each (FLIP-276)
    barriers = store.barriers.list(topology.name, limit=100, ascending=True)
    enriched_at, daily_at = _commits(topology.location(ENRICHED)), _commits(topology.location(DAILY))
    assert sorted(enriched_at) == sorted(daily_at) == list(range(1, DAYS + 1))
    assert len({c["version"] for c in enriched_at.values()}) == DAYS
    for info in barriers:
        b = info.barrier
        n = DeltaTable(flights, version=info.root_versions[FLIGHTS]).to_pyarrow_table().num_rows
        assert n == sum(nyc.flights_of_day(d).num_rows for d in days[:b])
        rows = DeltaTable(topology.location(ENRICHED), version=enriched_at[b]["version"]).to_pyarrow_table()
        assert rows.num_rows == n, b
        assert pc.count(rows.column("temp")).as_py() > 0.9 * n, b  # the weather of the same barrier
        per_day = DeltaTable(topology.location(DAILY), version=daily_at[b]["version"]).to_pyarrow_table()
        assert pc.sum(per_day.column("flights")).as_py() == n, b
        assert version_of_barrier(topology.location(DAILY), b) == daily_at[b]["version"]
    res = store.resolution.resolve([FLIGHTS, ENRICHED, DAILY])
    assert res.barrier == DAYS

    # the shared write: barrier 3's files were written before barrier 2 committed (one Spark job
    # for 2-4), barrier 6's before 4 (Connect: the retry's one Spark job for 4-6) or 5 (submit:
    # for 5-6) committed; barrier 4's only after 3 committed (the retry wrote them again)
    location = topology.location(ENRICHED)
    new = {b: enriched_at[b]["paths"] - enriched_at[b - 1]["paths"] for b in range(2, DAYS + 1)}
    assert all(new.values())
    assert _written_ms(location, new[3]) <= enriched_at[2]["timestamp"]
    assert _written_ms(location, new[6]) <= enriched_at[committed_after_6]["timestamp"]
    assert _written_ms(location, new[4]) >= enriched_at[3]["timestamp"]
    # nothing left behind in the staging area but the committed attempts' files
    staged = {str(p.relative_to(location)) for p in Path(location, "tsb_staging").rglob("*.parquet")}
    assert staged <= set().union(*(c["paths"] for c in enriched_at.values()))
    assert not list(Path(location, "tsb_staging").rglob("_tsb_barrier=*"))
    store.dispose()
