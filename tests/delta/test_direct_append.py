"""tsb's direct blind append (:mod:`airflow_provider_tsb.delta.direct_append`): what delta-rs reads
back, versions taken by other writers, and the protocols it leaves to delta-rs."""

from __future__ import annotations

import json
import os
import threading

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_tsb.delta import direct_append
from airflow_provider_tsb.delta.barrier_log import (
    SCHEMA,
    BarrierLogEntry,
    read_barrier_log,
    wait_maintenance,
    write_barrier,
)
from airflow_provider_tsb.delta.direct_append import append_file, supports_direct_append
from airflow_provider_tsb.exceptions import DeltaLogError, TableNotFoundError


def _entry(barrier: int, topology: str = "t") -> pa.Table:
    return pa.Table.from_pylist([{
        "topology": topology, "barrier": barrier, "ts_ms": barrier * 10, "ts_kind": "system", "final": False,
        "created_at_ms": barrier, "run_key": None if barrier % 2 else f"r{barrier}",
        "root_versions": [("tsb.raw.words", barrier)],
    }], schema=SCHEMA)


def _commit(location: str, version: int) -> list[dict]:
    with open(os.path.join(location, "_delta_log", f"{version:020d}.json"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_appends_from_threads_beside_a_compaction_are_one_table_delta_rs_reads(tmp_path) -> None:
    """Three writers appending at once, and delta-rs compacting beside them: every row once,
    versions contiguous, each writer's ``txn`` its last, statistics delta-rs reads."""
    loc = str(tmp_path / "log")
    write_deltalake(loc, _entry(0), configuration={"delta.checkpointInterval": "1000000000"})
    errors: list[BaseException] = []

    def writer(app: int) -> None:
        try:
            for n in range(1, 21):
                append_file(loc, _entry(app * 100 + n), app_id=f"app{app}", txn_version=n, metadata={"k": str(n)})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(app,)) for app in (1, 2, 3)]
    for thread in threads:
        thread.start()
    DeltaTable(loc).optimize.compact()  # dataChange=false, commits over the appends that land first
    for thread in threads:
        thread.join()
    assert errors == []
    table = DeltaTable(loc)
    barriers = sorted(table.to_pyarrow_table().column("barrier").to_pylist())
    assert barriers == [0, *(app * 100 + n for app in (1, 2, 3) for n in range(1, 21))]
    versions = sorted(int(name[:20]) for name in os.listdir(tmp_path / "log" / "_delta_log") if name.endswith(".json"))
    assert versions == list(range(len(versions))) and len(versions) >= 61  # 1 create + 60 appends (+ compaction)
    assert {app: table.transaction_version(f"app{app}") for app in (1, 2, 3)} == {1: 20, 2: 20, 3: 20}
    assert not [name for name in os.listdir(tmp_path / "log" / "_delta_log") if name.endswith(".tmp")]
    adds = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    if len(adds["path"]) > 1:  # the compaction may have landed first: the later files are one row each
        one_row = [i for i, rows in enumerate(adds["num_records"]) if rows == 1]
        assert all(adds["min.barrier"][i] == adds["max.barrier"][i] for i in one_row)
    mine = [a for v in versions[1:] for a in _commit(loc, v) if "commitInfo" in a and "k" in a["commitInfo"]]
    assert len(mine) == 60 and all(a["commitInfo"]["isBlindAppend"] for a in mine)


def test_a_version_another_writer_took_is_skipped(tmp_path, monkeypatch) -> None:
    """The newest version read is stale (another writer committed since): the append takes the
    first free version, no commit is replaced."""
    loc = str(tmp_path / "log")
    write_deltalake(loc, _entry(0))
    for n in (1, 2, 3):
        write_deltalake(loc, _entry(n), mode="append")
    monkeypatch.setattr(direct_append, "newest_version", lambda _loc: 0)
    assert append_file(loc, _entry(4), app_id="a", txn_version=4) == 4
    assert sorted(DeltaTable(loc).to_pyarrow_table().column("barrier").to_pylist()) == [0, 1, 2, 3, 4]
    engines = [_commit(loc, v)[0]["commitInfo"].get("engineInfo", "") for v in range(5)]
    assert all(e.startswith("delta-rs") for e in engines[:4]) and engines[4] == direct_append.ENGINE_INFO


def test_an_append_to_a_missing_table_is_a_clear_error(tmp_path) -> None:
    """Refused before any file is written."""
    with pytest.raises(TableNotFoundError, match="no Delta table at .*missing"):
        append_file(str(tmp_path / "missing"), _entry(1), app_id="a", txn_version=1)
    assert not (tmp_path / "missing").exists()


def test_only_local_tables_of_writer_version_2_at_most_append_directly() -> None:
    assert supports_direct_append("/tmp/t", 1, 2)
    assert not supports_direct_append("/tmp/t", 1, 3)  # CHECK constraints
    assert not supports_direct_append("/tmp/t", 3, 7)  # table features
    assert not supports_direct_append("s3://bucket/t", 1, 2)


def test_a_barrier_log_with_a_constraint_is_written_by_delta_rs_which_enforces_it(tmp_path) -> None:
    """A log whose protocol is beyond a blind append (a CHECK constraint: writer version 3) is
    appended to through delta-rs, so the constraint holds: a row breaking it is refused with the
    barrier named, and nothing is lost."""
    loc = str(tmp_path / "log")
    write_barrier(loc, BarrierLogEntry("wc", 1, 1, "system", False, 1, "r1", {"w": 1}))
    DeltaTable(loc).alter.add_constraint({"small_ids": "barrier < 5"})
    assert DeltaTable(loc).protocol().min_writer_version >= 3
    write_barrier(loc, BarrierLogEntry("wc", 2, 2, "system", False, 2, "r2", {"w": 2}))
    assert _commit(loc, DeltaTable(loc).version())[0]["commitInfo"].get("engineInfo", "").startswith("delta-rs")
    with pytest.raises(DeltaLogError, match="barrier 7 of topology 'wc'"):
        write_barrier(loc, BarrierLogEntry("wc", 7, 7, "system", False, 7, "r7", {"w": 7}))
    wait_maintenance(loc)
    assert [e.barrier for e in read_barrier_log(loc)] == [1, 2]


def test_the_barrier_log_appends_directly_once_it_exists(tmp_path) -> None:
    """The first barrier creates the log through delta-rs (with its properties); the next are
    tsb's own commits, each with the log's ``txn`` and barrier, read back by delta-rs."""
    loc = str(tmp_path / "log")
    for b in (1, 2, 3):
        write_barrier(loc, BarrierLogEntry("wc", b, b * 10, "system", b == 3, b, f"r{b}", {"w": b}))
    engines = [_commit(loc, v)[0]["commitInfo"].get("engineInfo", "") for v in (0, 1, 2)]
    assert engines[0].startswith("delta-rs") and engines[1:] == [direct_append.ENGINE_INFO] * 2
    assert DeltaTable(loc).transaction_version("tsb-barrier-log:wc") == 3
    assert [(e.barrier, e.ts_ms, e.final, e.run_key, e.root_versions) for e in read_barrier_log(loc)] == [
        (1, 10, False, "r1", {"w": 1}), (2, 20, False, "r2", {"w": 2}), (3, 30, True, "r3", {"w": 3})]
