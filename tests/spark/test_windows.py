"""Event-time windows and late data (issue 13 item 4): ``origin_hourly_delay`` on the flights
topology with ``windows=True`` (``dags/common/flights.py``), run by the operator's own
``spark-submit`` command line with the metastore catalog (``--metastore-url``) on PostgreSQL, and
the same command line in the data-plane tests' Spark session on SQLite (one JVM less: CI time).

Three event-time barriers (watermark = min over ``raw.flights`` and ``raw.weather`` of their
newest ``time_hour``, as :class:`~airflow_provider_tsb.hooks.barrier.TsbBarrierHook` computes):

1. 2013-01-01 (UTC 10:00 .. 01-02 04:00);
2. late rows for a window emitted by barrier 1, rows for the window barrier 1 left open, then
   2013-01-02;
3. only flights: late rows for windows of barrier 2, a row for a still-open window and one
   beyond the watermark (the weather's newest hour holds the watermark where it was).

At every barrier the windows table equals a pandas computation over the rows visible at the
barrier: the windows with ``end <= watermark``, over the rows that were not late on arrival; the
open-window state holds the others; the late counter has exactly the late rows of each barrier.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta import version_of_barrier
from airflow_provider_tsb.delta.roots import append_rows
from airflow_provider_tsb.exceptions import TopologyError
from airflow_provider_tsb.metastore.records import TsKind
from dev.job_processes import Deployment, run_job
from tests.support.orchestration import flights_deployment
from tsb_examples.datasets import nycflights13 as nyc

REPO = Path(__file__).resolve().parents[2]
FLIGHTS, WEATHER = "tsb.raw.flights", "tsb.raw.weather"
WINDOWS, OPEN = "tsb.flights.origin_hourly_delay", "tsb.flights.origin_hourly_open"
LATE = "tsb.flights.origin_hourly_late"
HOUR = pd.Timedelta(hours=1)
KEYS = ["origin", "window_start", "window_end"]

pytestmark = [pytest.mark.spark]


def _copies(day: dt.date, hour_utc: dt.datetime, n: int, dep_delay: float) -> pa.Table:
    """``n`` flights of ``day`` re-timed to ``hour_utc`` with ``dep_delay`` (recognisable rows)."""
    rows = nyc.flights_of_day(day).slice(0, n)
    stamp = pa.array([hour_utc] * n, pa.timestamp("us", tz="UTC"))
    rows = rows.set_column(rows.schema.get_field_index("time_hour"), "time_hour", stamp)
    return rows.set_column(rows.schema.get_field_index("dep_delay"), "dep_delay", pa.array([dep_delay] * n))


def _utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)


def _read(location: str, barrier: int) -> pd.DataFrame:
    version = version_of_barrier(location, barrier)
    assert version is not None, f"{location} has no version for barrier {barrier}"
    return DeltaTable(location, version=version).to_pandas()


def _ms(series: pd.Series) -> pd.Series:
    """Epoch milliseconds of a timestamp column (whatever its unit)."""
    return pd.to_datetime(series, utc=True).dt.as_unit("ms").astype("int64")


def _ms_of(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def _expected(arrivals: dict[int, pa.Table], marks: dict[int, int], barrier: int) -> tuple[pd.DataFrame, ...]:
    """(emitted windows, open windows, late rows per barrier) at ``barrier``, computed by pandas."""
    frames = []
    for b in range(1, barrier + 1):
        df = arrivals[b].select(["origin", "time_hour", "dep_time", "dep_delay"]).to_pandas()
        df["arrival"] = b
        frames.append(df)
    rows = pd.concat(frames, ignore_index=True)
    rows["window_start"] = pd.to_datetime(rows["time_hour"], utc=True).dt.floor("h")
    rows["window_end"] = rows["window_start"] + HOUR
    end_ms = _ms(rows["window_end"])
    before = rows["arrival"].map(lambda b: marks.get(b - 1, -(2**63)))  # nothing is late at the first
    rows["late"] = end_ms <= before
    groups = rows[~rows["late"]].groupby(KEYS).agg(
        flights=("origin", "size"), departures=("dep_time", "count"),
        delay_n=("dep_delay", "count"), delay_sum=("dep_delay", "sum"),
    ).reset_index()
    gend = _ms(groups["window_end"])
    groups["emitted_barrier"] = gend.map(lambda e: min(b for b in marks if marks[b] >= e) if e <= marks[barrier] else 0)
    emitted = groups[gend <= marks[barrier]].sort_values(KEYS).reset_index(drop=True)
    still_open = groups[gend > marks[barrier]].drop(columns="emitted_barrier").sort_values(KEYS).reset_index(drop=True)
    late = rows[rows["late"]].groupby("arrival").size()
    counts = pd.DataFrame({"barrier": range(1, barrier + 1)})
    counts["watermark_ms"] = counts["barrier"].map(marks)
    counts["late_rows"] = counts["barrier"].map(lambda b: int(late.get(b, 0)))
    return emitted, still_open, counts


def _normalize(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for col in ("window_start", "window_end"):
        df[col] = _ms(df[col])
    return df.sort_values(KEYS).reset_index(drop=True)


#: 1969-01-01 is this many days before 2013-01-01 (44 years, 11 of them leap years): the same
#: weekdays and hours, before the epoch
TO_1969 = dt.timedelta(days=16071)


def _shifted(rows: pa.Table, shift: dt.timedelta) -> pa.Table:
    """``rows`` with ``time_hour`` moved ``shift`` earlier."""
    if not shift:
        return rows
    index = rows.schema.get_field_index("time_hour")
    moved = [None if t is None else t - shift for t in rows.column(index).to_pylist()]
    return rows.set_column(index, "time_hour", pa.array(moved, rows.schema.field(index).type))


def test_hourly_windows_emit_at_the_watermark_and_drop_late_rows(
    tmp_path: Path, metastore_url: str, request: pytest.FixtureRequest
) -> None:
    _hourly_windows(tmp_path, metastore_url, request, dt.timedelta(0))


def test_event_time_before_1970_flows_through_the_topology(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The same three barriers with every event 44 years earlier (1969): negative barrier
    timestamps are generated, stored, handed to the job, and the windows equal pandas again.
    Before, the first barrier failed after ingest with ``OutOfRangeError: ts_ms ... from 0``."""
    marks = _hourly_windows(tmp_path, f"sqlite:///{tmp_path / 'tsb.db'}", request, TO_1969)
    assert marks[1] == _ms_of(_utc(1969, 1, 2, 4)) == -31435200000


