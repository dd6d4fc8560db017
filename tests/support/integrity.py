"""A small merge topology committed through the project's commit path (no Spark), and the edits
of its Delta log that issue 25 item 4's probe made (tests/delta/test_integrity.py).

Topology ``integrity``: root ``tsb.ig.events``; job ``merge_job`` writes ``tsb.ig.sink`` with
:func:`~airflow_provider_tsb.delta.commit.commit_barrier_files`, as the Spark outputs do:

* barrier 1 (version 0, creates the table): file A, keys 0-9;
* barrier 2 (version 1, a merge): removes A, adds A2 (keys 0-9, updated) and B (keys 10-14);
* barrier 3 (version 2, an append): adds C (keys 15-19).

So each barrier's read has 10, 15 and 20 rows, one row per key.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import Schema as DeltaSchema
from deltalake import write_deltalake

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.delta import snapshots
from airflow_provider_tsb.delta.commit import RemovedFile, StagedFile, commit_barrier_files
from airflow_provider_tsb.delta.conventions import BarrierTag
from airflow_provider_tsb.delta.stats import footer_stats
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology

TOPOLOGY, EVENTS, SINK, JOB = "integrity", "tsb.ig.events", "tsb.ig.sink", "merge_job"
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])
ROWS = {1: 10, 2: 15, 3: 20}


def _stage(location: str, barrier: int, name: str, keys: range, value: int) -> StagedFile:
    """Write one Parquet file under the sink's staging directory, as an executor would."""
    rel = f"tsb_staging/{JOB}/0/{barrier}/{uuid.uuid4().hex}/{name}.parquet"
    path = os.path.join(location, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table({"k": list(keys), "v": [value] * len(keys)}, schema=SCHEMA), path)
    rows, stats = footer_stats(pafs.LocalFileSystem(), path)
    return StagedFile(rel, os.path.getsize(path), int(time.time() * 1000), rows, stats)


def _commit(store: MetaStore, location: str, barrier: int, files: list[StagedFile],
            removes: tuple[StagedFile, ...] = ()) -> int:
    outcome = commit_barrier_files(
        location, files, tag=BarrierTag(barrier, JOB, attempt=uuid.uuid4().hex), mode="append",
        schema=DeltaSchema.from_arrow(SCHEMA), removes=[RemovedFile(r.path, r.size) for r in removes],
    )
    store.table_states.record_written(SINK, barrier, outcome.version, JOB)
    return outcome.version


def build(store: MetaStore, warehouse: str) -> dict[str, str]:
    """Register the topology and commit barriers 1-3 (module docstring); ``{table: location}``."""
    topo = Topology(TOPOLOGY, warehouse=warehouse)
    topo.root_table(EVENTS)
    topo.job(JOB, "merge.py", sources=[EVENTS], sinks=[SINK])
    store.registry.register_topology(topo)
    loc = {t.name: t.location for t in store.registry.tables(TOPOLOGY)}
    write_deltalake(loc[EVENTS], pa.table({"e": [1]}), mode="append")
    for _ in range(3):
        store.barriers.create(TOPOLOGY, {EVENTS: 0})
    a = _stage(loc[SINK], 1, "a", range(0, 10), 1)
    _commit(store, loc[SINK], 1, [a])
    _commit(store, loc[SINK], 2, [_stage(loc[SINK], 2, "a2", range(0, 10), 2),
                                  _stage(loc[SINK], 2, "b", range(10, 15), 2)], removes=(a,))
    _commit(store, loc[SINK], 3, [_stage(loc[SINK], 3, "c", range(15, 20), 3)])
    return loc


def commit_next(store: MetaStore, location: str, barrier: int, name: str, keys: range) -> int:
    """Append one more file (keys ``keys``) to the sink as ``barrier``; its Delta version."""
    return _commit(store, location, barrier, [_stage(location, barrier, name, keys, barrier)])


