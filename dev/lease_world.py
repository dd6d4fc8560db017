"""Leases against snapshot expiry with real processes, real Delta tables and real vacuum.

Topology ``leases``: root ``tsb.lr.events`` (appended by the writer); job ``snap_job`` writes
``tsb.lr.snap``, overwritten at every barrier with :data:`ROWS` rows whose ``b`` column is the
barrier (so each version's files are removed by the next one and vacuum can delete them); job
``sum_job`` (a registered consumer, apache/paimon#5819) reads ``snap`` and appends one row per
barrier to ``tsb.lr.summary``.

Roles, each run as its own process (``python -m dev.lease_world ROLE CONFIG_JSON``),
each printing one JSON line of counts at the end:

* ``writer``: per barrier: append to ``events``, generate the barrier, overwrite ``snap`` in
  a Delta commit tagged with the barrier, report WRITTEN;
* ``expiry``: expire ``snap`` and ``events`` in a loop (``keep_barriers``); ``unsafe`` runs the
  code before issue 12 (read the leases, then vacuum, nothing marked; no retry);
* ``reader``: pick a barrier near the oldest, resolve AS OF it with a lease (or without:
  ``lease: false``, apache/paimon#6978's reader that just started), hold it a moment, read it
  with Arrow and check every row; counts leases, refusals, lost files, stale versions;
* ``consumer``: ``sum_job`` run barrier by barrier through the metastore catalog, holding the
  input lease of :mod:`airflow_provider_tsb.spark.input_leases` while it reads (slowly);
* ``expire_once``: one expiry that stops between its marks and its vacuum until a file appears
  (the forced order).

Processes stop when ``CONFIG["stop_file"]`` exists (or their own deadline passes).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from airflow_provider_tsb.delta.barriers import version_of_barrier
from airflow_provider_tsb.exceptions import ExpiredVersionError, InconsistentReadError
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.resolutions import to_arrow
from airflow_provider_tsb.topology import Topology

TOPOLOGY = "leases"
EVENTS, SNAP, SUMMARY = "tsb.lr.events", "tsb.lr.snap", "tsb.lr.summary"
ROWS = 20
#: the tables' Delta ``checkpointInterval``: a checkpoint every 10 versions, so that snapshot
#: expiry's metadata cleanup (:mod:`airflow_provider_tsb.delta.log_cleanup`) runs within a test's
#: few dozen barriers (the default is 100)
LOG_CONFIGURATION = {"delta.checkpointInterval": "10"}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(store: MetaStore, warehouse: str, *, consumer: bool = False) -> dict[str, str]:
    """Register the topology (``sum_job`` only with ``consumer``); returns ``{table: location}``."""
    topo = Topology(TOPOLOGY, warehouse=warehouse)
    topo.root_table(EVENTS)
    topo.job("snap_job", "snap.py", sources=[EVENTS], sinks=[SNAP])
    if consumer:
        topo.job("sum_job", "sum.py", sources=[SNAP], sinks=[SUMMARY])
    store.registry.register_topology(topo)
    return {t.name: t.location for t in store.registry.tables(TOPOLOGY)}


def _tags(barrier: int, job: str) -> CommitProperties:
    return CommitProperties(custom_metadata={"tsb.barrier": str(barrier), "tsb.job": job})


def write_barrier(store: MetaStore, loc: dict[str, str], ts_ms: int | None = None) -> int:
    """One barrier end to end (the writer's step, barrier timestamp ``ts_ms``); returns its id."""
    write_deltalake(loc[EVENTS], pa.table({"e": pa.array([random.random() for _ in range(5)])}), mode="append",
                    configuration=LOG_CONFIGURATION)
    barrier = store.barriers.create(TOPOLOGY, {EVENTS: DeltaTable(loc[EVENTS]).version()}, ts_ms=ts_ms).barrier
    rows = pa.table({"b": pa.array([barrier] * ROWS, pa.int64()), "k": pa.array(range(ROWS), pa.int64())})
    write_deltalake(loc[SNAP], rows, mode="overwrite", commit_properties=_tags(barrier, "snap_job"),
                    configuration=LOG_CONFIGURATION)
    version = version_of_barrier(loc[SNAP], barrier)
    assert version is not None, f"snap has no version tagged with barrier {barrier}"
    store.table_states.record_written(SNAP, barrier, version, "snap_job")
    return barrier


def check_snap(table: pa.Table, barrier: int) -> bool:
    """Whether ``table`` is exactly barrier ``barrier``'s snap."""
    return table.num_rows == ROWS and set(table.column("b").to_pylist()) == {barrier}


def unsafe_expire(store: MetaStore, table: str, keep_barriers: int, pause: Any = None) -> dict[str, Any]:
    """Snapshot expiry as it was before issue 12 (hooks/maintenance.py at 80313a0): read the
    live leases, then vacuum; nothing marked, no retry. ``pause()`` runs in between."""
    store.leases.expire()
    info = store.registry.table(table)
    history = [s for s in store.table_states.history(info.name, limit=keep_barriers * 4) if s.state == "WRITTEN"]
    keep = {s.version for s in history[:keep_barriers] if s.version is not None}
    keep |= store.leases.leased_versions(info.name)
    dt = DeltaTable(info.location)
    keep.add(dt.version())
    if pause is not None:
        pause()
    removed = dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False,
                        keep_versions=sorted(keep))
    return {"table": info.name, "removed_files": len(removed), "attempts": 1}


