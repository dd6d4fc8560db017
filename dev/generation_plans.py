"""PostgreSQL's plans for a barrier generation's queries on a large metastore.

Fills a throwaway PostgreSQL with ``--topologies`` topologies, ``--barriers`` barriers,
``--tables`` tables (a third of them roots, each read by its topology) and ``--written`` WRITTEN
rows per table, then prints ``EXPLAIN ANALYZE`` of the queries
:meth:`~airflow_provider_tsb.metastore.barriers.BarrierManager.create` runs for one
topology: the domain's rows locked, the run key and the previous barrier, the domain's tables
with the previous barrier's root versions. Each should stay an index look-up, flat in the
number of barriers::

    PYTHONPATH=. .venv/bin/python dev/generation_plans.py [--barriers 200000] [--tables 1000]
"""

from __future__ import annotations

import argparse
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine

FILL = [
    "insert into tsb_topology(name, created_at_ms, lock_version) select 't' || g, 0, 0 "
    "from generate_series(1, :topologies) g",
    "insert into tsb_barrier(topology, barrier_id, ts_ms, ts_kind, created_at_ms, run_key, final) "
    "select 't' || (g % :topologies + 1), g, g, 'system', g, 'run' || g, false from generate_series(1, :barriers) g",
    "insert into tsb_table(name, topology, kind, location, created_at_ms) select 'table' || g, "
    "'t' || (g % :topologies + 1), case when g % 3 = 0 then 'root' else 'intermediate' end, '/w/' || g, 0 "
    "from generate_series(1, :tables) g",
    "insert into tsb_topology_root(topology, table_id) select topology, id from tsb_table where kind = 'root'",
    "insert into tsb_table_barrier(table_id, barrier_id, state, version, written_at_ms, processed_at_ms) "
    "select t.id, b, 'WRITTEN', b, 0, 0 from tsb_table t, generate_series(1, :written) b",
]


def fill(engine: Engine, *, topologies: int, barriers: int, tables: int, written: int) -> None:
    """The metastore of the module doc (``written`` WRITTEN rows, barrier ids 1 to ``written``,
    for every table), analysed."""
    params = {"topologies": topologies, "barriers": barriers, "tables": tables, "written": written}
    with engine.begin() as conn:
        for statement in FILL:
            conn.execute(text(statement), params)
        conn.execute(text("analyze"))


def _sql(engine: Engine, statement: Any, params: dict[str, Any]) -> str:
    return str(statement.params(**params).compile(engine, compile_kwargs={"literal_binds": True,
                                                                          "render_postcompile": True}))


def rows_touched(engine: Engine, statement: Any, params: dict[str, Any]) -> dict[str, int]:
    """``{table: rows}`` that PostgreSQL's executor read from each table to run ``statement`` with
    ``params``: over every scan node of ``EXPLAIN (ANALYZE, FORMAT JSON)``, the rows it returned
    plus those its filter removed, times its loops (a look-up by index touches what it returns; a
    scan touches what it skips too)."""
    with engine.connect() as conn:
        [plan] = conn.execute(text("explain (analyze, format json) " + _sql(engine, statement, params))).scalar_one()
    touched: dict[str, int] = {}
    nodes = [plan["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        if "Relation Name" in node:
            skipped = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
            rows = node["Actual Rows"] + skipped
            touched[node["Relation Name"]] = touched.get(node["Relation Name"], 0) + rows * node["Actual Loops"]
    return touched


def explain(engine: Engine, name: str, statement: Any, params: dict[str, Any]) -> None:
    """Print ``EXPLAIN ANALYZE`` of ``statement`` with ``params`` bound as literals."""
    sql = _sql(engine, statement, params)
    print(f"== {name}")
    with engine.connect() as conn:
        for (line,) in conn.execute(text("explain analyze " + sql)):
            print(f"   {line}")


def main() -> int:
    from airflow_provider_tsb.metastore import barriers, domains
    from airflow_provider_tsb.metastore.engine import create_metastore_engine
    from airflow_provider_tsb.metastore.migrate import upgrade
    from dev.pg import start_postgres

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--topologies", type=int, default=50)
    p.add_argument("--barriers", type=int, default=200_000)
    p.add_argument("--tables", type=int, default=1_000)
    p.add_argument("--written", type=int, default=200, help="WRITTEN rows per table")
    args = p.parse_args()
    pg = start_postgres()
    try:
        engine = create_metastore_engine(str(pg.create_database("plans")))
        upgrade(engine)
        fill(engine, topologies=args.topologies, barriers=args.barriers, tables=args.tables,
             written=args.written)
        topology, last = "t7", args.written * 3 // 4
        explain(engine, "domain rows locked", domains._DOMAIN_ROWS_LOCKED, {"topology": topology})
        explain(engine, "run key and previous barrier", barriers._RUN_AND_LAST,
                {"topologies": [topology], "topology": topology, "run_key": "run6"})
        explain(engine, "domain tables", barriers._DOMAIN_TABLES, {"topologies": [topology], "last": last})
        engine.dispose()
    finally:
        pg.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
