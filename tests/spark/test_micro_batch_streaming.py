"""A streaming job whose app declares ``process_micro_batch``, the way production runs it: the
streaming job operator's own process on the metastore catalog (PostgreSQL), the flights topology
on nycflights13 days, on both engines (Spark Connect clients and ``spark-submit`` drivers, whose
Structured Streaming ``foreachBatch`` runs the micro-batches).

``enrich_flights`` runs a row-wise app (the day's flights, selected columns; no weather join,
which reads a snapshot per barrier) with both functions. Each call leaves a marker file naming
its barriers. With barriers 2-8 ready it streams them in micro-batches of at most 4, each built by
one ``process_micro_batch`` call; ``carrier_daily_delay`` then streams the sink's changes.
Checked on the data: one version per barrier tagged with it, each barrier's new rows exactly its
day's flights (a row tagged with the wrong barrier lands in the wrong commit), the downstream
aggregate right at every barrier, ``check_integrity`` clean, and ``process`` called for no
barrier a micro-batch built.

The root tables are ingested with auto compaction (``append_rows(compaction=...)``, every 3 small
files): epochs hold the ingest's ``OPTIMIZE`` commits too, whose rows (``dataChange = false``)
the change readers must skip, or a barrier's commit would hold earlier days again.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta import version_of_barrier
from airflow_provider_tsb.delta.compaction import Compaction
from airflow_provider_tsb.maintenance.integrity import check_integrity
from tests.support.orchestration import flights_backlog, flights_context, flights_job, flights_with_app
from tsb_examples.datasets import nycflights13 as nyc

pytestmark = [pytest.mark.spark]

ENRICHED, DAILY = "tsb.flights.flights_enriched", "tsb.flights.carrier_daily_delay"
DAYS, PER_TRIGGER = 8, 4

APP = '''"""enrich_flights as a row-wise app with process_micro_batch (test_micro_batch_streaming.py)."""
import sys
from pathlib import Path

from pyspark.sql import functions as F

from airflow_provider_tsb.spark import Sink, TsbApp, run_app

FLIGHTS, ENRICHED = "raw.flights", "flights.flights_enriched"
COLUMNS = ["year", "month", "day", "dep_time", "dep_delay", "arr_delay", "carrier", "flight", "origin", "dest",
           "time_hour"]
MARKERS = Path({markers!r})


def rows(changes, *keep):
    return changes.where(F.col("_change_type") == "insert").select(*COLUMNS, *keep)


def process(ctx):
    (MARKERS / f"process-{{ctx.barrier}}").touch()
    return {{ENRICHED: rows(ctx.changes(FLIGHTS))}}


def process_micro_batch(ctx):
    (MARKERS / ("micro-" + "-".join(map(str, ctx.barriers)))).touch()
    return {{ENRICHED: rows(ctx.changes(FLIGHTS), ctx.barrier_column)}}


APP = TsbApp(job_id="enrich_flights", sources={{FLIGHTS: None, "raw.weather": None}},
             sinks={{ENRICHED: Sink(mode="append", max_files=2)}}, process=process,
             process_micro_batch=process_micro_batch)

if __name__ == "__main__":
    sys.exit(run_app(APP))
'''


def _table_at(location: str, barrier: int):
    version = version_of_barrier(location, barrier)
    assert version is not None, (location, barrier)
    return version, DeltaTable(location, version=version).to_pyarrow_table()


@pytest.mark.parametrize("metastore_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
@pytest.mark.parametrize("engine", ["connect", "submit"])
def test_a_streaming_job_builds_its_micro_batches_with_one_call(
    tmp_path: Path, metastore_url: str, spark_remote: str, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    dep = flights_with_app(monkeypatch, tmp_path, metastore_url, spark_remote, engine, "enrich_flights",
                           APP.format(markers=str(markers)))
    topology = dep.topology
    context = flights_context("micro-batch-1")

    days = nyc.days(dt.date(2013, 1, 1), DAYS)
    flights_backlog(dep, context, days, compaction=Compaction(min_files=3))
    enriched = flights_job(dep, "enrich_flights", "streaming", max_barriers_per_trigger=PER_TRIGGER).execute(context)
    daily = flights_job(dep, "carrier_daily_delay", "streaming", "spark_connect",
                        max_barriers_per_trigger=PER_TRIGGER).execute(context)
    assert enriched["barriers"] == list(range(2, DAYS + 1)) and daily["barriers"] == list(range(1, DAYS + 1))

    # who built each barrier: barrier 1 by process (batch, alone), the streamed ones by micro-batches
    micro = [[int(b) for b in p.name.split("-")[1:]] for p in markers.glob("micro-*")]
    alone = sorted(int(p.name.split("-")[1]) for p in markers.glob("process-*"))
    assert micro and all(2 <= len(m) <= PER_TRIGGER for m in micro), micro
    built = sorted(b for m in micro for b in m)
    assert sorted(built + alone) == list(range(1, DAYS + 1)) and 1 in alone, (micro, alone)
    assert len(built) >= DAYS - 2, (micro, alone)  # at most one streamed barrier ran alone

    location = topology.location(ENRICHED)
    versions, so_far = set(), 0
    previous = None
    for b, day in enumerate(days, start=1):
        expected = nyc.flights_of_day(day).num_rows
        so_far += expected
        version, rows = _table_at(location, b)
        versions.add(version)
        assert rows.num_rows == so_far, b
        if previous is not None:  # the barrier's own commit holds its day's flights, and only them
            days_now = pc.value_counts(pc.binary_join_element_wise(
                pc.cast(rows.column("month"), "string"), pc.cast(rows.column("day"), "string"), "-")).to_pylist()
            counts = {d["values"]: d["counts"] for d in days_now}
            assert counts.get(f"{day.month}-{day.day}") == expected, (b, counts)
            assert sum(counts.values()) - counts[f"{day.month}-{day.day}"] == previous, b
        previous = rows.num_rows
        _, per_day = _table_at(topology.location(DAILY), b)
        assert pc.sum(per_day.column("flights")).as_py() == so_far, b  # each change feed: its barrier's rows
    assert len(versions) == DAYS
    compactions = [h for h in DeltaTable(dep.flights).history() if h["operation"] == "OPTIMIZE"]
    assert len(compactions) == 3, compactions  # after days 3, 5 and 7: the epochs read over them
    report = check_integrity(dep.store, topology.name)
    assert report.findings == [] and report.checked >= 2 * DAYS, report
    dep.store.dispose()
