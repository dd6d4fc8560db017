"""The barrier log and the checks against Delta at barrier generation, WRITTEN and AS OF (issue 12 items 4, 6).

Real Delta tables (delta-rs) and real metastores (SQLite and PostgreSQL); no Spark.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.delta.barrier_log import (
    BarrierLogEntry,
    barrier_log_location,
    read_barrier_log,
    write_barrier,
)
from airflow_provider_tsb.delta.conventions import BarrierTag, barrier_commit_properties
from airflow_provider_tsb.exceptions import (
    BarrierHistoryError,
    DeltaLogError,
    InconsistentReadError,
    OutOfRangeError,
    TsbError,
    UnknownBarrierError,
)
from airflow_provider_tsb.maintenance.rebuild import rebuild_metastore
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology

WORDS, WC = "tsb.raw.words", "tsb.mart.word_count"


def wordcount(tmp_path) -> Topology:
    topo = Topology("wc", warehouse=str(tmp_path / "wh"))
    topo.root_table(WORDS)
    topo.job("count_words", "a.py", sources=[WORDS], sinks=[WC])
    return topo


def commit(location: str, barrier: int | None = None) -> None:
    """One commit of a one-row table; tagged as job ``count_words``'s commit of ``barrier`` if given."""
    props = barrier_commit_properties(BarrierTag(barrier, "count_words", {WORDS: 0}), 0) if barrier else None
    write_deltalake(location, pa.table({"n": [1]}), mode="append", commit_properties=props)


def test_every_barrier_is_logged_and_a_crash_leftover_is_replaced(store: MetaStore, tmp_path) -> None:
    topo = wordcount(tmp_path)
    store.registry.register_topology(topo)
    log = barrier_log_location(topo.warehouse, "wc")
    assert log == str(tmp_path / "wh" / "_tsb" / "wc" / "barrier_log")
    first = store.barriers.create("wc", {WORDS: 3}, run_key="r1", barrier_log=log)
    # a generation that committed its log row and crashed before its metastore commit
    write_barrier(log, BarrierLogEntry("wc", 2, 1, "system", False, 1, "lost", {WORDS: 4}))
    second = store.barriers.create("wc", {WORDS: 5}, ts_ms=first.ts_ms + 10, final=True, barrier_log=log)
    assert second.barrier == 2
    entries = read_barrier_log(log)
    assert [(e.barrier, e.root_versions, e.run_key, e.final) for e in entries] == [
        (1, {WORDS: 3}, "r1", False), (2, {WORDS: 5}, None, True)]
    assert (entries[0].ts_ms, entries[1].ts_ms) == (first.ts_ms, second.ts_ms)
    # a retried run key returns its barrier and logs nothing more
    assert store.barriers.create("wc", {WORDS: 9}, run_key="r1", barrier_log=log).barrier == 1
    assert len(read_barrier_log(log)) == 2


def test_a_failed_log_commit_generates_no_barrier(store: MetaStore, tmp_path) -> None:
    store.registry.register_topology(wordcount(tmp_path))
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(DeltaLogError, match="cannot write barrier 1 of topology 'wc' to its barrier log"):
        store.barriers.create("wc", {WORDS: 0}, barrier_log=str(tmp_path / "file" / "log"))
    assert store.barriers.latest("wc") is None


def test_generation_refuses_ids_already_in_delta(store: MetaStore, tmp_path) -> None:
    """Before: a new metastore generated barrier 1 again over tables tagged with 1 and 2."""
    topo = wordcount(tmp_path)
    store.registry.register_topology(topo)
    commit(topo.location(WC), 1)
    commit(topo.location(WC), 2)
    commit(topo.location(WC))  # an untagged commit (e.g. OPTIMIZE) at the head
    with pytest.raises(BarrierHistoryError) as err:
        store.barriers.create("wc", {WORDS: 0})
    assert str(err.value) == (
        f"topology 'wc': the metastore would generate barrier 1, but table '{WC}' at '{topo.location(WC)}' is "
        "already tagged with barrier 2 (Delta version 1): the metastore lost barriers, and a new barrier with an "
        "old id would be skipped as committed; run `tsb db rebuild --dags PATH` to restore the metastore from "
        "the Delta logs and the barrier log")
    assert store.barriers.latest("wc") is None


