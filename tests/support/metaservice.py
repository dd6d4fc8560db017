"""MetaService test helpers: the FLIP-276 "Read Committed" example on real Delta tables and metastore states.

Topology ``shop``: root table ``orders(user, item, amount, unit_price)``; job ``price_job``
writes ``user_item_price(user, item, total_price)`` = sum(amount * unit_price); job
``amount_job`` writes ``user_item_amount(user, item, total_amount)`` = sum(amount); job
``total_job`` joins both into ``user_item_total(user, item, total_price, total_amount, avg_price)``.
Every order of user1/item1 costs 20 per unit, so any consistent read has avg_price == 20.

* barrier 1: orders v0 = user1/item1 100 units; user2/item1 10 units at 5.
  All three jobs WRITTEN (price v0, amount v0, total v0).
* barrier 2: orders v1 adds user1/item1 25 units at 20. price_job WRITTEN (v1: 2500);
  amount_job PROCESSED only (staged overwrite file: 125); total_job not started.

Expected reads of price JOIN amount for user1/item1 (user, item, total_price, total_amount, avg):
READ_UNCOMMITTED (latest Delta versions) -> (user1, item1, 2500, 100, 25.0): inconsistent;
READ_COMMITTED (barrier 2, staged amount) -> (user1, item1, 2500, 125, 20.0);
REPEATABLE_READ (barrier 1) -> (user1, item1, 2000, 100, 20.0).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, write_deltalake

from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology

ORDERS = "tsb.shop.orders"
PRICE = "tsb.shop.user_item_price"
AMOUNT = "tsb.shop.user_item_amount"
TOTAL = "tsb.shop.user_item_total"

PRICE_SCHEMA = pa.schema([("user", pa.string()), ("item", pa.string()), ("total_price", pa.float64())])
AMOUNT_SCHEMA = pa.schema([("user", pa.string()), ("item", pa.string()), ("total_amount", pa.int64())])
TOTAL_SCHEMA = pa.schema(
    [("user", pa.string()), ("item", pa.string()), ("total_price", pa.float64()),
     ("total_amount", pa.int64()), ("avg_price", pa.float64())]
)
ORDERS_SCHEMA = pa.schema(
    [("user", pa.string()), ("item", pa.string()), ("amount", pa.int64()), ("unit_price", pa.float64())]
)

INCONSISTENT_ROW = ("user1", "item1", 2500.0, 100, 25.0)
RC_ROW = ("user1", "item1", 2500.0, 125, 20.0)
RR_ROW = ("user1", "item1", 2000.0, 100, 20.0)


@dataclass
class Shop:
    store: MetaStore
    locations: dict[str, str]
    staged_file: str


def _rows(schema: pa.Schema, rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


def write(location: str, schema: pa.Schema, rows: list[tuple], mode: str, barrier: int | None, job: str | None) -> None:
    """One Delta commit (tagged with the tsb barrier metadata when ``barrier`` is given)."""
    props = None
    if barrier is not None:
        props = CommitProperties(custom_metadata={"tsb.barrier": str(barrier), "tsb.job": job or ""})
    write_deltalake(location, _rows(schema, rows), mode=mode, commit_properties=props)


def build_shop(store: MetaStore, root: str) -> Shop:
    topo = Topology("shop", warehouse=os.path.join(root, "wh"))
    topo.root_table(ORDERS)
    topo.job("price_job", "price.py", sources=[ORDERS], sinks=[PRICE])
    topo.job("amount_job", "amount.py", sources=[ORDERS], sinks=[AMOUNT])
    topo.job("total_job", "total.py", sources=[PRICE, AMOUNT], sinks=[TOTAL])
    store.registry.register_topology(topo)
    loc = {t: store.registry.table(t).location for t in (ORDERS, PRICE, AMOUNT, TOTAL)}

    # barrier 1
    orders = [("user1", "item1", 100, 20.0), ("user2", "item1", 10, 5.0)]
    write(loc[ORDERS], ORDERS_SCHEMA, orders, "append", None, None)
    store.barriers.create("shop", {ORDERS: 0})
    write(loc[PRICE], PRICE_SCHEMA, [("user1", "item1", 2000.0), ("user2", "item1", 50.0)], "overwrite", 1, "price_job")
    store.table_states.record_written(PRICE, 1, 0, "price_job")
    write(loc[AMOUNT], AMOUNT_SCHEMA, [("user1", "item1", 100), ("user2", "item1", 10)], "overwrite", 1, "amount_job")
    store.table_states.record_written(AMOUNT, 1, 0, "amount_job")
    write(loc[TOTAL], TOTAL_SCHEMA, [("user1", "item1", 2000.0, 100, 20.0), ("user2", "item1", 50.0, 10, 5.0)],
          "overwrite", 1, "total_job")
    store.table_states.record_written(TOTAL, 1, 0, "total_job")

    # barrier 2
    write(loc[ORDERS], ORDERS_SCHEMA, [("user1", "item1", 25, 20.0)], "append", None, None)
    store.barriers.create("shop", {ORDERS: 1})
    write(loc[PRICE], PRICE_SCHEMA, [("user1", "item1", 2500.0), ("user2", "item1", 50.0)], "overwrite", 2, "price_job")
    store.table_states.record_written(PRICE, 2, 1, "price_job")
    rel = "tsb_staging/amount_job/0/2/attempt1/part-00000.parquet"
    staged = os.path.join(loc[AMOUNT], rel)
    os.makedirs(os.path.dirname(staged), exist_ok=True)
    pq.write_table(_rows(AMOUNT_SCHEMA, [("user1", "item1", 125), ("user2", "item1", 10)]), staged)
    store.table_states.record_processed(AMOUNT, 2, "amount_job", {"mode": "overwrite", "files": [rel]})
    return Shop(store, loc, staged)


def price_amount_rows(price: object, amount: object) -> list[tuple]:
    """The FLIP-276 user query over pandas frames: price JOIN amount with avg = price / amount."""
    joined = price.merge(amount, on=["user", "item"])  # type: ignore[attr-defined]
    joined["avg_price"] = joined["total_price"] / joined["total_amount"]
    return sorted(
        (r.user, r.item, float(r.total_price), int(r.total_amount), float(r.avg_price))
        for r in joined.itertuples()
    )
