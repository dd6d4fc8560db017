"""A user's root tables as their Spark writes them flow through a topology (issue 58 item 5).

The wordcount topology's root ``raw.words`` is created and fed by Delta's own Spark connector with
deletion vectors and column mapping on (Databricks' defaults for new tables), the change data
feed off, and every kind of commit a user makes between barriers: ``INSERT``, ``DELETE`` (a
deletion vector), ``UPDATE``, ``MERGE``, a column added then dropped (column mapping) and
``OPTIMIZE`` (``dataChange=false``). Barriers are generated as the emitter does (the roots'
versions read by delta-rs, recorded in the metastore), both jobs run the operator's command line
with the metastore catalog, and at each of 10 barriers both sinks equal what pandas computes from
the rows the test wrote.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.delta import version_of_barrier
from airflow_provider_tsb.hooks.barrier import read_root_versions
from airflow_provider_tsb.hooks.metastore import committed_head
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.spark.cli import run_app
from dev.dataplane import load_app_module
from tests.support.orchestration import wordcount_topology

pytestmark = pytest.mark.delta_spark

WORDS, WORD_COUNT, COUNT_OF_COUNTS = "raw.words", "wordcount.word_count", "wordcount.count_of_counts"
VOCABULARY = [f"w{i}" for i in range(12)]


class UserRoot:
    """The user's side: a words table their Spark writes, and the rows pandas expects of it."""

    def __init__(self, spark, location: str) -> None:
        self.spark, self.t = spark, f"delta.`{location}`"
        self.rows: dict[int, str] = {}
        self.next_id = 0
        self.random = random.Random(58)
        spark.sql(f"CREATE TABLE {self.t} (id BIGINT, word STRING) USING delta TBLPROPERTIES ("
                  "'delta.enableDeletionVectors' = 'true', 'delta.columnMapping.mode' = 'name', "
                  "'delta.enableChangeDataFeed' = 'false')")

    def insert(self, n: int) -> None:
        new = {self.next_id + i: self.random.choice(VOCABULARY) for i in range(n)}
        self.next_id += n
        self.spark.sql(f"INSERT INTO {self.t} (id, word) VALUES "
                       + ", ".join(f"({i}, '{w}')" for i, w in new.items()))
        self.rows.update(new)

    def delete(self, word: str) -> None:
        self.spark.sql(f"DELETE FROM {self.t} WHERE word = '{word}' AND id % 2 = 0")
        self.rows = {i: w for i, w in self.rows.items() if not (w == word and i % 2 == 0)}

    def update(self, word: str, to: str) -> None:
        self.spark.sql(f"UPDATE {self.t} SET word = '{to}' WHERE word = '{word}' AND id % 3 = 0")
        self.rows = {i: (to if w == word and i % 3 == 0 else w) for i, w in self.rows.items()}

    def merge(self, ids: list[int], word: str) -> None:
        source = " UNION ALL ".join(f"SELECT {i}L AS id, '{word}' AS word" for i in ids)
        self.spark.sql(f"MERGE INTO {self.t} AS t USING ({source}) AS s ON t.id = s.id "
                       "WHEN MATCHED THEN UPDATE SET t.word = s.word "
                       "WHEN NOT MATCHED THEN INSERT (id, word) VALUES (s.id, s.word)")
        self.rows.update(dict.fromkeys(ids, word))
        self.next_id = max(self.next_id, max(ids) + 1)

    def add_and_drop_column(self) -> None:
        self.spark.sql(f"ALTER TABLE {self.t} ADD COLUMNS (note STRING)")
        self.spark.sql(f"ALTER TABLE {self.t} DROP COLUMN note")

    def optimize(self) -> None:
        self.spark.sql(f"OPTIMIZE {self.t}")

    def expected(self) -> tuple[Counter, Counter]:
        counts = Counter(self.rows.values())
        return counts, Counter(counts.values())


def _epochs(root: UserRoot) -> list[object]:
    """What the user does before each of the 10 barriers."""
    return [
        lambda: root.insert(40),
        lambda: (root.insert(30), root.delete("w1")),
        lambda: (root.update("w2", "w11"), root.insert(5)),
        lambda: root.optimize(),  # no new data: the counts stay as they are
        lambda: (root.add_and_drop_column(), root.insert(10)),
        lambda: root.merge([3, 5, 7, 500, 501], "merged"),
        lambda: (root.delete("w3"), root.update("w4", "w5")),
        lambda: (root.insert(25), root.optimize()),
        lambda: root.merge([1, 2, 502], "w0"),
        lambda: (root.delete("merged"), root.insert(15)),
    ]


def _table(location: str, barrier: int) -> list[tuple]:
    version = version_of_barrier(location, barrier)
    assert version is not None, f"{location} has no version for barrier {barrier}"
    return [tuple(r.values()) for r in DeltaTable(location, version=version).to_pyarrow_table().to_pylist()]