def test_generation_refuses_ids_the_barrier_log_holds(store: MetaStore, tmp_path) -> None:
    topo = wordcount(tmp_path)
    store.registry.register_topology(topo)
    log = barrier_log_location(topo.warehouse, "wc")
    write_barrier(log, BarrierLogEntry("wc", 1, 1, "system", False, 1, None, {WORDS: 0}))
    with pytest.raises(BarrierHistoryError, match="the barrier log at .* already holds barrier 1: the metastore "
                       "lost barriers; run `tsb db rebuild"):
        store.barriers.create("wc", {WORDS: 0}, barrier_log=log)
    # rebuild restores it, then generation goes on after it
    rebuild_metastore(store, [topo])
    assert store.barriers.create("wc", {WORDS: 1}, barrier_log=log).barrier == 2


def test_rebuild_derives_barriers_missing_from_the_log_from_the_tags(store: MetaStore, tmp_path) -> None:
    """Tables written before the barrier log existed: timestamps and root versions from the job tags."""
    topo = wordcount(tmp_path)
    for b in (1, 2):
        write_deltalake(topo.location(WC), pa.table({"n": [b]}), mode="append", commit_properties=(
            barrier_commit_properties(BarrierTag(b, "count_words", {"raw.words": b + 4}, ts_ms=1000 * b), 0)))
    (report,) = rebuild_metastore(store, [topo])
    assert (report.barriers, report.from_tags, report.written, report.warnings) == ((1, 2), (1, 2), {WC: 2}, ())
    assert [(b.barrier, b.ts_ms, b.root_versions) for b in store.barriers.list("wc", ascending=True)] == [
        (1, 1000, {WORDS: 5}), (2, 2000, {WORDS: 6})]
    assert store.resolution.resolve([WORDS, WC], "repeatable-read").versions == {WORDS: 6, WC: 1}


def test_written_at_a_version_not_in_the_log_is_refused(store: MetaStore, tmp_path) -> None:
    topo = wordcount(tmp_path)
    store.registry.register_topology(topo)
    store.barriers.create("wc", {WORDS: 0})
    commit(topo.location(WC), 1)
    with pytest.raises(DeltaLogError, match=rf"table '{WC}', barrier 1: Delta version 7 does not exist in the "
                       r"table's log at .* \(newest version: 0\)"):
        store.table_states.record_written(WC, 1, 7, "count_words")
    store.table_states.record_written(WC, 1, 0, "count_words")
    assert store.table_states.version_at(WC, 1) == 0


@pytest.mark.slow  # three `tsb versions` processes
def test_as_of_a_barrier_never_generated_says_no_such_barrier(store: MetaStore, tmp_path) -> None:
    store.registry.register_topology(wordcount(tmp_path))
    store.barriers.create("wc", {WORDS: 0})
    store.table_states.record_written(WC, 1, 0, "count_words")
    with pytest.raises(UnknownBarrierError, match=r"no such barrier: barrier 50 was never generated in topology "
                       r"'wc' \(newest barrier: 1\)"):
        store.resolution.resolve([WC], as_of=50)
    env = {**os.environ, "TSB_METASTORE_URL": store.url}
    for value, code, text in (("50", 1, "no such barrier: barrier 50"),
                              ("0", 2, "no such barrier: 0 is not a barrier id"),
                              ("-1", 2, "no such barrier: -1 is not a barrier id")):
        proc = subprocess.run([sys.executable, "-m", "airflow_provider_tsb", "versions", WC, "--as-of", value],
                              env=env, capture_output=True, text=True, timeout=60)
        assert (proc.returncode, text in proc.stderr) == (code, True), proc.stderr


