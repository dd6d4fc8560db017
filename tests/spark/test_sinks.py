"""Sinks that real tables need (issue 13 item 5), through the operator's path: the
``spark_apps/sinks/cdc_sinks.py`` app run as its own process, a Spark Connect client of the
session's server (the default engine), on a SQLite metastore, three barriers of a CDC feed:

* partitioned sinks: Hive-style directories, Delta ``partitionColumns`` and ``partitionValues``;
  a consistent read filtered on the partition column reads only that partition's files;
* additive schema evolution: barrier 2 adds the nullable column ``note``; older rows read back
  null, AS OF barrier 1 has the old schema; incompatible changes are refused before any commit;
* merge with deletes: the current-state table equals the expected key set row for row after every
  barrier, and each barrier's commit removes exactly the files that held a changed id;
* exactly-once: the run is SIGKILLed after barrier 2's files are staged (PROCESSED), a
  READ_COMMITTED read then serves the staged merge (new files, minus the files it replaces),
  the rerun gives the expected table, and a retried commit is a no-op.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_tsb.delta.barriers import version_of_barrier
from airflow_provider_tsb.delta.log import commit_info, read_commit_actions
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology
from dev.dataplane import REPO
from dev.job_processes import KILLED, Deployment, run_job

CDC, EVENTS, CURRENT = "tsb.raw.cdc", "tsb.sinks.events", "tsb.sinks.current"
JOB = "cdc_sinks"
BARRIERS = 3
#: the barrier whose output adds the nullable column ``note``
EVOLVED = 2
REGIONS = ("ap", "eu", "us")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def feed(barrier: int) -> list[dict[str, Any]]:
    """The change rows of ``barrier`` (at most one per id); ``note`` exists from barrier 2 on."""
    def row(i: int, op: str, value: int, note: str | None = None, region: str | None = None) -> dict[str, Any]:
        out = {"id": i, "region": region or REGIONS[i % 3], "op": op, "value": value}
        return {**out, "note": note} if barrier >= EVOLVED else out

    if barrier == 1:
        return [row(i, "I", i * 10) for i in range(1, 41)]
    if barrier == 2:
        return [row(2, "U", 21), row(3, "U", 31, region="eu"), row(5, "U", 51, note="hello"), row(39, "D", 0),
                row(41, "I", 410, note="new")]
    return [row(7, "U", 71), row(41, "D", 0), row(2, "D", 0), row(43, "I", 430)]


def expected_current(upto: int) -> dict[int, tuple]:
    state: dict[int, dict[str, Any]] = {}
    for b in range(1, upto + 1):
        for r in feed(b):
            if r["op"] == "D":
                state.pop(r["id"], None)
            else:
                state[r["id"]] = r
    return {i: (r["region"], r["op"], r["value"], r.get("note")) for i, r in state.items()}


def deploy(root: Path, url: str) -> Deployment:
    store = MetaStore(url)
    store.migrate()
    topo = Topology("sinks", warehouse=str(root / "warehouse"))
    topo.root_table(CDC)
    topo.job(JOB, str(REPO / "spark_apps" / "sinks" / "cdc_sinks.py"), sources=[CDC], sinks=[EVENTS, CURRENT])
    store.registry.register_topology(topo)
    from airflow_provider_tsb.hooks.barrier import read_root_versions

    for b in range(1, BARRIERS + 1):
        fields = [("id", pa.int64()), ("region", pa.string()), ("op", pa.string()), ("value", pa.int64())]
        if b >= EVOLVED:
            fields.append(("note", pa.string()))
        data = pa.Table.from_pylist(feed(b), schema=pa.schema(fields))
        write_deltalake(topo.location(CDC), data, mode="append", schema_mode="merge" if b == EVOLVED else None)
        store.barriers.create(topo.name, read_root_versions(topo), run_key=f"sinks/{b}")
    return Deployment(url, store, topo, root)


def run_with_crash(dep: Deployment, remote: str) -> dict[str, Any]:
    """SIGKILL after barrier 2's merge files are staged; what READ_COMMITTED serves then; the
    rerun; the job a client of the Spark Connect server ``remote``."""
    started = time.monotonic()
    crashed = run_job(dep, JOB, BARRIERS, remote=remote, TSB_KILL_AT=f"after_files:{JOB}:{EVOLVED}")
    crashed_s = time.monotonic() - started
    assert crashed.returncode in KILLED, crashed.stderr[-3000:]
    from airflow_provider_tsb.read.readers import read_tables_arrow

    staged = read_tables_arrow([CURRENT], "read-committed", store=dep.store)[CURRENT]
    state = dep.store.resolution.resolve([CURRENT], _level("read-committed")).tables[CURRENT]
    started = time.monotonic()
    resumed = run_job(dep, JOB, BARRIERS, remote=remote)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    print(f"Spark Connect client: crashed run {crashed_s:.1f} s, resumed run {time.monotonic() - started:.1f} s")
    return {"staged": staged, "staged_state": state}


def _level(name: str) -> Any:
    from airflow_provider_tsb.consistency import ReadOptions

    return ReadOptions.of(name)


def rows_of(table: pa.Table) -> dict[int, tuple]:
    cols = table.column_names
    return {
        r["id"]: (r["region"], r["op"], r["value"], r.get("note") if "note" in cols else None)
        for r in table.to_pylist()
    }


@pytest.fixture(scope="module")
def sqlite_run(tmp_path_factory: pytest.TempPathFactory,
               spark_remote: str) -> Iterator[tuple[Deployment, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("sinks")
    dep = deploy(root, f"sqlite:///{root / 'tsb.db'}")
    yield dep, run_with_crash(dep, spark_remote)


def _file_ids(location: str, path: str) -> set[int]:
    return set(pq.read_table(f"{location}/{path}", columns=["id"]).column("id").to_pylist())


def check_merge(dep: Deployment) -> None:
    """Row for row per barrier; each barrier's commit removes exactly the files with a changed id."""
    loc = dep.location(CURRENT)
    from airflow_provider_tsb.read.readers import read_tables_arrow

    for b in range(1, BARRIERS + 1):
        got = read_tables_arrow([CURRENT], "repeatable-read", store=dep.store, as_of=b)[CURRENT]
        assert rows_of(got) == expected_current(b), f"barrier {b}"
        if b == 1:
            continue
        version, before = version_of_barrier(loc, b), version_of_barrier(loc, b - 1)
        assert version is not None and before is not None
        files = DeltaTable(loc, version=before).get_add_actions(flatten=True).column("path").to_pylist()
        changed = {r["id"] for r in feed(b)}
        holding = {p for p in files if _file_ids(loc, p) & changed}
        actions = read_commit_actions(loc, version) or []
        removed = {a["remove"]["path"] for a in actions if "remove" in a}
        assert removed == holding, f"barrier {b}: removed {sorted(removed)}, files with a changed id {sorted(holding)}"
        assert 0 < len(removed) < len(files), (b, len(removed), len(files))
        adds = sum("add" in a for a in actions)
        print(f"barrier {b}: {len(changed)} changed ids, removed {len(removed)} of {len(files)} files, added {adds}")