def test_a_root_written_by_delta_spark_flows_through_wordcount(spark, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    topology = wordcount_topology(str(tmp_path / "warehouse"))
    root = UserRoot(spark, topology.location(WORDS))
    store.registry.register_topology(topology)
    expected: dict[int, tuple[Counter, Counter]] = {}
    for step in _epochs(root):
        step()
        barrier = store.barriers.create(topology.name, read_root_versions(topology)).barrier
        expected[barrier] = root.expected()
    assert sorted(expected) == list(range(1, 11))
    detail = spark.sql(f"DESCRIBE DETAIL {root.t}").collect()[0]
    assert detail["minReaderVersion"] == 3 and {"deletionVectors", "columnMapping"} <= set(detail["tableFeatures"])

    for job in ("wordcount_words", "wordcount_counts"):
        app = load_app_module(f"wordcount/{job}.py").APP
        argv = ["--metastore-url", url, "--until-barrier", "10",
                *(f"--table={name}={topology.location(name)}" for name in (*app.sources, *app.sinks))]
        assert run_app(app, argv, spark=spark) == 0, job

    mismatches = []
    for barrier, (counts, count_of_counts) in expected.items():
        got_counts = Counter({w: c for w, c in _table(topology.location(WORD_COUNT), barrier) if c})
        got_coc = Counter({cnt: n for cnt, n in _table(topology.location(COUNT_OF_COUNTS), barrier) if n})
        if got_counts != counts or got_coc != count_of_counts:
            mismatches.append((barrier, dict(got_counts - counts), dict(counts - got_counts)))
    assert mismatches == []
    # an OPTIMIZE alone is no new data: barrier 4 gives barrier 3's counts
    assert expected[4] == expected[3]
    assert committed_head(store, [f"tsb.{WORD_COUNT}", f"tsb.{COUNT_OF_COUNTS}"]) == 10


def _create_or_append(spark, location: str, rows, first: bool) -> None:
    """The user's ingestion: a Spark DataFrame appended with Delta's writer; the first write
    creates the table with deletion vectors and column mapping."""
    df = spark.createDataFrame(rows)
    if first:
        df.createOrReplaceTempView("tsb_user_rows")
        spark.sql(f"CREATE TABLE delta.`{location}` USING delta TBLPROPERTIES ("
                  "'delta.enableDeletionVectors' = 'true', 'delta.columnMapping.mode' = 'name') "
                  "AS SELECT * FROM tsb_user_rows")
    else:
        df.write.format("delta").mode("append").save(location)


def test_flights_roots_written_by_delta_spark_flow_through_the_topology(spark, tmp_path: Path) -> None:
    """Flights and weather created by Delta's Spark writer with deletion vectors and column
    mapping; a ``DELETE`` of weather rows, a column added and dropped and ``OPTIMIZE`` between
    barriers. ``flights_enriched`` and ``carrier_daily_delay`` equal pandas at every barrier."""
    import datetime as dt

    import pandas as pd

    from tests.support.orchestration import flights_deployment
    from tsb_examples.datasets import nycflights13 as nyc

    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    dep = flights_deployment(url, tmp_path / "warehouse")
    store, topology = dep.store, dep.topology
    weather_rows = pd.DataFrame()
    epochs: dict[int, tuple[pd.DataFrame, pd.DataFrame]] = {}  # barrier: (its new flights, weather at it)
    d1, d2, d3 = nyc.days(dt.date(2013, 1, 1), 3)
    jfk_morning = "origin = 'JFK' AND hour(time_hour) < 12"
    for i, day in enumerate((d1, d2, None, d3)):
        new = pd.DataFrame()
        if day is not None:
            flights, weather = nyc.flights_of_day(day), nyc.weather_of_day(day)
            _create_or_append(spark, dep.flights, flights, first=i == 0)
            _create_or_append(spark, dep.weather, weather, first=i == 0)
            new, weather_rows = flights.to_pandas(), pd.concat([weather_rows, weather.to_pandas()], ignore_index=True)
        if day == d2:  # the user deletes rows: a deletion vector
            spark.sql(f"DELETE FROM delta.`{dep.weather}` WHERE {jfk_morning}")
            hours = pd.to_datetime(weather_rows["time_hour"], utc=True).dt.tz_convert("UTC").dt.hour
            weather_rows = weather_rows[~((weather_rows["origin"] == "JFK") & (hours < 12))]
        if day is None:  # no new data: a column added and dropped, OPTIMIZE of both roots
            spark.sql(f"ALTER TABLE delta.`{dep.weather}` ADD COLUMNS (station_note STRING)")
            spark.sql(f"ALTER TABLE delta.`{dep.weather}` DROP COLUMN station_note")
            for location in (dep.flights, dep.weather):
                spark.sql(f"OPTIMIZE delta.`{location}`")
        barrier = store.barriers.create(topology.name, read_root_versions(topology)).barrier
        epochs[barrier] = (new, weather_rows.copy())
    assert sorted(epochs) == [1, 2, 3, 4]

    enriched = topology.location("tsb.flights.flights_enriched")
    daily = topology.location("tsb.flights.carrier_daily_delay")
    for job in ("enrich_flights", "carrier_daily_delay"):
        app = load_app_module(f"flights/{job}.py").APP
        argv = ["--metastore-url", url, "--until-barrier", "4",
                *(f"--table={name}={topology.location(name)}" for name in (*app.sources, *app.sinks))]
        assert run_app(app, argv, spark=spark) == 0, job

    def key(df: pd.DataFrame) -> Counter:
        hour = pd.to_datetime(df["time_hour"], utc=True).dt.as_unit("ms").astype("int64")
        temp = [None if pd.isna(t) else round(float(t), 3) for t in df["temp"]]  # NaN is no key
        return Counter(zip(df["origin"], hour, df["carrier"], df["flight"], df["sched_dep_time"], temp, strict=True))

    want = Counter()
    for barrier, (new, weather_at) in epochs.items():
        if len(new):
            joined = new.merge(weather_at[["origin", "time_hour", "temp"]], on=["origin", "time_hour"], how="left")
            want += key(joined)
        version = version_of_barrier(enriched, barrier)
        got = DeltaTable(enriched, version=version).to_pandas()
        assert key(got) == want, barrier
        per_day = got.groupby(["carrier", "year", "month", "day"]).size().to_dict()
        table = DeltaTable(daily, version=version_of_barrier(daily, barrier)).to_pandas()
        assert dict(zip(zip(table["carrier"], table["year"], table["month"], table["day"], strict=True),
                        table["flights"], strict=True)) == per_day, barrier
    # the deleted weather shows: day 2's JFK flights before noon UTC have no temperature
    at_2 = DeltaTable(enriched, version=version_of_barrier(enriched, 2)).to_pandas()
    hour = pd.to_datetime(at_2["time_hour"], utc=True).dt.hour
    morning = (at_2["origin"] == "JFK") & (at_2["day"] == 2) & (hour < 12)
    assert morning.sum() > 0 and at_2.loc[morning, "temp"].isna().all()


def test_a_root_delta_rs_cannot_read_is_named_and_spark_reads_it(spark, tmp_path: Path, monkeypatch) -> None:
    """Issue 58 item 5: a root with reader features delta-rs does not read yet (``typeWidening``:
    a column widened from SMALLINT to INT; ``v2Checkpoint``) still gets barriers, and its
    pandas read gave delta-rs's bare ``DeltaProtocolError``. It now names the table, the version
    and the features, and tsb's Spark reader reads the same resolution."""
    from airflow_provider_tsb.exceptions import UnsupportedTableFeatureError
    from airflow_provider_tsb.hooks.barrier import TsbBarrierHook
    from airflow_provider_tsb.read.resolutions import to_pandas
    from airflow_provider_tsb.read.version_reads import read_table_spark

    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    monkeypatch.setenv("TSB_METASTORE_URL", url)  # the emitter's hook finds the metastore there
    CACHES.clear("hooks.metastores")
    store = MetaStore(url)
    store.migrate()
    topology = wordcount_topology(str(tmp_path / "warehouse"))
    t = f"delta.`{topology.location(WORDS)}`"
    for sql in (f"CREATE TABLE {t} (word STRING, n SMALLINT) USING delta TBLPROPERTIES "
                "('delta.enableTypeWidening' = 'true', 'delta.checkpointPolicy' = 'v2')",
                f"INSERT INTO {t} VALUES ('a', 1), ('b', 2)", f"ALTER TABLE {t} ALTER COLUMN n TYPE INT",
                f"INSERT INTO {t} VALUES ('a', 70000)"):
        spark.sql(sql)
    store.registry.register_topology(topology)
    assert TsbBarrierHook(topology).generate("user/1").root_versions == {f"tsb.{WORDS}": 3}
    res = store.resolution.resolve([f"tsb.{WORDS}"], "read-uncommitted")
    with pytest.raises(UnsupportedTableFeatureError, match=rf"table 'tsb.{WORDS}' \(Delta version 3\) uses the reader "
                       r"features \['typeWidening', 'v2Checkpoint'\], which delta-rs .* Read it with Spark"):
        to_pandas(res)
    rows = read_table_spark(spark, res.tables[f"tsb.{WORDS}"]).collect()
    assert sorted((r["word"], r["n"]) for r in rows) == [("a", 1), ("a", 70000), ("b", 2)]