def test_numbers_the_metastore_cannot_hold_get_a_clear_error(store: MetaStore, tmp_path) -> None:
    """Before: raw OverflowError (SQLite) / DataError (PostgreSQL) / ValueError from deep inside a library."""
    store.registry.register_topology(wordcount(tmp_path))
    store.barriers.create("wc", {WORDS: 0})
    big = 2**64
    calls = {
        "barrier": lambda: store.barriers.get("wc", big),
        "barriers": lambda: store.barriers.list("wc", before=big),
        "version_at": lambda: store.table_states.version_at(WC, big),
        "table_history": lambda: store.table_states.history(WC, before=big),
        "record_processed": lambda: store.table_states.record_processed(WC, big, "count_words", {"files": []}),
        "record_written": lambda: store.table_states.record_written(WC, 1, big, "count_words"),
        "resolve": lambda: store.resolution.resolve([WC], as_of=big),
        "heartbeat": lambda: store.job_runs.heartbeat("count_words", barrier=big),
        "rollback_table": lambda: store.table_states.rollback(WC, big),
    }
    raised = {}
    for name, call in calls.items():  # an answer or a tsb error; never OverflowError / DataError
        try:
            call()
        except TsbError as exc:
            raised[name] = type(exc)
    # SQLite refuses every number above 2**63-1; PostgreSQL compares a BIGINT with it (no such barrier)
    assert {raised.get(name) for name in ("record_processed", "record_written")} == {OutOfRangeError}
    assert set(raised.values()) <= {OutOfRangeError, UnknownBarrierError, InconsistentReadError}, raised
    if store.engine.dialect.name == "sqlite":
        assert set(raised.values()) == {OutOfRangeError} and len(raised) == len(calls), raised
    for ts, text in ((float("nan"), "nan"), (big, str(big)), (-(2**63) - 1, str(-(2**63) - 1))):
        with pytest.raises(OutOfRangeError, match=rf"ts_ms \(the barrier timestamp, epoch ms\) must be an integer "
                           rf"from -9223372036854775808 to 9223372036854775807, got {text}"):
            store.barriers.create("wc", {WORDS: 1}, ts_ms=ts)
    with pytest.raises(OutOfRangeError, match=f"the Delta version of root table '{WORDS}' must be an integer"):
        store.barriers.create("wc", {WORDS: big})
    assert store.barriers.latest("wc").barrier == 1


def test_a_table_whose_tagged_commits_were_cleaned_from_its_log_does_not_block_generation(
    store: MetaStore, tmp_path
) -> None:
    """The tag check walks back over untagged commits (vacuum, optimize); a log cleaned up below them
    means no tag is left to collide with, not an error."""
    from deltalake import DeltaTable

    topo = wordcount(tmp_path)
    store.registry.register_topology(topo)
    location = topo.location(WC)
    commit(location, 1)
    commit(location)
    commit(location)
    DeltaTable(location).create_checkpoint()
    for version in (0, 1):  # log cleanup after the checkpoint (Delta "Log Retention")
        os.remove(os.path.join(location, "_delta_log", f"{version:020d}.json"))
    assert store.barriers.create("wc", {WORDS: 0}).barrier == 1


def test_the_logged_barrier_is_the_newest_commits_txn_and_delta_rs_agrees(tmp_path) -> None:
    """``logged_barrier`` (checked at every generation) reads the newest commit's ``txn``; it
    equals delta-rs's ``transaction_version`` after every write, after a replacing write, with
    a commit of another writer on top (no ``txn``: delta-rs answers), and is ``None`` without a log."""
    from deltalake import DeltaTable

    from airflow_provider_tsb.delta.barrier_log import log_app_id, logged_barrier
    from airflow_provider_tsb.delta.snapshots import clear

    log = str(tmp_path / "log")
    assert logged_barrier(log, "wc") is None
    for b in range(1, 6):
        write_barrier(log, BarrierLogEntry("wc", b, b, "system", False, b, f"r{b}", {WORDS: b}))
        assert logged_barrier(log, "wc") == b == DeltaTable(log).transaction_version(log_app_id("wc"))
    write_barrier(log, BarrierLogEntry("wc", 5, 9, "system", True, 9, "again", {WORDS: 6}), replace=True)
    assert logged_barrier(log, "wc") == 5
    write_deltalake(log, _log_rows(log).slice(0, 0), mode="append")  # another writer's commit: no txn
    assert DeltaTable(log).version() == 6
    clear()
    assert logged_barrier(log, "wc") == 5 == DeltaTable(log).transaction_version(log_app_id("wc"))
    assert logged_barrier(log, "other") is None


def _log_rows(location: str) -> pa.Table:
    from deltalake import DeltaTable

    return DeltaTable(location).to_pyarrow_table()