def test_merge_with_deletes_rewrites_only_the_files_of_changed_keys(
    sqlite_run: tuple[Deployment, dict[str, Any]],
) -> None:
    dep, _ = sqlite_run
    check_merge(dep)


def test_a_crash_after_staging_serves_the_staged_merge_and_the_rerun_commits_it_once(
    sqlite_run: tuple[Deployment, dict[str, Any]],
) -> None:
    dep, run = sqlite_run
    state = run["staged_state"]
    assert (state.barrier, state.state) == (EVOLVED, "PROCESSED")
    assert state.staged is not None and state.staged["removes"], state.staged
    assert rows_of(run["staged"]) == expected_current(EVOLVED)  # with the new column of the staged files
    loc = dep.location(CURRENT)
    tags = [commit_info(loc, v).get("tsb.barrier") for v in range(DeltaTable(loc).version() + 1)]
    assert [t for t in tags if t is not None] == ["1", "2", "3"], tags  # each barrier committed once
    from airflow_provider_tsb.delta.commit import StagedFile, commit_barrier_files
    from airflow_provider_tsb.delta.conventions import BarrierTag

    head = DeltaTable(loc).version()
    outcome = commit_barrier_files(
        loc, [StagedFile("nope.parquet", 1, 1, 1, "{}")], tag=BarrierTag(BARRIERS, JOB), mode="append",
        schema=DeltaTable(loc).schema(),
    )
    assert (outcome.committed, DeltaTable(loc).version()) == (False, head)
    assert outcome.version == version_of_barrier(loc, BARRIERS)


