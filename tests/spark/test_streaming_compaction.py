"""An ``append`` sink's auto compaction while a streaming job takes barriers in micro-batches of
several, the way production runs it: the streaming job operator's own process on the metastore
catalog (PostgreSQL), the flights topology on nycflights13 days, on both engines (Spark Connect
clients and ``spark-submit`` drivers).

``enrich_flights`` runs an app that is the example's with its sink compacting at 4 small files
(``Sink(compaction=Compaction(min_files=4))``; the default is 50, more barriers than CI has time
for). It streams barriers 2-8 in micro-batches of at most 3, so the sink crosses the threshold
inside a group: the compaction rides on a group's first barrier, planned on the table before the
group (:func:`~airflow_provider_tsb.spark.outputs.stage_outputs`). ``carrier_daily_delay`` then
streams the sink's changes. Checked on the data: one version per barrier tagged with it, each
barrier's rows those of every day so far (no row lost or doubled by the rewrite), the compaction's
removes ``dataChange=false`` in a barrier's own commit while a later barrier's files of its group
were already written, fewer live files than the barriers wrote, the downstream aggregate right at
every barrier (the change feed holds each barrier's own rows only), and ``check_integrity`` clean.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta.barriers import barrier_of_version
from airflow_provider_tsb.maintenance.integrity import check_integrity
from tests.support.orchestration import flights_backlog, flights_context, flights_job, flights_with_app
from tsb_examples.datasets import nycflights13 as nyc

pytestmark = [pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
FLIGHTS, ENRICHED, DAILY = "tsb.raw.flights", "tsb.flights.flights_enriched", "tsb.flights.carrier_daily_delay"
DAYS, MIN_FILES = 8, 4

APP = '''"""enrich_flights, its sink compacting at {min_files} small files (test_streaming_compaction.py)."""
import dataclasses
import importlib.util
import sys

from airflow_provider_tsb.spark import Sink, run_app
from airflow_provider_tsb.spark.outputs_compaction import Compaction

spec = importlib.util.spec_from_file_location("enrich_flights", {path!r})
example = importlib.util.module_from_spec(spec)
sys.modules["enrich_flights"] = example
spec.loader.exec_module(example)
APP = dataclasses.replace(example.APP, sinks={{example.ENRICHED: Sink(
    mode="append", max_files=2, compaction=Compaction(min_files={min_files}))}})

if __name__ == "__main__":
    sys.exit(run_app(APP))
'''


def _commits(location: str) -> dict[int, dict]:
    """``{barrier: {"version", "timestamp" (commit, epoch ms), "paths" (data files at the version),
    "adds" / "removes" (the commit's actions)}}``."""
    out = {}
    for entry in DeltaTable(location).history():
        version = entry["version"]
        barrier = barrier_of_version(location, version)
        if barrier is None:
            continue
        actions = [json.loads(line) for line in Path(location, "_delta_log", f"{version:020d}.json").read_text()
                   .splitlines() if line.strip()]
        live = pa.table(DeltaTable(location, version=version).get_add_actions(flatten=True))
        out[barrier] = {"version": version, "timestamp": entry["timestamp"],
                        "paths": set(live.column("path").to_pylist()),
                        "adds": [a["add"] for a in actions if "add" in a],
                        "removes": [a["remove"] for a in actions if "remove" in a]}
    return out


def _written_ms(location: str, paths: set[str]) -> int:
    """The newest modification time, epoch ms, of the data files ``paths`` of the table."""
    return max(int(Path(location, p).stat().st_mtime * 1000) for p in paths)


@pytest.mark.parametrize("metastore_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
@pytest.mark.parametrize("engine", ["connect", "submit"])
def test_a_streaming_append_sink_compacts_inside_its_micro_batches(
    tmp_path: Path, metastore_url: str, spark_remote: str, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    source = APP.format(path=str(REPO / "spark_apps" / "flights" / "enrich_flights.py"), min_files=MIN_FILES)
    dep = flights_with_app(monkeypatch, tmp_path, metastore_url, spark_remote, engine, "enrich_flights", source)
    store, topology = dep.store, dep.topology
    context = flights_context("compaction-1")

    days = nyc.days(dt.date(2013, 1, 1), DAYS)
    flights_backlog(dep, context, days)
    enriched = flights_job(dep, "enrich_flights", "streaming", max_barriers_per_trigger=3).execute(context)
    daily = flights_job(dep, "carrier_daily_delay", "streaming", "spark_connect",
                        max_barriers_per_trigger=4).execute(context)
    assert enriched["barriers"] == list(range(2, DAYS + 1)) and daily["barriers"] == list(range(1, DAYS + 1))

    location = topology.location(ENRICHED)
    at = _commits(location)
    assert sorted(at) == list(range(1, DAYS + 1)) and len({c["version"] for c in at.values()}) == DAYS
    flights_so_far = 0
    daily_at = _commits(topology.location(DAILY))
    for b, day in enumerate(days, start=1):
        flights_so_far += nyc.flights_of_day(day).num_rows
        rows = DeltaTable(location, version=at[b]["version"]).to_pyarrow_table()
        assert rows.num_rows == flights_so_far, b  # the rewrite lost or doubled no row
        per_day = DeltaTable(topology.location(DAILY), version=daily_at[b]["version"]).to_pyarrow_table()
        assert pc.sum(per_day.column("flights")).as_py() == flights_so_far, b  # each barrier's changes only

    # the compaction: in a barrier's own commit (tagged with it), every remove dataChange=false and
    # at least MIN_FILES of them, each removed file live at the previous barrier's version
    compacted = [b for b in range(2, DAYS + 1) if at[b]["removes"]]
    assert compacted, {b: len(c["paths"]) for b, c in at.items()}
    for b in compacted:
        removed = {r["path"] for r in at[b]["removes"]}
        assert len(removed) >= MIN_FILES and removed <= at[b - 1]["paths"], b
        assert not any(r["dataChange"] for r in at[b]["removes"]), b
        assert [a["dataChange"] for a in at[b]["adds"]].count(False) >= 1, b
    # ... inside a group: a later barrier's files were written before the compacting barrier committed
    assert any(b + 1 <= DAYS and _written_ms(location, at[b + 1]["paths"] - at[b]["paths"]) <= at[b]["timestamp"]
               for b in compacted), "no compaction rode on a micro-batch of several barriers"
    written = set().union(*({a["path"] for a in c["adds"] if a["dataChange"]} for c in at.values()))
    assert len(at[DAYS]["paths"]) < len(written)
    report = check_integrity(store, topology.name)
    assert report.findings == [] and report.checked >= 2 * DAYS, report
    store.dispose()