def test_the_log_is_compacted_every_n_barriers_and_keeps_every_row(tmp_path, monkeypatch) -> None:
    """Every ``COMPACT_EVERY`` barriers the one-row files become one (a commit's cost grows with
    the live files); every row stays, the txn stays readable from the newest commit, and a
    crash leftover is still replaced after a compaction."""
    from deltalake import DeltaTable

    from airflow_provider_tsb.delta import barrier_log

    monkeypatch.setattr(barrier_log, "COMPACT_EVERY", 3)
    log = str(tmp_path / "log")
    files = []
    for b in range(1, 8):
        write_barrier(log, BarrierLogEntry("wc", b, b, "system", False, b, f"r{b}", {WORDS: b}))
        assert barrier_log.wait_maintenance(log, timeout=60)
        files.append(len(DeltaTable(log).file_uris()))
        assert barrier_log.logged_barrier(log, "wc") == b == DeltaTable(log).transaction_version("tsb-barrier-log:wc")
    assert files == [1, 2, 1, 2, 3, 1, 2]  # compacted at barriers 3 and 6 (barrier 1 created the table)
    write_barrier(log, BarrierLogEntry("wc", 7, 70, "system", True, 70, "again", {WORDS: 9}), replace=True)
    entries = read_barrier_log(log)
    assert [(e.barrier, e.root_versions[WORDS], e.run_key) for e in entries] == [
        *((b, b, f"r{b}") for b in range(1, 7)), (7, 9, "again")]


def _commit_files(location: str) -> int:
    return sum(name.endswith(".json") for name in os.listdir(os.path.join(location, "_delta_log")))


def test_the_logs_commit_files_are_cleaned_up_behind_its_checkpoints(tmp_path, monkeypatch) -> None:
    """The barrier log's commit files older than its checkpoint before the newest go
    (``_maintain`` checkpoints after each compaction and cleans up, oldest first;
    ``LOG_PROPERTIES``: no checkpoints or cleanup of delta-rs's own), so its
    ``_delta_log`` stays short however many barriers it holds; every row stays, the txn is read
    from the newest commit, a writer whose cached log went stale under a cleanup loads it again,
    and a log written before ``LOG_PROPERTIES`` gets them at its next write."""
    from deltalake import DeltaTable

    from airflow_provider_tsb.delta import barrier_log

    fast = {**barrier_log.LOG_PROPERTIES, "delta.logRetentionDuration": "interval 0 seconds"}
    monkeypatch.setattr(barrier_log, "LOG_PROPERTIES", fast)
    monkeypatch.setattr(barrier_log, "COMPACT_EVERY", 10)
    log = str(tmp_path / "log")

    def write(b: int) -> None:
        write_barrier(log, BarrierLogEntry("wc", b, b, "system", False, b, f"r{b}", {WORDS: b}))
        assert barrier_log.wait_maintenance(log, timeout=60)

    for b in range(1, 4):
        write(b)
    stale = barrier_log._writers[barrier_log.normalize_location(log)]  # another process's, at barrier 3
    assert barrier_log.logged_barrier(log, "wc") == 3  # its newest commit file remembered
    for b in range(4, 61):
        write(b)
    assert _commit_files(log) <= 23, sorted(os.listdir(os.path.join(log, "_delta_log")))  # two maintenances' worth
    assert barrier_log.logged_barrier(log, "wc") == 60  # the commit file it remembered is gone
    barrier_log._writers[barrier_log.normalize_location(log)] = stale  # its commits 4..50 are gone
    write(61)
    assert [e.barrier for e in read_barrier_log(log)] == list(range(1, 62))
    assert barrier_log.logged_barrier(log, "wc") == 61 == DeltaTable(log).transaction_version("tsb-barrier-log:wc")

    old = str(tmp_path / "old")  # a log created with the defaults (30 days of commit files)
    monkeypatch.setattr(barrier_log, "LOG_PROPERTIES", {})
    write_barrier(old, BarrierLogEntry("wc", 1, 1, "system", False, 1, "r1", {WORDS: 1}))
    monkeypatch.setattr(barrier_log, "LOG_PROPERTIES", fast)
    CACHES.clear("delta.barrier_log")  # a new process
    for b in range(2, 31):
        write_barrier(old, BarrierLogEntry("wc", b, b, "system", False, b, f"r{b}", {WORDS: b}))
        assert barrier_log.wait_maintenance(old, timeout=60)
    assert DeltaTable(old).metadata().configuration == fast
    assert _commit_files(old) <= 23
    assert [e.barrier for e in read_barrier_log(old)] == list(range(1, 31))


