"""Arrow tables without pyarrow's pandas probe: the barrier emitter and the flights ingest keep
pandas (about 55 MB of RSS) out of their processes."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_tsb.delta.arrow_rows import rows_table
from airflow_provider_tsb.delta.barrier_log import SCHEMA
from airflow_provider_tsb.delta.roots import _epoch_ms, _max_epoch_ms, append_rows
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology

REPO = Path(__file__).resolve().parents[2]


def test_rows_table_is_the_table_from_pylist_gives() -> None:
    rows = [
        {"topology": "t", "barrier": 3, "ts_ms": -28_944_000_000, "ts_kind": "event", "final": False,
         "created_at_ms": 5, "run_key": None, "root_versions": [("a", 1), ("b", 2)]},
        {"topology": "u", "barrier": 4, "ts_ms": 1, "ts_kind": "system", "final": True, "created_at_ms": 6,
         "run_key": "r#1", "root_versions": {}},
        {"topology": "v", "barrier": 5, "ts_ms": 2, "ts_kind": "system", "final": True, "created_at_ms": 7,
         "root_versions": None},
    ]
    got = rows_table(rows, SCHEMA)
    assert got.equals(pa.Table.from_pylist(rows, schema=SCHEMA)) and got.num_rows == 3
    with pytest.raises(TypeError, match="field 'tags' of type list<item: string>"):
        rows_table([{"tags": ["x"]}], pa.schema([pa.field("tags", pa.list_(pa.string()))]))


@pytest.mark.parametrize(("kind", "values"), [
    (pa.timestamp("us", tz="UTC"), [dt.datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=dt.UTC), None,
                                    dt.datetime(1969, 7, 20, 20, 17, 39, tzinfo=dt.UTC)]),
    (pa.timestamp("us"), [dt.datetime(2013, 1, 1, 5), dt.datetime(2013, 1, 2)]),
    (pa.timestamp("ns", tz="UTC"), [dt.datetime(1960, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)]),
    (pa.timestamp("s"), [dt.datetime(1950, 3, 3)]),
    (pa.timestamp("ms", tz="America/New_York"), [dt.datetime(2013, 1, 1, tzinfo=dt.UTC)]),
    (pa.date32(), [dt.date(1969, 12, 31), dt.date(1900, 1, 1)]),
    (pa.date64(), [dt.date(1969, 12, 31)]),
    (pa.int64(), [5, -3]),
])
def test_the_largest_statistic_in_arrow_equals_the_largest_in_python(kind: pa.DataType, values: list) -> None:
    column = pa.chunked_array([pa.array(values, kind)])
    assert _max_epoch_ms(column) == _epoch_ms(max(v for v in column.to_pylist() if v is not None))


EMIT = textwrap.dedent("""
    import datetime, json, sys
    from airflow_provider_tsb.hooks.barrier import TsbBarrierHook
    from airflow_provider_tsb.topology import Topology
    sys.path.insert(0, {dags!r})
    from tsb_examples.datasets import nycflights13 as nyc
    topology = Topology("pandas_free", warehouse={warehouse!r})
    topology.root_table("raw.events", event_time_column="time_hour")
    topology.job("copy", "app.py", sources=["raw.events"], sinks=["out.events"])
    barriers = TsbBarrierHook(topology, ts_kind="event").emit("dag/run", interval_s=0.05, duration_s=2.0)
    nyc.flights_of_day(datetime.date(2013, 1, 2)), nyc.weather_of_day(datetime.date(2013, 1, 2))
    print(json.dumps({{"barriers": barriers, "pandas": "pandas" in sys.modules}}))
""")


def test_the_emitter_and_the_flights_ingest_never_import_pandas(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a process of their own, as the emitter's task runs them: event-time barriers over a
    root whose event time is a zoned timestamp (each reads every live file's statistics and
    writes a barrier-log row), and a day of flights and weather read for the ingest."""
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    MetaStore(url).migrate()
    warehouse = str(tmp_path / "warehouse")
    events = Topology("pandas_free", warehouse=warehouse)
    events.root_table("raw.events", event_time_column="time_hour")
    location = events.location("raw.events")
    for hour in (1, 2, 3):
        append_rows(location, pa.table({"time_hour": pa.array([dt.datetime(1969, 7, 20, hour, tzinfo=dt.UTC)],
                                                              pa.timestamp("us", tz="UTC"))}))
    monkeypatch.setenv("TSB_METASTORE_URL", url)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from tsb_examples.datasets import nycflights13 as nyc

    nyc.by_day("flights"), nyc.by_day("weather")  # the copies exist, as after a first ingest
    script = EMIT.format(dags=str(REPO / "dags"), warehouse=warehouse)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(result["barriers"]) >= 1 and result["pandas"] is False, (result, out.stderr[-2000:])
