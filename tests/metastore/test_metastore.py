"""Metastore on SQLite and PostgreSQL: migrations, registration, barriers, resolution, leases."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.exceptions import (
    CycleError,
    DoubleWriterError,
    InconsistentReadError,
    InvalidReadOptionError,
    MetastoreError,
    OutOfRangeError,
    TopologyError,
    UnknownBarrierError,
    UnknownTableError,
)
from airflow_provider_tsb.metastore.migrate import head_revision
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Job, Topology

WORDS, WC, CC = "tsb.raw.words", "tsb.mart.word_count", "tsb.mart.count_of_counts"


def wordcount(tmp_path) -> Topology:
    topo = Topology("wordcount", warehouse=str(tmp_path / "wh"))
    topo.root_table(WORDS)
    topo.job("count_words", "a.py", sources=[WORDS], sinks=[WC])
    topo.job("count_counts", "b.py", sources=[WC], sinks=[CC])
    return topo


def test_migrate_is_idempotent_and_creates_schema(metastore_url: str) -> None:
    store = MetaStore(metastore_url)
    with pytest.raises(MetastoreError, match="run `tsb db migrate`"):
        store.check()
    assert store.migrate() == head_revision()
    assert store.migrate() == head_revision()
    assert store.check() == head_revision()
    names = set(sa.inspect(store.engine).get_table_names())
    assert {"tsb_topology", "tsb_table", "tsb_job", "tsb_barrier", "tsb_table_barrier", "tsb_lease",
            "tsb_tsb_alembic_version"[4:]} <= names
    indexes = {ix["name"] for ix in sa.inspect(store.engine).get_indexes("tsb_table_barrier")}
    assert "ix_tsb_table_barrier_state" in indexes


def test_unmigrated_store_gives_actionable_error(metastore_url: str) -> None:
    store = MetaStore(metastore_url)
    with pytest.raises(MetastoreError, match="tsb db migrate"):
        store.registry.tables()


def test_register_topology_and_read_back(store: MetaStore, tmp_path) -> None:
    store.registry.register_topology(wordcount(tmp_path))
    store.registry.register_topology(wordcount(tmp_path))  # idempotent
    assert [t.name for t in store.registry.tables("wordcount")] == [CC, WC, WORDS]
    job = store.registry.job("count_counts")
    assert job.sources == (WC,) and job.sinks == (CC,)
    assert store.registry.writer_of(WC) == "count_words"
    assert store.registry.table(WORDS).kind == "root"
    assert store.registry.table(WC).location == str(tmp_path / "wh" / "tsb" / "mart" / "word_count")
    # the batched listings agree with the one-by-one lookups
    registry = store.registry
    assert registry.tables("wordcount") == [registry.table(t.name) for t in registry.tables("wordcount")]
    assert store.registry.jobs("wordcount") == [store.registry.job(j.id) for j in store.registry.jobs("wordcount")]
    assert store.registry.table(WC).writer == "count_words" and store.registry.table(WC).readers == ("count_counts",)
    graph = store.registry.graph("wordcount")
    assert graph.has_edge(f"table:{WC}", "job:count_counts")


def test_register_rejects_double_writer_and_cycle(store: MetaStore, tmp_path) -> None:
    store.registry.register_topology(wordcount(tmp_path))
    msg = r"'tsb.mart.word_count' has two writer jobs, 'count_words' and 'intruder'"
    with pytest.raises(DoubleWriterError, match=msg):
        store.registry.register_job("wordcount", Job("intruder", "x.py", (WORDS,), (WC,)))
    store.registry.register_job("wordcount", Job("feedback", "x.py", (CC,), ("c.d.feedback",)))
    with pytest.raises(CycleError) as err:
        store.registry.register_job("wordcount", Job("count_words", "a.py", (WORDS, "c.d.feedback"), (WC,)))
    assert "c.d.feedback -> job count_words -> tsb.mart.word_count -> job count_counts -> " \
        "tsb.mart.count_of_counts -> job feedback -> c.d.feedback" in str(err.value)
    assert store.registry.job("count_words").sources == (WORDS,)  # the failed registration changed nothing
    with pytest.raises(TopologyError, match="'tsb.raw.words' is a root table and cannot be a sink of job 'back'"):
        store.registry.register_job("wordcount", Job("back", "x.py", (CC,), (WORDS,)))
    assert store.registry.writer_of(WORDS) is None
    with pytest.raises(UnknownTableError):
        store.registry.register_source("count_counts", "tsb.nope.nothing")


def test_cycle_across_registrations(store: MetaStore) -> None:
    store.registry.register_job("cyc", Job("a", "a.py", ("c.d.t1",), ("c.d.t2",)))
    with pytest.raises(CycleError) as err:
        store.registry.register_job("cyc", Job("b", "b.py", ("c.d.t2",), ("c.d.t1",)))
    assert "c.d.t1 -> job a -> c.d.t2 -> job b -> c.d.t1" in str(err.value)
    assert store.registry.writer_of("c.d.t1") is None  # nothing of the failed registration stayed


def test_reregister_same_job_is_noop_and_unregister(store: MetaStore, tmp_path) -> None:
    store.registry.register_topology(wordcount(tmp_path))
    before = store.registry.job("count_words")
    store.registry.register_job("wordcount", Job("count_words", "a.py", (WORDS,), (WC,)))
    after = store.registry.job("count_words")
    assert after.registered_at_ms == before.registered_at_ms and after.sinks == before.sinks
    assert store.registry.unregister_job("count_words") is True
    assert store.registry.writer_of(WC) is None
    assert store.registry.unregister_job("count_words") is False


def test_barriers_are_increasing_and_idempotent(store: MetaStore, tmp_path) -> None:
    store.registry.register_topology(wordcount(tmp_path))
    b1 = store.barriers.create("wordcount", {WORDS: 0}, run_key="run-1")
    b1_again = store.barriers.create("wordcount", {WORDS: 5}, run_key="run-1")
    b2 = store.barriers.create("wordcount", {WORDS: 3}, run_key="run-2")
    assert (b1.barrier, b2.barrier) == (1, 2)
    assert b1_again.barrier == 1 and b1_again.created is False and b1_again.root_versions == {WORDS: 0}
    assert store.table_states.version_at(WORDS, 2) == 3
    assert [b.barrier for b in store.barriers.list("wordcount")] == [2, 1]
    with pytest.raises(UnknownTableError, match="lacks the Delta version of root table"):
        store.barriers.create("wordcount", {})
    with pytest.raises(TopologyError, match="below version 3 recorded at barrier 2"):
        store.barriers.create("wordcount", {WORDS: 1})
    with pytest.raises(TopologyError, match="not registered"):
        store.barriers.create("nope", {})


def test_written_only_for_generated_barriers_and_real_versions(store: MetaStore, tmp_path) -> None:
    """A WRITTEN state for a barrier never generated would be served at REPEATABLE_READ."""
    store.registry.register_topology(wordcount(tmp_path))
    store.barriers.create("wordcount", {WORDS: 0})
    for bad in (0, -1, 1_000_000):
        with pytest.raises(UnknownBarrierError, match=f"barrier {bad} was never generated for topology 'wordcount'"):
            store.table_states.record_written(WC, bad, 0, "count_words")
    for version in (-1, "3", 1.5, None, True):  # the project's error, naming the value given (was -1)
        with pytest.raises(OutOfRangeError, match=rf"a Delta version is an integer >= 0, got {version!r}$"):
            store.table_states.record_written(WC, 1, version, "count_words")  # type: ignore[arg-type]
    with pytest.raises(InvalidReadOptionError, match="read option tables: resolve.. needs at least one table"):
        store.resolution.resolve([])
    assert store.table_states.newest_written(WC) is None  # nothing was recorded by the refused calls
    store.table_states.record_written(WC, 1, 0, "count_words")
    assert store.table_states.version_at(WC, 1) == 0


def test_system_time_barrier_timestamps_rise_with_ids(store: MetaStore, tmp_path) -> None:
    """Four writers at once: each barrier's timestamp is taken under the topology lock."""
    import threading

    store.registry.register_topology(wordcount(tmp_path))
    errors: list[BaseException] = []

    def generate() -> None:
        try:
            for _ in range(15):
                store.barriers.create("wordcount", {WORDS: 0})
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=generate) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    barriers = store.barriers.list("wordcount", limit=100, ascending=True)
    assert [b.barrier for b in barriers] == list(range(1, 61))
    stamps = [b.ts_ms for b in barriers]
    assert stamps == sorted(stamps), [(b.barrier, b.ts_ms) for b in barriers]


