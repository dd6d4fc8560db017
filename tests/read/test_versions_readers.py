"""VersionResolver at every level (READ_UNCOMMITTED on real Delta logs) and the readers.

Includes the FLIP-276 "Read Committed" example (see tests.support.metaservice): the inconsistent row
(user1, item1, 2500, 100, 25) is returned only at READ_UNCOMMITTED.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_tsb.consistency import ConsistencyLevel, ReadOptions
from airflow_provider_tsb.exceptions import InconsistentReadError, OutOfRangeError, UnknownTableError
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.readers import read_tables, read_tables_arrow, read_tables_pandas
from airflow_provider_tsb.read.resolutions import to_arrow
from airflow_provider_tsb.read.versions import resolve_versions
from airflow_provider_tsb.topology import Topology
from tests.support.metaservice import (
    AMOUNT,
    AMOUNT_SCHEMA,
    INCONSISTENT_ROW,
    ORDERS,
    PRICE,
    RC_ROW,
    RR_ROW,
    TOTAL,
    build_shop,
    price_amount_rows,
    write,
)

RU, RC, RR = ConsistencyLevel.READ_UNCOMMITTED, ConsistencyLevel.READ_COMMITTED, ConsistencyLevel.REPEATABLE_READ


def test_resolver_levels_on_real_delta_tables(store: MetaStore, tmp_path) -> None:
    shop = build_shop(store, str(tmp_path))
    resolver = store.resolution  # every level, READ_UNCOMMITTED included, resolves in the MetaStore
    q = [ORDERS, PRICE, AMOUNT, TOTAL]

    ru = resolver.resolve(q, RU)
    assert ru.barrier is None
    assert ru.versions == {ORDERS: 1, PRICE: 1, AMOUNT: 0, TOTAL: 0}
    assert {n: tv.barrier for n, tv in ru.tables.items()} == {ORDERS: 2, PRICE: 2, AMOUNT: 1, TOTAL: 1}
    assert {tv.state for tv in ru.tables.values()} == {"LATEST"}
    # a commit the metastore has not indexed yet: the latest version, untagged
    write(shop.locations[PRICE], pa.schema([("user", pa.string()), ("item", pa.string()),
                                             ("total_price", pa.float64())]), [("u9", "i9", 1.0)], "append", None, None)
    ru = resolver.resolve([PRICE], "read-uncommitted")
    assert ru.versions == {PRICE: 2} and ru.tables[PRICE].barrier is None

    rc = resolver.resolve([PRICE, AMOUNT], RC)
    assert rc.barrier == 2 and rc.versions == {PRICE: 1, AMOUNT: 0}
    assert rc.tables[AMOUNT].state == "PROCESSED"
    assert rc.tables[AMOUNT].staged["mode"] == "overwrite"
    rr = resolver.resolve([PRICE, AMOUNT], RR)
    assert rr.barrier == 1 and rr.versions == {PRICE: 0, AMOUNT: 0}
    assert resolver.resolve([ORDERS, PRICE], RR).versions == {ORDERS: 1, PRICE: 1}
    assert resolver.resolve([ORDERS, PRICE], as_of=1).versions == {ORDERS: 0, PRICE: 0}
    with pytest.raises(InconsistentReadError, match="barrier 2 is not COMMIT"):
        resolver.resolve([PRICE, AMOUNT], as_of=2)
    with pytest.raises(ValueError, match="use level REPEATABLE_READ"):
        resolver.resolve([PRICE], RU, as_of=1)
    with pytest.raises(UnknownTableError, match="tsb.shop.nope"):
        resolver.resolve(["tsb.shop.nope"], RU)

    # leases at READ_UNCOMMITTED pin the latest versions
    leased = resolver.resolve([PRICE, AMOUNT], RU, lease_seconds=60)
    leases = store.leases
    assert leased.lease_id and leases.leased_versions(PRICE) == {2} and leases.leased_versions(AMOUNT) == {0}

    as_dict = resolve_versions([PRICE, AMOUNT], level="read-committed", store=store)
    assert as_dict["level"] == "READ_COMMITTED" and as_dict["barrier"] == 2
    assert as_dict["tables"][AMOUNT] == {
        "version": 0, "barrier": 2, "state": "PROCESSED", "location": shop.locations[AMOUNT],
        "staged": {"mode": "overwrite", "files": ["tsb_staging/amount_job/0/2/attempt1/part-00000.parquet"]},
        "file_count": None, "size_bytes": None,  # the shop's commits record no live-file figures
    }
    assert as_dict["lease"] is None
    # the options object gives the same answer as the keywords, and the result reads itself
    opts = ReadOptions("read-committed")
    assert store.resolution.resolve([PRICE, AMOUNT], opts).to_dict() == as_dict
    assert resolve_versions([PRICE, AMOUNT], opts, store=store) == as_dict
    frames = to_arrow(store.resolution.resolve([PRICE, AMOUNT], opts))
    assert frames[AMOUNT].num_rows == read_tables_arrow([PRICE, AMOUNT], opts, store=store)[AMOUNT].num_rows


def test_read_options_name_the_field_at_fault() -> None:
    assert ReadOptions.of("read-committed", min_barrier=3) == ReadOptions(RC, min_barrier=3)
    assert ReadOptions.of(ReadOptions(as_of=7), lease_seconds=5).as_of == 7
    assert ReadOptions().to_json() == {"level": "REPEATABLE_READ"}
    with pytest.raises(ValueError, match="use level REPEATABLE_READ, not READ_COMMITTED"):
        ReadOptions(RC, as_of=1)
    with pytest.raises(ValueError, match="min_barrier must be a barrier id"):
        ReadOptions(min_barrier=-1)
    for seconds in (float("inf"), float("nan"), 1e300, 0, -1):  # OverflowError / raw ValueError before
        with pytest.raises(OutOfRangeError, match=r"lease_seconds must be a number of seconds > 0 and <= 31622400"):
            ReadOptions(lease_seconds=seconds)
    with pytest.raises(TypeError, match=r"unknown read option\(s\) \['asof'\]"):
        ReadOptions.of(RR, asof=3)
    with pytest.raises(ValueError, match="unknown consistency level 'bogus'"):
        ReadOptions("bogus")


def test_read_uncommitted_table_without_delta_log(sqlite_store: MetaStore, tmp_path) -> None:
    topo = Topology("t", warehouse=str(tmp_path / "wh"))
    topo.root_table("a.b.root")
    topo.job("j", "j.py", sources=["a.b.root"], sinks=["a.b.sink"])
    sqlite_store.registry.register_topology(topo)
    res = sqlite_store.resolution.resolve(["a.b.root", "a.b.sink"], RU)
    assert res.versions == {"a.b.root": None, "a.b.sink": None}
    with pytest.raises(Exception, match="has no Delta version to read"):
        read_tables_arrow(["a.b.sink"], RU, store=sqlite_store)


def test_flip276_read_committed_example_pandas(store: MetaStore, tmp_path) -> None:
    build_shop(store, str(tmp_path))
    rows = {}
    for level in (RU, RC, RR):
        frames = read_tables_pandas([PRICE, AMOUNT], level, store=store)
        rows[level] = price_amount_rows(frames[PRICE], frames[AMOUNT])
    assert rows[RU] == [INCONSISTENT_ROW, ("user2", "item1", 50.0, 10, 5.0)]
    assert rows[RC] == [RC_ROW, ("user2", "item1", 50.0, 10, 5.0)]
    assert rows[RR] == [RR_ROW, ("user2", "item1", 50.0, 10, 5.0)]
    assert INCONSISTENT_ROW not in rows[RC] + rows[RR]
    # the invariant of the example: every user1 order costs 20, so consistent reads give avg 20
    assert all(r[4] == 20.0 for level in (RC, RR) for r in rows[level] if r[0] == "user1")
    # the derived table agrees with its inputs at REPEATABLE_READ over all three tables
    frames = read_tables_pandas([PRICE, AMOUNT, TOTAL], RR, store=store)
    derived = sorted(tuple(r) for r in frames[TOTAL].itertuples(index=False))
    assert derived == price_amount_rows(frames[PRICE], frames[AMOUNT])
    # AS OF barrier 1 equals REPEATABLE_READ here; as_of 2 is not COMMIT over both tables
    frames = read_tables_arrow([PRICE, AMOUNT], as_of=1, store=store)
    assert frames[PRICE].num_rows == 2 and sorted(frames[PRICE].column("total_price").to_pylist()) == [50.0, 2000.0]
    with pytest.raises(InconsistentReadError):
        read_tables_arrow([PRICE, AMOUNT], as_of=2, store=store)


def test_read_committed_append_manifest_arrow(sqlite_store: MetaStore, tmp_path) -> None:
    topo = Topology("app", warehouse=str(tmp_path / "wh"))
    topo.root_table("a.b.src")
    topo.job("j", "j.py", sources=["a.b.src"], sinks=["a.b.log"])
    sqlite_store.registry.register_topology(topo)
    loc = sqlite_store.registry.table("a.b.log").location
    sqlite_store.barriers.create("app", {"a.b.src": 0})
    write(loc, AMOUNT_SCHEMA, [("u1", "i1", 1)], "append", 1, "j")
    sqlite_store.table_states.record_written("a.b.log", 1, 0, "j")
    sqlite_store.barriers.create("app", {"a.b.src": 0})
    rel = "tsb_staging/j/0/2/a/part-0.parquet"
    os.makedirs(os.path.join(loc, os.path.dirname(rel)))
    pq.write_table(pa.Table.from_pylist([{"user": "u2", "item": "i2", "total_amount": 2}], schema=AMOUNT_SCHEMA),
                   os.path.join(loc, rel))
    sqlite_store.table_states.record_processed("a.b.log", 2, "j", {"mode": "append", "files": [{"path": rel,
                                                                                                "size": 1}]})
    rc = read_tables_arrow(["a.b.log"], RC, store=sqlite_store)["a.b.log"]
    assert sorted(rc.column("user").to_pylist()) == ["u1", "u2"]
    assert read_tables_arrow(["a.b.log"], RR, store=sqlite_store)["a.b.log"].column("user").to_pylist() == ["u1"]


def test_flip276_example_spark(spark, sqlite_store: MetaStore, tmp_path) -> None:
    from pyspark.sql import functions as F

    build_shop(sqlite_store, str(tmp_path))

    def query(level: ConsistencyLevel) -> list[tuple]:
        frames = read_tables(spark, [PRICE, AMOUNT], level, store=sqlite_store)
        joined = frames[PRICE].join(frames[AMOUNT], ["user", "item"]).select(
            "user", "item", "total_price", "total_amount",
            (F.col("total_price") / F.col("total_amount")).alias("avg_price"),
        )
        return sorted(tuple(r) for r in joined.collect())

    assert query(RU) == [INCONSISTENT_ROW, ("user2", "item1", 50.0, 10, 5.0)]
    assert query(RC) == [RC_ROW, ("user2", "item1", 50.0, 10, 5.0)]
    assert query(RR) == [RR_ROW, ("user2", "item1", 50.0, 10, 5.0)]
    frames = read_tables(spark, [ORDERS, TOTAL], RR, store=sqlite_store)
    assert frames[ORDERS].count() == 2  # total is COMMIT at barrier 1 only: orders read at barrier 1 (v0)
    assert sorted(tuple(r) for r in frames[TOTAL].collect()) == [RR_ROW, ("user2", "item1", 50.0, 10, 5.0)]
    assert frames[TOTAL].schema.names == ["user", "item", "total_price", "total_amount", "avg_price"]


def test_spark_empty_table_and_append_manifest(spark, sqlite_store: MetaStore, tmp_path) -> None:
    topo = Topology("app", warehouse=str(tmp_path / "wh"))
    topo.root_table("a.b.src")
    topo.job("j", "j.py", sources=["a.b.src"], sinks=["a.b.log"])
    sqlite_store.registry.register_topology(topo)
    loc = sqlite_store.registry.table("a.b.log").location
    sqlite_store.barriers.create("app", {"a.b.src": 0})
    write(loc, AMOUNT_SCHEMA, [], "append", 1, "j")  # an empty first barrier
    sqlite_store.table_states.record_written("a.b.log", 1, 0, "j")
    empty = read_tables(spark, ["a.b.log"], store=sqlite_store)["a.b.log"]
    assert empty.count() == 0 and empty.schema.names == ["user", "item", "total_amount"]
    sqlite_store.barriers.create("app", {"a.b.src": 0})
    rel = "tsb_staging/j/0/2/a/part-0.parquet"
    os.makedirs(os.path.join(loc, os.path.dirname(rel)))
    pq.write_table(pa.Table.from_pylist([{"user": "u2", "item": "i2", "total_amount": 2}], schema=AMOUNT_SCHEMA),
                   os.path.join(loc, rel))
    sqlite_store.table_states.record_processed("a.b.log", 2, "j", {"mode": "append", "files": [rel]})
    rc = read_tables(spark, ["a.b.log"], RC, store=sqlite_store)["a.b.log"]
    assert [tuple(r) for r in rc.collect()] == [("u2", "i2", 2)]