def commit_file(location: str, version: int) -> str:
    """The path of commit ``version``'s JSON file."""
    return os.path.join(location, "_delta_log", f"{version:020d}.json")


def _actions(location: str, version: int) -> list[dict]:
    with open(commit_file(location, version)) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _write_actions(location: str, version: int, actions: list[dict]) -> None:
    with open(commit_file(location, version), "w") as fh:
        fh.write("".join(json.dumps(a) + "\n" for a in actions))


def _drop_action(location: str, version: int, action: str) -> None:
    path = commit_file(location, version)
    with open(path) as fh:
        lines = fh.read().splitlines()
    kept = [line for line in lines if not line.startswith(f'{{"{action}"')]
    assert len(kept) == len(lines) - 1, f"commit {version} has not exactly one {action} action: {lines}"
    with open(path, "w") as fh:
        fh.write("\n".join(kept) + "\n")


def tamper(location: str, kind: str, *, new_process: bool = True) -> tuple[int, int]:
    """Edit the sink's log as the probe did; returns ``(barrier, version)`` broken.

    ``drop_remove``: barrier 2's commit loses its ``remove`` (A stays live: keys 0-9 twice);
    ``drop_add``: barrier 3's commit loses its ``add`` (keys 15-19 lost); ``truncate``: barrier
    3's commit file is cut in the middle of a line; ``duplicate``: barrier 2's commit file is
    copied over barrier 3's (version 2 then holds barrier 2's files). Two edits keep the count
    and the bytes: ``swap_same_size``: barrier 2's merge removes A2 and adds A, A and A2 being of
    one size (keys 0-9 keep their old values); ``same_size_copy``: barrier 3's ``add`` points to
    a copy of B, of C's size (keys 10-14 twice, 15-19 lost). ``new_process=False``: this process
    goes on, as a long-running reader whose snapshot cache lets the versions go and loads them again.
    """
    if kind == "drop_remove":
        _drop_action(location, 1, "remove")
        broken = (2, 1)
    elif kind == "drop_add":
        _drop_action(location, 2, "add")
        broken = (3, 2)
    elif kind == "truncate":
        path = commit_file(location, 2)
        data = open(path, "rb").read()
        with open(path, "wb") as fh:
            fh.write(data[: len(data) // 2])
        broken = (3, 2)
    elif kind == "swap_same_size":
        actions = _actions(location, 1)
        (a2, _b), (a,) = [x["add"] for x in actions if "add" in x], [x["remove"] for x in actions if "remove" in x]
        assert a["size"] == a2["size"], (a, a2)
        a["path"], a2["path"] = a2["path"], a["path"]
        _write_actions(location, 1, actions)
        broken = (2, 1)
    elif kind == "same_size_copy":
        b = next(x["add"] for x in _actions(location, 1) if "add" in x and x["add"]["path"].endswith("/b.parquet"))
        actions = _actions(location, 2)
        c = next(x["add"] for x in actions if "add" in x)
        assert c["size"] == b["size"], (b, c)
        shutil.copyfile(os.path.join(location, b["path"]), os.path.join(location, "copy-of-b.parquet"))
        c["path"] = "copy-of-b.parquet"
        _write_actions(location, 2, actions)
        broken = (3, 2)
    elif kind == "duplicate":
        shutil.copyfile(commit_file(location, 1), commit_file(location, 2))
        broken = (3, 2)
    else:
        raise ValueError(f"unknown tampering {kind!r}")
    if new_process:
        fresh_process()
    else:
        snapshots.clear()
    return broken


def live_paths(location: str) -> set[str]:
    """The live data files (relative paths) of the table's newest version."""
    from airflow_provider_tsb.delta.integrity import live_paths as of_table
    from airflow_provider_tsb.delta.log import open_table

    return of_table(open_table(location))


def fresh_process() -> None:
    """Forget what this process cached of Delta logs (snapshots, verified versions), as a new
    reader process would start."""
    snapshots.clear()
    CACHES.clear("delta.integrity.verified")