def test_generations_go_on_while_the_log_is_maintained_and_both_land(tmp_path, monkeypatch, caplog) -> None:
    """The log's maintenance runs on a thread of its own (``_start_maintenance``): a generation
    returns while a compaction is held, the compaction then lands over the barriers committed
    meanwhile, and under a free race (a maintenance every 10 barriers while generations go on)
    every maintenance lands, every row is kept once and ``logged_barrier`` follows the newest."""
    import logging
    import threading

    from deltalake import DeltaTable

    from airflow_provider_tsb.delta import barrier_log

    monkeypatch.setattr(barrier_log, "COMPACT_EVERY", 10)
    caplog.set_level(logging.WARNING, logger="airflow_provider_tsb.delta")
    log = str(tmp_path / "log")
    held, entered = threading.Event(), threading.Event()
    real = barrier_log._maintain

    def held_maintain(loc: str, barrier: int) -> None:
        entered.set()
        assert held.wait(60)
        real(loc, barrier)

    def write(b: int) -> None:
        write_barrier(log, BarrierLogEntry("wc", b, b, "system", False, b, f"r{b}", {WORDS: b}))

    monkeypatch.setattr(barrier_log, "_maintain", held_maintain)
    for b in range(1, 11):
        write(b)
    assert entered.wait(30)  # barrier 10 started it
    writer = threading.Thread(target=lambda: [write(b) for b in range(11, 20)])
    writer.start()
    writer.join(30)
    assert not writer.is_alive(), "a generation waited for the log's maintenance"
    assert not barrier_log.wait_maintenance(log, timeout=0)
    assert len(DeltaTable(log).file_uris()) == 19
    held.set()
    assert barrier_log.wait_maintenance(log, timeout=60)
    assert len(DeltaTable(log).file_uris()) == 1  # the 19 rows compacted, those of 11..19 too
    assert barrier_log.logged_barrier(log, "wc") == 19

    monkeypatch.setattr(barrier_log, "_maintain", real)
    for b in range(20, 301):
        write(b)
        assert barrier_log.logged_barrier(log, "wc") == b
    assert barrier_log.wait_maintenance(log, timeout=60)
    assert [e.barrier for e in read_barrier_log(log)] == list(range(1, 301))
    assert DeltaTable(log).transaction_version("tsb-barrier-log:wc") == 300
    # a maintenance is skipped while the one before still runs (``_start_maintenance``), which a
    # loaded CI machine does for several in a row; one more after the race compacts what is left
    assert len(DeltaTable(log).file_uris()) < 300
    barrier_log._maintain(log, 300)
    assert len(DeltaTable(log).file_uris()) == 1
    assert [e.barrier for e in read_barrier_log(log)] == list(range(1, 301))
    assert not [r for r in caplog.records if "maintenance" in r.getMessage()], caplog.text