def _stopped(cfg: dict[str, Any], deadline: float) -> bool:
    return os.path.exists(cfg["stop_file"]) or time.monotonic() > deadline


# ------------------------------------------------------------------ roles
def role_writer(cfg: dict[str, Any]) -> dict[str, Any]:
    store, loc = MetaStore(cfg["url"]), cfg["locations"]
    deadline = time.monotonic() + cfg.get("seconds", 60)
    barriers = 0
    while not _stopped(cfg, deadline) and barriers < cfg.get("barriers", 10**9):
        write_barrier(store, loc)
        barriers += 1
        time.sleep(cfg.get("interval", 0.0))
    return {"barriers": barriers}


def role_expiry(cfg: dict[str, Any]) -> dict[str, Any]:
    from airflow_provider_tsb.maintenance.expiry import expire_snapshots

    store = MetaStore(cfg["url"])
    deadline = time.monotonic() + cfg.get("seconds", 60)
    cycles = failed = retries = removed = removed_log = 0
    errors: dict[str, int] = {}
    while not _stopped(cfg, deadline):
        for table in (SNAP, EVENTS):
            try:
                if cfg.get("unsafe"):
                    result = unsafe_expire(store, table, cfg["keep_barriers"])
                else:
                    result = expire_snapshots(store, table, cfg["keep_barriers"], max_retries=cfg.get("max_retries", 8),
                                              consumers=cfg.get("consumers", True))
                retries += result["attempts"] - 1
                removed += result["removed_files"]
                removed_log += result.get("removed_log_files", 0)
            except Exception as exc:
                failed += 1
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            cycles += 1
        time.sleep(cfg.get("pause", 0.02))
    return {"expiry_cycles": cycles, "failed": failed, "retries": retries, "removed_files": removed,
            "removed_log_files": removed_log, "errors": errors}


def role_reader(cfg: dict[str, Any]) -> dict[str, Any]:
    store = MetaStore(cfg["url"])
    rng = random.Random(cfg.get("seed"))
    deadline = time.monotonic() + cfg.get("seconds", 60)
    out = {"leases": 0, "reads": 0, "refused": 0, "lost": 0, "stale_versions": 0, "wrong": 0, "raw_errors": 0,
           "expired_reads": 0}
    with_lease = cfg.get("lease", True)
    while not _stopped(cfg, deadline):
        newest = store.barriers.latest(TOPOLOGY)
        if newest is None:
            time.sleep(0.02)
            continue
        window = cfg.get("window", 6)
        barrier = rng.randint(max(1, newest.barrier - window), newest.barrier)
        try:
            if with_lease:
                res = store.resolution.resolve([SNAP], as_of=barrier, lease_seconds=30,
                                               lease_holder="lease_world reader")
            else:
                res = store.resolution.resolve([SNAP], as_of=barrier)
        except ExpiredVersionError:
            out["refused"] += 1
            continue
        except InconsistentReadError:
            continue
        version = res.tables[SNAP].version
        if with_lease:
            out["leases"] += 1
            expiry = store.expiry.get(SNAP)
            if expiry is not None and version is not None and expiry.is_expired(version):
                out["stale_versions"] += 1
        time.sleep(rng.uniform(0, cfg.get("hold", 0.05)))
        try:
            table = to_arrow(res)[SNAP]
            out["reads"] += 1
            if not check_snap(table, barrier):
                out["wrong"] += 1
        except ExpiredVersionError:
            out["lost" if with_lease else "expired_reads"] += 1
        except Exception:
            out["raw_errors"] += 1
            out["lost" if with_lease else "expired_reads"] += 1
        if res.lease_id:
            store.leases.release(res.lease_id)
        time.sleep(cfg.get("pace", 0.02))
    return out