def test_resolution_levels(store: MetaStore, tmp_path) -> None:
    store.registry.register_topology(wordcount(tmp_path))
    for v in range(3):
        store.barriers.create("wordcount", {WORDS: v})
    with pytest.raises(InconsistentReadError, match="have no WRITTEN barrier yet"):
        store.resolution.resolve([WORDS, WC])
    # word_count: barriers 1, 2 WRITTEN, 3 PROCESSED; count_of_counts: barrier 1 WRITTEN
    store.table_states.record_written(WC, 1, 1, "count_words")
    store.table_states.record_written(WC, 2, 2, "count_words")
    store.table_states.record_processed(WC, 3, "count_words", {"mode": "overwrite", "files": ["f3.parquet"]})
    store.table_states.record_written(CC, 1, 1, "count_counts")
    store.table_states.record_processed(CC, 2, "count_counts", {"mode": "overwrite", "files": ["c2.parquet"]})

    rr = store.resolution.resolve([WORDS, WC, CC])
    assert rr.barrier == 1 and rr.versions == {WORDS: 0, WC: 1, CC: 1}
    # only the tables in Q constrain the answer
    assert store.resolution.resolve([WORDS, WC]).barrier == 2
    assert store.resolution.resolve([WORDS, WC]).versions == {WORDS: 1, WC: 2}
    rc = store.resolution.resolve([WORDS, WC, CC], ConsistencyLevel.READ_COMMITTED)
    assert rc.barrier == 2
    assert rc.tables[CC].state == "PROCESSED" and rc.tables[CC].version == 1
    assert rc.tables[CC].staged == {"mode": "overwrite", "files": ["c2.parquet"]}
    assert store.resolution.resolve([WORDS, WC], "read-committed").barrier == 3
    assert store.resolution.resolve([WORDS, WC], "read-committed").tables[WC].version == 2
    # AS OF
    assert store.resolution.resolve([WORDS, WC], as_of=1).versions == {WORDS: 0, WC: 1}
    msg = r"barrier 2 is not COMMIT .* not WRITTEN in \['tsb.mart.count_of_counts'\]"
    with pytest.raises(InconsistentReadError, match=msg):
        store.resolution.resolve([WC, CC], as_of=2)
    # monotonic reads: never older than the last seen barrier
    assert store.resolution.resolve([WORDS, WC], min_barrier=2).barrier == 2
    with pytest.raises(InconsistentReadError, match="older than the last seen barrier 3"):
        store.resolution.resolve([WORDS, WC], min_barrier=3)
    # a failed job's staged files disappear: READ_COMMITTED falls back, REPEATABLE_READ unchanged
    assert store.table_states.clear_processed(WC, 3) == 1
    assert store.resolution.resolve([WORDS, WC], "read_committed").barrier == 2
    with pytest.raises(Exception, match="unknown consistency level 'serializable'"):
        store.resolution.resolve([WC], "serializable")
    with pytest.raises(UnknownTableError, match=r"\['tsb.x.y'\] are not registered"):
        store.resolution.resolve(["tsb.x.y"])