def test_partitioned_sinks_are_read_with_partition_pruning(
    sqlite_run: tuple[Deployment, dict[str, Any]], spark: Any,
) -> None:
    from pyspark.sql import functions as F

    from airflow_provider_tsb.read.readers import read_tables

    dep, _ = sqlite_run
    loc = dep.location(EVENTS)
    table = DeltaTable(loc)
    assert table.metadata().partition_columns == ["region"]
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert {a["partition.region"] for a in adds} == set(REGIONS)
    assert all(a["path"].split("/")[-2] == f"region={a['partition.region']}" for a in adds)
    frame = read_tables(spark, [EVENTS], "repeatable-read", store=dep.store)[EVENTS]
    eu = frame.where(F.col("region") == "eu")
    read = {p.rsplit("/", 1)[-1] for p in eu.inputFiles()}
    eu_files = {a["path"].rsplit("/", 1)[-1] for a in adds if a["partition.region"] == "eu"}
    assert read == eu_files and len(eu_files) < len(adds), (read, len(adds))
    want = sorted((r["id"], r["op"]) for b in range(1, BARRIERS + 1) for r in feed(b) if r["region"] == "eu")
    assert sorted((r["id"], r["op"]) for r in eu.collect()) == want
    current = DeltaTable(dep.location(CURRENT))
    assert current.metadata().partition_columns == ["region"]


def test_a_new_nullable_column_evolves_the_schema_and_as_of_keeps_the_old_one(
    sqlite_run: tuple[Deployment, dict[str, Any]],
) -> None:
    from airflow_provider_tsb.read.readers import read_tables_arrow

    dep, _ = sqlite_run
    for name in (EVENTS, CURRENT):
        loc = dep.location(name)
        before, after = version_of_barrier(loc, EVOLVED - 1), version_of_barrier(loc, EVOLVED)
        assert before is not None and after is not None
        assert "note" not in [f.name for f in DeltaTable(loc, version=before).schema().fields]
        assert "note" in [f.name for f in DeltaTable(loc, version=after).schema().fields]
        old = read_tables_arrow([name], "repeatable-read", store=dep.store, as_of=EVOLVED - 1)[name]
        assert "note" not in old.column_names and old.num_rows > 0
        new = read_tables_arrow([name], "repeatable-read", store=dep.store, as_of=EVOLVED)[name]
        notes = {(r["id"], r["op"], r["note"]) for r in new.to_pylist()}
        assert {(5, "U", "hello"), (41, "I", "new"), (10, "I", None)} <= notes, sorted(notes)
        # append/merge: delta-rs writes the metaData only on overwrite, so the schema is its own
        # commit right before the barrier's (tagged tsb.schema.barrier, no barrier tag, no txn)
        assert any("metaData" in a for a in read_commit_actions(loc, after - 1) or [])
        assert commit_info(loc, after - 1).get("tsb.schema.barrier") == str(EVOLVED)
        assert "tsb.barrier" not in commit_info(loc, after - 1)
        assert json.loads(commit_info(loc, after)["tsb.barrier"]) == EVOLVED


def test_incompatible_changes_are_refused_before_any_commit(tmp_path: Path, spark: Any) -> None:
    from airflow_provider_tsb.exceptions import SchemaChangeError
    from dev.dataplane import write_sink

    loc = str(tmp_path / "t")

    def write(barrier: int, rows: list[tuple], ddl: str, **kw: Any) -> Any:
        return write_sink(spark, spark.createDataFrame(rows, ddl), table="tsb.mart.t", location=loc, job_id="j",
                             barrier=barrier, mode=kw.pop("mode", "append"), inputs={}, **kw)

    write(1, [(1, "eu", 10)], "id long, region string, value long", partition_by=("region",))
    head = DeltaTable(loc).version()
    cases = [
        ({"partition_by": ()}, "id long, region string, value long",
         "table tsb.mart.t: the sink declares partition_by=() but the Delta table", "is partitioned by ('region',)"),
        ({"partition_by": ("region",)}, "id long, region string",
         "table tsb.mart.t, barrier 2: the output has no column(s) ['value']", "keep the column"),
        ({"partition_by": ("region",)}, "id long, region string, value string",
         "table tsb.mart.t, barrier 2: column 'value' is string in the output but bigint", "Cast it in the app"),
        ({"partition_by": ("region",), "schema": "id long, region string, value long, n int not null"},
         "id long, region string, value long, n int",
         "table tsb.mart.t, barrier 2: new column 'n' is declared NOT NULL", "Declare it nullable"),
    ]
    for kw, ddl, *parts in cases:
        rows = [tuple([2, "eu", "x" if "value string" in ddl else 20, 1][: len(ddl.split(","))])]
        with pytest.raises(SchemaChangeError) as err:
            write(2, rows, ddl, **kw)
        assert all(p in str(err.value) for p in parts), str(err.value)
        assert DeltaTable(loc).version() == head
    result = write(2, [(2, "us", 20, 7)], "id long, region string, value long, n int", partition_by=("region",))
    assert result.version == head + 2  # the schema commit, then the barrier's