def _hourly_windows(
    tmp_path: Path, metastore_url: str, request: pytest.FixtureRequest, shift: dt.timedelta
) -> dict[int, int]:
    from airflow_provider_tsb.hooks.barrier import read_root_versions

    def at(*args: int) -> dt.datetime:
        return _utc(*args) - shift

    def ingest_day(day: dt.date) -> None:
        meta = {"ingest.day": day.isoformat()}
        append_rows(flights, _shifted(nyc.flights_of_day(day), shift), metadata=meta)
        append_rows(weather, _shifted(nyc.weather_of_day(day), shift), metadata=meta)

    dep = flights_deployment(metastore_url, tmp_path / "warehouse", windows=True)
    store, topology, flights, weather, hook = dep.store, dep.topology, dep.flights, dep.weather, dep.hook
    arrivals: dict[int, pa.Table] = {}
    marks: dict[int, int] = {}

    def barrier(rows: list[pa.Table]) -> None:
        versions = read_root_versions(topology)
        info = store.barriers.create(topology.name, versions, ts_ms=hook.watermark(versions),
                                             ts_kind=TsKind.EVENT)
        arrivals[info.barrier] = pa.concat_tables(rows)
        marks[info.barrier] = info.ts_ms

    day1, day2 = nyc.days(dt.date(2013, 1, 1), 2)
    ingest_day(day1)
    barrier([_shifted(nyc.flights_of_day(day1), shift)])
    # barrier 2: late for 01-01 15:00 (emitted by 1); on time for 01-02 04:00 (left open by 1)
    extra2 = pa.concat_tables([
        _copies(day1, at(2013, 1, 1, 15), 4, 999.0),
        _copies(day1, at(2013, 1, 2, 4), 3, 100.0),
    ])
    append_rows(flights, extra2)
    ingest_day(day2)
    barrier([extra2, _shifted(nyc.flights_of_day(day2), shift)])
    # barrier 3, flights only: late for 01-02 04:00 (held by 1, emitted by 2) and 01-02 12:00;
    # on time for 01-03 04:00 (open); beyond the watermark 01-03 10:00 (the weather's newest hour
    # keeps the watermark where it was)
    extra3 = pa.concat_tables([
        _copies(day2, at(2013, 1, 2, 4), 2, 999.0),
        _copies(day2, at(2013, 1, 2, 12), 3, 999.0),
        _copies(day2, at(2013, 1, 3, 4), 2, 50.0),
        _copies(day2, at(2013, 1, 3, 10), 1, 7.0),
    ])
    append_rows(flights, extra3)
    barrier([extra3])
    assert marks == {1: _ms_of(at(2013, 1, 2, 4)), 2: _ms_of(at(2013, 1, 3, 4)), 3: _ms_of(at(2013, 1, 3, 4))}
    if not shift:
        assert marks == {1: 1357099200000, 2: 1357185600000, 3: 1357185600000}  # 01-02 04:00, 01-03 04:00 UTC

    started = time.monotonic()
    if metastore_url.startswith("sqlite"):  # the app's command line in this process's Spark (saves a JVM)
        from airflow_provider_tsb.spark.cli import run_app
        from dev.dataplane import load_app_module

        app = load_app_module("flights/origin_hourly_delay.py").APP
        argv = ["--metastore-url", metastore_url, "--until-barrier", "3",
                *(f"--table={name}={topology.location(name)}" for name in (FLIGHTS, WINDOWS, OPEN, LATE))]
        spark = request.getfixturevalue("spark")
        assert run_app(app, argv, spark=spark) == 0
        # a system-time barrier in an event-time topology is refused, naming both kinds
        with pytest.raises(TopologyError, match="has event-time barriers .*a system-time barrier is refused"):
            store.barriers.create(topology.name, read_root_versions(topology), ts_kind=TsKind.SYSTEM)
    else:  # the operator's spark-submit command line
        proc = run_job(Deployment(metastore_url, store, topology, tmp_path), "origin_hourly_delay", 3)
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    print(f"origin_hourly_delay, 3 barriers: {time.monotonic() - started:.1f} s")

    for b in range(1, 4):
        emitted, still_open, counts = _expected(arrivals, marks, b)
        got = _normalize(_read(topology.location(WINDOWS), b))
        want = _normalize(emitted)
        exact = [*KEYS, "flights", "departures", "delay_n", "emitted_barrier"]
        assert got[exact].to_dict("records") == want[exact].to_dict("records"), b
        assert got["delay_sum"].tolist() == pytest.approx(want["delay_sum"].tolist())
        assert got["mean_dep_delay"].tolist() == pytest.approx((want["delay_sum"] / want["delay_n"]).tolist())
        assert (got["window_end"] <= marks[b]).all()
        opened = _normalize(_read(topology.location(OPEN), b))
        want_open = _normalize(still_open)
        assert opened[exact[:-1]].to_dict("records") == want_open[exact[:-1]].to_dict("records"), b
        late = _read(topology.location(LATE), b).sort_values("barrier")
        assert late[["barrier", "watermark_ms", "late_rows"]].to_dict("records") == counts.to_dict("records"), b
    # the late-data policy, spelled out: 4 late rows at barrier 2, 5 at barrier 3, none at 1
    assert late["late_rows"].tolist() == [0, 4, 5]
    assert _ms(late["oldest_late_window"]).tolist()[1:] == [_ms_of(at(2013, 1, 1, 15)), _ms_of(at(2013, 1, 2, 4))]
    final = _normalize(_read(topology.location(WINDOWS), 3))
    held = final[final["window_start"] == _ms_of(at(2013, 1, 2, 4))]
    assert len(held) > 0 and set(held["emitted_barrier"]) == {2}  # left open by barrier 1, emitted by 2
    assert not (final["mean_dep_delay"] > 900).any()  # no late row (dep_delay 999) reached a window
    # the on-time rows of 01-03 04:00 and the row beyond the watermark are open state after barrier 3
    opened = _normalize(_read(topology.location(OPEN), 3))
    assert {_ms_of(at(2013, 1, 3, 4)), _ms_of(at(2013, 1, 3, 10))} <= set(opened["window_start"])
    return marks