def test_resolution_with_gap_falls_back(store: MetaStore, tmp_path) -> None:
    store.registry.register_topology(wordcount(tmp_path))
    for v in range(4):
        store.barriers.create("wordcount", {WORDS: v})
    for b in (1, 2, 4):
        store.table_states.record_written(WC, b, b, "count_words")
    for b in (1, 3, 4):
        store.table_states.record_written(CC, b, b, "count_counts")
    assert store.resolution.resolve([WC, CC]).barrier == 4
    store.table_states.rollback(CC, 3)
    assert store.resolution.resolve([WC, CC]).barrier == 1


def test_leases(store: MetaStore, tmp_path) -> None:
    store.registry.register_topology(wordcount(tmp_path))
    store.barriers.create("wordcount", {WORDS: 7})
    store.table_states.record_written(WC, 1, 4, "count_words")
    res = store.resolution.resolve([WORDS, WC], lease_seconds=60, lease_holder="test")
    assert res.lease_id and res.lease_expires_at_ms
    assert store.leases.leased_versions(WC) == {4}
    assert store.leases.leased_versions(WORDS) == {7}
    assert store.leases.expire(now=res.lease_expires_at_ms - 1) == 0
    assert store.leases.expire(now=res.lease_expires_at_ms + 1) == 1
    assert store.leases.leased_versions(WC) == set()
    lease, _ = store.leases.create({WC: 4}, 10)
    assert store.leases.release(lease) and store.leases.leased_versions(WC) == set()
    for seconds in (1e300, float("inf"), float("nan"), 0):  # 1e300 overflowed BIGINT before
        with pytest.raises(OutOfRangeError, match="lease_seconds must be a number of seconds"):
            store.leases.create({WC: 4}, seconds)
    assert store.leases.leased_versions(WC) == set()