def test_a_merge_output_with_two_rows_for_one_key_is_refused_before_any_write(tmp_path: Path, spark: Any) -> None:
    """Two rows of one key would both land in a merge sink's table: refused, naming the key."""
    from airflow_provider_tsb.exceptions import DuplicateKeyError
    from dev.dataplane import write_sink

    loc = str(tmp_path / "m")
    ddl = "id long, value long"

    def write(barrier: int, rows: list[tuple]) -> Any:
        return write_sink(spark, spark.createDataFrame(rows, ddl), table="tsb.mart.m", location=loc, job_id="j",
                             barrier=barrier, mode="merge", keys=("id",), inputs={})

    with pytest.raises(DuplicateKeyError, match=r"table tsb.mart.m, barrier 1: .*\{'id': 1\} \(2 rows\)"):
        write(1, [(1, 10), (1, 11), (2, 20)])  # a new table
    assert not DeltaTable.is_deltatable(loc)
    write(1, [(1, 10), (2, 20), (None, 5), (None, 6)])  # null keys are inserted as they are
    head = DeltaTable(loc).version()
    with pytest.raises(DuplicateKeyError, match=r"barrier 2: .*\{'id': 2\} \(3 rows\).*dropDuplicates"):
        write(2, [(2, 21), (2, 22), (2, 23), (3, 30)])  # an existing table
    assert DeltaTable(loc).version() == head
    write(2, [(2, 21), (3, 30)])
    rows = sorted(DeltaTable(loc).to_pyarrow_table().to_pylist(),
                  key=lambda r: (r["id"] is None, r["id"] or 0, r["value"]))
    assert rows == [{"id": 1, "value": 10}, {"id": 2, "value": 21}, {"id": 3, "value": 30},
                    {"id": None, "value": 5}, {"id": None, "value": 6}]


def test_partition_values_spark_escapes_round_trip(tmp_path: Path, spark: Any) -> None:
    """Spark escapes ``:``, ``/``, ``%`` in directory names and writes null as
    ``__HIVE_DEFAULT_PARTITION__``: the commit's partition values and a read give the values back."""
    from airflow_provider_tsb.spark.inputs import read_snapshot
    from dev.dataplane import write_sink

    loc = str(tmp_path / "odd")
    values = ["a b", "x:y", "p/q", "50%", None]
    df = spark.createDataFrame(list(enumerate(values)), "id long, region string")
    write_sink(spark, df, table="tsb.mart.odd", location=loc, job_id="j", barrier=1, mode="append", inputs={},
                  partition_by=("region",))
    adds = pa.table(DeltaTable(loc).get_add_actions(flatten=True)).column("partition.region").to_pylist()
    assert sorted(adds, key=str) == sorted(values, key=str)
    assert sorted((r["id"], r["region"]) for r in read_snapshot(spark, loc, 0).collect()) == list(enumerate(values))
    from airflow_provider_tsb.read.version_reads import scan_to_arrow

    rows = scan_to_arrow(DeltaTable(loc)).to_pylist()  # delta-rs decodes the same paths
    assert sorted((r["id"], r["region"]) for r in rows) == list(enumerate(values))


