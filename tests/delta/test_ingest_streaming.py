"""The streaming ingestion of the flights example: pacing, end of input, idempotent retries."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta.roots import input_ended
from tsb_examples.datasets.nycflights13 import flights_of_day
from tsb_examples.ingest import ingest_next_flights_days, stream_flights_days


def test_stream_days_then_end_of_input_then_retry_and_next_stretch(tmp_path) -> None:
    import datetime as dt

    flights, weather = str(tmp_path / "flights"), str(tmp_path / "weather")
    calls: list[float] = []
    began = time.monotonic()
    out = stream_flights_days(flights, weather, "dag/run1", days=3, pace_s=0.3,
                              warm_up=lambda: calls.append(time.monotonic()))
    assert out["days"] == ["2013-01-01", "2013-01-02", "2013-01-03"] and out["end_of_input"] is True
    assert len(calls) == 1 and time.monotonic() - began >= 0.6  # warm-up after day 1, then paced
    n = sum(flights_of_day(dt.date(2013, 1, d)).num_rows for d in (1, 2, 3))
    assert out["flights_rows"] == n == DeltaTable(flights).to_pyarrow_table().num_rows
    assert input_ended(flights) and input_ended(weather)
    version = DeltaTable(flights).version()
    # a retried task of the same run appends nothing twice and writes no second marker
    again = stream_flights_days(flights, weather, "dag/run1", days=3, pace_s=0.0)
    assert again["days"] == [] and DeltaTable(flights).version() == version
    # the next stretch continues after the marker with 2013-01-04, not 2013-01-01
    nxt = ingest_next_flights_days(flights, weather, run_key="dag/run2#day0")
    assert nxt["days"] == ["2013-01-04"] and not input_ended(flights)


def test_stream_days_names_bad_arguments(tmp_path) -> None:
    with pytest.raises(ValueError, match="days must be at least 1, got 0"):
        stream_flights_days(str(tmp_path / "f"), str(tmp_path / "w"), "r", days=0)
    with pytest.raises(ValueError, match="pace_s must be a non-negative number of seconds, got -1"):
        stream_flights_days(str(tmp_path / "f"), str(tmp_path / "w"), "r", days=1, pace_s=-1)


def test_a_day_of_flights_comes_from_the_parquet_copy_with_a_row_group_per_day(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ingest reads the day it appends, not the year: the copy holds all 336,776 flights in
    365 row groups, and each day read from it equals that day filtered out of the CSV."""
    import datetime as dt

    import pyarrow.parquet as pq

    from tsb_examples.datasets import nycflights13 as nyc

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = nyc.by_day("flights")
    assert path.startswith(str(tmp_path)) and nyc.by_day("flights") == path  # written once
    meta = pq.ParquetFile(path).metadata
    assert (meta.num_row_groups, meta.num_rows) == (365, 336_776)
    year = nyc.flights()
    for day in (dt.date(2013, 1, 1), dt.date(2013, 7, 4), dt.date(2013, 12, 31)):
        got = nyc.flights_of_day(day)
        assert got.num_rows > 700 and got.equals(nyc._day_filter(year, day)), day
    assert not list(tmp_path.rglob("*.tmp"))