def test_a_compaction_that_loses_every_race_to_the_writers_lands_under_their_lock(tmp_path, monkeypatch) -> None:
    """CI once lost a compaction to a generating loop: delta-rs's 15 commit attempts each found a
    newer generation (``Failed to commit transaction: 15``) and the log stayed uncompacted. A
    compaction whose retries all lose (delta-rs's own error, raised by its first attempt here: a
    real loss cannot be forced) compacts again under the writers' lock, from a snapshot moved past
    the generations that beat it, and keeps every row once."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError
    from deltalake.table import TableOptimizer

    from airflow_provider_tsb.delta import barrier_log

    monkeypatch.setattr(barrier_log, "COMPACT_EVERY", 10_000)
    log = str(tmp_path / "log")
    real, calls = TableOptimizer.compact, []

    def losing_compact(self: TableOptimizer, *args, **kwargs):  # noqa: ANN202 - delta-rs's signature
        calls.append((kwargs.get("commit_properties"), barrier_log._writers_lock.locked()))
        if len(calls) == 1:
            raise CommitFailedError("Failed to commit transaction: 100")
        return real(self, *args, **kwargs)

    def write(b: int) -> None:
        write_barrier(log, BarrierLogEntry("wc", b, b, "system", False, b, f"r{b}", {WORDS: b}))

    for b in range(1, 13):
        write(b)
    stale = DeltaTable(log)
    write(13)
    monkeypatch.setattr(TableOptimizer, "compact", losing_compact)
    barrier_log._compact(stale)
    assert calls[0][0].max_commit_retries == barrier_log.COMPACT_COMMIT_RETRIES and not calls[0][1]
    assert len(calls) == 2 and calls[1][1], "the second compaction runs under the writers' lock"
    table = DeltaTable(log)
    assert len(table.file_uris()) == 1  # barrier 13's file too: the snapshot moved forward first
    assert table.history(1)[0]["operation"] == "OPTIMIZE"
    assert [e.barrier for e in read_barrier_log(log)] == list(range(1, 14))
    assert barrier_log.logged_barrier(log, "wc") == 13
    write(14)  # the writer's cached table moves past the compaction
    assert [e.barrier for e in read_barrier_log(log)] == list(range(1, 15))


def test_a_generation_is_one_metastore_transaction_with_its_log_commit_last(store: MetaStore, tmp_path) -> None:
    """``TsbBarrierHook.generate_at``: the domain's roots, the previous barrier, the barrier with
    its root versions and their live-file figures, and its log commit are one transaction."""
    from sqlalchemy import event

    from airflow_provider_tsb.hooks.barrier import TsbBarrierHook, read_root_versions

    topo = wordcount(tmp_path)
    commit(topo.location(WORDS))
    store.registry.register_topology(topo)
    commits: list[int] = []
    statements: list[str] = []
    event.listen(store.core.engine, "commit", lambda _conn: commits.append(1))
    event.listen(store.core.engine, "before_cursor_execute",
                 lambda _c, _cur, statement, *_a: statements.append(statement.split()[0].upper()))
    hook = TsbBarrierHook(topo)
    assert hook.generate_at(store, read_root_versions(topo), "run/1").barrier == 1
    assert len(commits) == 1, commits
    commit(topo.location(WORDS))
    statements.clear()
    assert hook.generate_at(store, read_root_versions(topo), "run/2").barrier == 2
    assert len(commits) == 2, commits
    # the domain locked and read again, the run key and the previous barrier, the tables with
    # their previous root versions, the barrier, its root versions (SQLite adds BEGIN IMMEDIATE)
    assert [v for v in statements if v != "BEGIN"] == ["SELECT"] * 4 + ["INSERT"] * 2, statements
    assert [e.barrier for e in read_barrier_log(barrier_log_location(topo.warehouse, "wc"))] == [1, 2]
    assert store.table_states.get(WORDS, 2).version == 1
    assert store.table_states.get(WORDS, 2).file_count == 2  # recorded with the version


def test_a_generation_does_not_wait_for_snapshot_expirys_lock_on_a_root(store: MetaStore, tmp_path) -> None:
    """Expiry locks a table's row against leases (``metastore/expiry.py``); the WRITTEN row a
    barrier inserts for the root references that row and must not queue behind it (on
    PostgreSQL a ``FOR UPDATE`` made every generation wait for the expiry transaction)."""
    import threading

    from airflow_provider_tsb.metastore.expiry import _lock_table

    if store.core.engine.dialect.name == "sqlite":
        pytest.skip("SQLite serialises every writer (BEGIN IMMEDIATE): there are no row locks")
    topo = wordcount(tmp_path)
    commit(topo.location(WORDS))
    store.registry.register_topology(topo)
    generated: list[int] = []
    with store.core.transaction(write=True) as s:
        _lock_table(s, WORDS, dry_run=False)  # expiry's lock, held while its transaction runs
        worker = threading.Thread(target=lambda: generated.append(
            store.barriers.create("wc", {WORDS: 0}, run_key="beside-expiry").barrier))
        worker.start()
        worker.join(timeout=20)
        assert generated == [1], "the barrier generation waited for snapshot expiry's lock on the root table"
    assert store.table_states.get(WORDS, 1).version == 0