def role_consumer(cfg: dict[str, Any]) -> dict[str, Any]:
    from airflow_provider_tsb.delta.log import open_table
    from airflow_provider_tsb.read.version_reads import scan_to_arrow
    from airflow_provider_tsb.spark.input_leases import InputLease
    from airflow_provider_tsb.spark.metastore_catalog import MetastoreCatalog

    store, loc = MetaStore(cfg["url"]), cfg["locations"]
    catalog = MetastoreCatalog(cfg["url"])
    deadline = time.monotonic() + cfg.get("seconds", 60)
    out = {"consumed": 0, "consumer_lost": 0, "consumer_wrong": 0}
    head = store.table_states.newest_written(SUMMARY)
    after = head.barrier if head is not None else None
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        plans = catalog.pending_barriers("sum_job", {SNAP: loc[SNAP]}, after, limit=1)
        if not plans:
            if os.path.exists(cfg["stop_file"]) and time.monotonic() - idle_since > 1.0:
                break
            time.sleep(0.02)
            continue
        idle_since = time.monotonic()
        plan = plans[0]
        lease = InputLease.take(catalog, "sum_job", plan) if cfg.get("lease", True) else None
        try:
            try:
                time.sleep(cfg.get("slow", 0.1))  # a slow job: expiry runs while it reads
                table = scan_to_arrow(open_table(loc[SNAP], plan.inputs[SNAP]))
                if not check_snap(table, plan.barrier):
                    out["consumer_wrong"] += 1
                row = pa.table({"b": pa.array([plan.barrier], pa.int64()), "n": pa.array([table.num_rows], pa.int64())})
                write_deltalake(loc[SUMMARY], row, mode="append", commit_properties=_tags(plan.barrier, "sum_job"))
            finally:
                if lease is not None:
                    lease.release()
            version = version_of_barrier(loc[SUMMARY], plan.barrier)
            store.table_states.record_written(SUMMARY, plan.barrier, version, "sum_job")
            out["consumed"] += 1
            after = plan.barrier
        except (ExpiredVersionError, OSError):
            out["consumer_lost"] += 1
            return out  # a real job fails here
    return out


def role_expire_once(cfg: dict[str, Any]) -> dict[str, Any]:
    """One expiry of ``snap`` paused between its marks (or lease read) and its vacuum."""
    from airflow_provider_tsb.maintenance.expiry import expire_snapshots

    store = MetaStore(cfg["url"])

    def pause(*_: Any) -> None:
        with open(cfg["marked_file"], "w") as fh:
            fh.write("marked")
        end = time.monotonic() + 60
        while not os.path.exists(cfg["go_file"]) and time.monotonic() < end:
            time.sleep(0.01)

    if cfg.get("unsafe"):
        return unsafe_expire(store, SNAP, cfg["keep_barriers"], pause)
    result = expire_snapshots(store, SNAP, cfg["keep_barriers"], before_vacuum=pause)
    return {k: result[k] for k in ("removed_files", "attempts", "horizon", "newly_expired")}


ROLES = {"writer": role_writer, "expiry": role_expiry, "reader": role_reader, "consumer": role_consumer,
         "expire_once": role_expire_once}


