"""The short read path of version resolution (issue 25 item 3): a read without a lease is two
statements, the one-statement candidate barrier agrees with the step-by-step one on every history,
and a dead idle pooled connection is replaced. SQLite and PostgreSQL (the ``store`` fixture)."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.pool import NullPool

from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.exceptions import InconsistentReadError
from airflow_provider_tsb.metastore import resolution as steps
from airflow_provider_tsb.metastore.engine import PING_AFTER_IDLE_S
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology

TABLES = [f"tsb.rp.t{i}" for i in range(1, 5)]


def chain(store: MetaStore, tmp_path: Any) -> None:
    topo = Topology("rp", warehouse=str(tmp_path / "wh"))
    topo.root_table("rp.src")
    previous = "rp.src"
    for i in range(1, 5):
        topo.job(f"j{i}", f"j{i}.py", sources=[previous], sinks=[f"rp.t{i}"])
        previous = f"rp.t{i}"
    store.registry.register_topology(topo)


def random_history(store: MetaStore, rng: random.Random, barriers: int) -> None:
    """Each table at each barrier: WRITTEN, PROCESSED, or nothing (skipped or not reached)."""
    for k in range(1, barriers + 1):
        store.barriers.create("rp", {"tsb.rp.src": k})
        for i, table in enumerate(TABLES, start=1):
            state = rng.choice(["WRITTEN", "WRITTEN", "WRITTEN", "PROCESSED", None])
            if state == "WRITTEN":
                store.table_states.record_written(table, k, k, f"j{i}")
            elif state == "PROCESSED":
                store.table_states.record_processed(table, k, f"j{i}", {"files": [f"f{k}"]})


def step_by_step(s: Any, q: steps.ReadSet, level: ConsistencyLevel) -> tuple[int, set[tuple[int, str]]] | str:
    try:
        barrier, found = steps.confirm(s, q, steps.candidate_barrier(s, q, level), level)
    except InconsistentReadError as exc:
        return str(exc)
    return barrier, {(r.table_id, r.state) for r in found.values()}


def test_one_statement_candidate_agrees_with_the_steps(store: MetaStore, tmp_path: Any) -> None:
    chain(store, tmp_path)
    rng = random.Random(25)
    random_history(store, rng, 12)
    fast_hits = fallbacks = 0
    for _ in range(60):
        names = rng.sample(TABLES, rng.randint(1, 4))
        level = rng.choice([ConsistencyLevel.REPEATABLE_READ, ConsistencyLevel.READ_COMMITTED])
        with store.engine.connect() as conn, conn.begin():
            from sqlalchemy.orm import Session

            s = Session(bind=conn)
            q = steps.registered(s, names)
            fast = steps.newest_consistent_rows(s, q.ids, steps.states_read(level))
            slow = step_by_step(s, q, level)
        if fast is None:
            fallbacks += 1
            continue
        fast_hits += 1
        assert (fast[0], {(r.table_id, r.state) for r in fast[1].values()}) == slow, (names, level)
    assert fast_hits > 10 and fallbacks > 5, (fast_hits, fallbacks)  # both paths were taken


def test_a_read_without_a_lease_is_two_statements(store: MetaStore, tmp_path: Any) -> None:
    chain(store, tmp_path)
    for k in (1, 2):
        store.barriers.create("rp", {"tsb.rp.src": k})
        for i, table in enumerate(TABLES, start=1):
            store.table_states.record_written(table, k, k, f"j{i}")
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        if not sql.strip().startswith("BEGIN"):  # SQLite: BEGIN [IMMEDIATE] (engine.py)
            statements.append(sql)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        res = store.resolution.resolve(TABLES, "REPEATABLE_READ")
        read = list(statements)
        statements.clear()
        leased = store.resolution.resolve(TABLES, "REPEATABLE_READ", lease_seconds=60)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert res.barrier == 2 and res.versions == dict.fromkeys(TABLES, 2)
    assert len(read) == 2, read
    # the leased read: the tables read and locked, their marks under the lock, the consistent
    # rows, the lease row and its versions: 5 statements (8 before); on SQLite the write lock locks
    assert leased.barrier == 2 and leased.lease_id is not None
    assert len(statements) == 5, statements
    assert "FOR SHARE" in statements[0] or store.engine.dialect.name == "sqlite", statements[0]


def test_a_dead_idle_connection_is_replaced(store: MetaStore, tmp_path: Any) -> None:
    if store.engine.dialect.name == "sqlite":
        pytest.skip("PostgreSQL's pooled connections")
    chain(store, tmp_path)
    with store.engine.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
    admin = create_engine(store.engine.url, poolclass=NullPool)  # not the pooled connection itself
    with admin.connect() as other:
        assert other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar() is True
        other.commit()
    admin.dispose()
    time.sleep(PING_AFTER_IDLE_S + 0.2)  # the pooled connection is now idle long enough to be pinged
    assert [t.name for t in store.registry.tables("rp")][0] == "tsb.rp.src"