def test_heartbeat_and_stale_jobs(store: MetaStore, tmp_path) -> None:
    store.registry.register_topology(wordcount(tmp_path))
    store.job_runs.heartbeat("count_words", status="running", barrier=1)
    job = store.registry.job("count_words")
    assert job.status == "running" and job.current_barrier == 1
    assert not job.is_stale(60)
    assert job.is_stale(60, now=job.last_heartbeat_ms + 61_000)
    store.job_runs.record_job_barrier("count_words", 1, status="running", started_at_ms=1)
    store.job_runs.record_job_barrier("count_words", 1, status="succeeded", finished_at_ms=5)


def test_migration_0010_adds_the_figures_of_written_barriers(metastore_url: str) -> None:
    """Rows written before revision 0010 keep their state with no figures (NULL: nothing recorded);
    the downgrade drops the columns again (issue 25 item 4)."""
    from airflow_provider_tsb.metastore.migrate import alembic_config, current_revision, upgrade

    store = MetaStore(metastore_url)
    assert upgrade(store.engine, "0009") == "0009"
    with store.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO tsb_topology (name, created_at_ms, lock_version) VALUES ('t', 0, 0)"))
        conn.execute(sa.text("INSERT INTO tsb_table (name, topology, kind, location, created_at_ms) "
                             "VALUES ('c.d.t', 't', 'intermediate', '/wh/c/d/t', 0)"))
        conn.execute(sa.text("INSERT INTO tsb_table_barrier (table_id, barrier_id, state, version) "
                             "SELECT id, 1, 'WRITTEN', 4 FROM tsb_table"))
    assert store.migrate() == head_revision() == "0012"
    columns = {c["name"] for c in sa.inspect(store.engine).get_columns("tsb_table_barrier")}
    assert {"file_count", "size_bytes"} <= columns
    state = store.table_states.get("c.d.t", 1)
    assert state is not None and (state.version, state.file_count, state.size_bytes) == (4, None, None)
    from alembic import command

    command.downgrade(alembic_config(store.engine), "0009")
    assert current_revision(store.engine) == "0009"
    assert "file_count" not in {c["name"] for c in sa.inspect(store.engine).get_columns("tsb_table_barrier")}
    store.dispose()