# ------------------------------------------------------------------ driving processes
def spawn(role: str, cfg: dict[str, Any]) -> subprocess.Popen[str]:
    """Start ``role`` in its own Python process."""
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.Popen(
        [sys.executable, "-m", "dev.lease_world", role, json.dumps(cfg)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def result_of(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    """Wait for a role process; its JSON counts (raises with its stderr if it failed)."""
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{proc.args[3]} exited {proc.returncode}: {err[-3000:]}")
    return json.loads(lines[-1])


@contextlib.contextmanager
def stop_file(path: str) -> Iterator[str]:
    """A stop-file path that is created when the block ends (even on error)."""
    try:
        yield path
    finally:
        with open(path, "w") as fh:
            fh.write("stop")


def forced_order(url: str, locations: dict[str, str], workdir: str, *, unsafe: bool, barrier: int = 1,
                 keep_barriers: int = 1) -> dict[str, Any]:
    """A lease on ``barrier`` taken (in this process) while an expiry process waits between its
    marks -- or, ``unsafe``, its read of the leases -- and its vacuum; then the leased read.

    Returns ``{"granted", "lost", "read_ok", "refused"}`` (``refused``: the error text).
    """
    tag = f"{int(unsafe)}-{time.monotonic_ns()}"
    marked, go = os.path.join(workdir, f"marked-{tag}"), os.path.join(workdir, f"go-{tag}")
    proc = spawn("expire_once", {"url": url, "locations": locations, "stop_file": go, "keep_barriers": keep_barriers,
                                 "unsafe": unsafe, "marked_file": marked, "go_file": go})
    try:
        end = time.monotonic() + 60
        while not os.path.exists(marked):
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"expire_once never reached its vacuum: {proc.communicate()[1][-2000:]}")
            time.sleep(0.01)
        store = MetaStore(url)
        out: dict[str, Any] = {"granted": False, "lost": 0, "read_ok": False, "refused": None}
        try:
            res = store.resolution.resolve([SNAP], as_of=barrier, lease_seconds=60, lease_holder="forced-order reader")
            out["granted"] = True
        except ExpiredVersionError as exc:
            out["refused"] = str(exc)
    finally:
        with open(go, "w") as fh:
            fh.write("go")
    out["expiry"] = result_of(proc)
    if out["granted"]:
        try:
            out["read_ok"] = check_snap(to_arrow(res)[SNAP], barrier)
        except (ExpiredVersionError, OSError):
            out["lost"] = 1
        store.leases.release(res.lease_id)
    return out


def race(url: str, locations: dict[str, str], workdir: str, *, seconds: float, readers: int = 2,
         unleased_readers: int = 1, consumer: bool = False, keep_barriers: int = 2, unsafe: bool = False,
         max_retries: int = 8, interval: float = 0.0, seed: int = 0, barriers: int | None = None,
         expiry_pause: float = 0.05) -> dict[str, int]:
    """A writer, an expiry loop, readers (with and without leases) and a consumer job racing for
    ``seconds`` (or until the writer has committed ``barriers`` barriers, within ``seconds``);
    the summed counts of every process."""
    stop = os.path.join(workdir, f"stop-{seed}-{time.monotonic_ns()}")
    base = {"url": url, "locations": locations, "stop_file": stop, "seconds": seconds + 60}
    writer_cfg = {**base, "seconds": seconds, "interval": interval}
    if barriers is not None:
        writer_cfg["barriers"] = barriers
    procs = [spawn("writer", writer_cfg)]
    procs.append(spawn("expiry", {**base, "keep_barriers": keep_barriers, "unsafe": unsafe, "max_retries": max_retries,
                                  "consumers": not unsafe, "pause": expiry_pause}))
    for i in range(readers):
        procs.append(spawn("reader", {**base, "seed": seed * 100 + i}))
    for i in range(unleased_readers):
        procs.append(spawn("reader", {**base, "seed": seed * 100 + 50 + i, "lease": False}))
    if consumer:
        procs.append(spawn("consumer", {**base, "lease": not unsafe, "slow": 0.05}))
    totals: dict[str, int] = {}
    with stop_file(stop):
        writer = result_of(procs[0], timeout=seconds + 120)
    for key, value in writer.items():
        totals[key] = totals.get(key, 0) + value
    for proc in procs[1:]:
        for key, value in result_of(proc).items():
            if isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
    return totals


if __name__ == "__main__":
    print(json.dumps(ROLES[sys.argv[1]](json.loads(sys.argv[2]))), flush=True)