def test_a_crash_between_the_schema_commit_and_the_data_commit_reruns_to_the_same_table(
    tmp_path: Path, spark: Any,
) -> None:
    """The schema commit of an append/merge barrier is made, the process dies before the data
    commit; the rerun commits the data only and the table is what it would be without the crash. A bad
    ``delete_when`` is refused with the sink's columns."""
    from deltalake import Schema

    from airflow_provider_tsb.delta.commit import evolve_table_schema
    from airflow_provider_tsb.delta.conventions import BarrierTag
    from airflow_provider_tsb.spark.inputs import read_snapshot
    from dev.dataplane import write_sink

    first = ([(1, "a", 10), (2, "b", 20)], "id long, k string, value long")
    second = ([(2, "b", 21, "x"), (3, "c", 30, None)], "id long, k string, value long, note string")

    def write(loc: str, barrier: int, data: tuple[list[tuple], str], **kw: Any) -> Any:
        return write_sink(spark, spark.createDataFrame(*data), table="tsb.mart.m", location=loc, job_id="j",
                             barrier=barrier, mode="merge", keys=("id",), inputs={}, **kw)

    loc = str(tmp_path / "m")
    write(loc, 1, first)
    schema = Schema.from_arrow(pa.schema([("id", pa.int64()), ("k", pa.string()), ("value", pa.int64()),
                                          ("note", pa.string())]))
    evolve_table_schema(loc, DeltaTable(loc), schema, BarrierTag(2, "j"), None)  # then the crash
    head = DeltaTable(loc).version()
    assert write(loc, 2, second).version == head + 1  # the data commit only
    assert [f.name for f in DeltaTable(loc).schema().fields] == ["id", "k", "value", "note"]
    got = sorted(tuple(r) for r in read_snapshot(spark, loc, head + 1).collect())
    assert got == [(1, "a", 10, None), (2, "b", 21, "x"), (3, "c", 30, None)]  # as a run without the crash
    with pytest.raises(ValueError, match=r"Sink\(delete_when=\"opp = 'D'\"\) is not a boolean condition on the "
                                         r"output's columns \['id', 'k', 'value', 'note'\]"):
        write(loc, 3, second, delete_when="opp = 'D'")


def test_the_files_a_sink_commits_carry_timestamp_and_date_statistics(tmp_path: Path, spark: Any) -> None:
    """Delta collects min/max for timestamps and dates ("Per-file Statistics", milliseconds):
    the files tsb commits carry them, so ``change_ranges`` bounds such a column of a sink (it
    raised ``KeyError: 'date'`` when only ``nullCount`` was written) and ``within`` skips on it."""
    import datetime as dt
    from decimal import Decimal

    from airflow_provider_tsb.spark.inputs import change_ranges
    from dev.dataplane import write_sink

    loc = str(tmp_path / "daily")
    ddl = "id long, at timestamp, local timestamp_ntz, day date, amount decimal(10,2)"
    utc = dt.UTC

    def rows(day: int) -> list[tuple]:
        at = dt.datetime(1969, 7, day, 20, 17, 40, 123456, tzinfo=utc)  # before 1970, with microseconds
        return [(day, at, dt.datetime(2013, 1, day, 5, 0, 0, 999), dt.date(2013, 1, day), Decimal("1.50")),
                (day + 10, at + dt.timedelta(hours=1), dt.datetime(2013, 1, day, 6), dt.date(2013, 1, day), None)]

    for barrier in (1, 2):
        write_sink(spark, spark.createDataFrame(rows(barrier), ddl), table="tsb.mart.daily", location=loc,
                   job_id="j", barrier=barrier, mode="append", inputs={}, max_files=1)
    (stats,) = [json.loads(a["add"]["stats"]) for a in read_commit_actions(loc, 1) if "add" in a]
    assert stats["minValues"]["at"] == "1969-07-02T20:17:40.123Z"  # truncated to the millisecond
    assert stats["maxValues"]["at"] == "1969-07-02T21:17:40.124Z"  # rounded up: a bound
    assert stats["minValues"]["local"] == "2013-01-02T05:00:00.000"  # no zone for timestamp_ntz
    assert stats["maxValues"]["local"] == "2013-01-02T06:00:00.000"
    assert stats["minValues"]["day"] == stats["maxValues"]["day"] == "2013-01-02"
    assert "amount" not in stats["minValues"] and stats["nullCount"]["amount"] == 1
    ranges = change_ranges(loc, 0, 1, ["at", "day", "local", "amount"])  # the epoch of barrier 2
    assert ranges["day"] == (dt.date(2013, 1, 2), dt.date(2013, 1, 2))
    assert ranges["at"][0].replace(tzinfo=utc) == dt.datetime(1969, 7, 2, 20, 17, 40, 123000, tzinfo=utc)
    assert ranges["local"][1] == dt.datetime(2013, 1, 2, 6)
    assert ranges["amount"] == (None, None)  # no statistics: unbounded, never a KeyError
    spark_stats = spark.read.format("delta").load(loc).where("day = DATE'2013-01-02'")
    assert sorted(r.id for r in spark_stats.collect()) == [2, 12]  # Spark's Delta reads the stats too
