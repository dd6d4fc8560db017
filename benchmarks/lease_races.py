"""Leases against snapshot expiry, many times, with real processes (issue 12 item 2).

Each round (``--rounds``, default 10) starts on a fresh metastore and warehouse and runs, in
separate processes (``dev/lease_world.py``), until the writer has committed
``--barriers`` barriers (default 25; half of them for the consumer race):

* race: a writer committing barriers to a Delta table overwritten at every barrier, an expiry
  loop (``keep_barriers=2``, delta-rs vacuum), two readers that resolve AS OF a recent barrier
  with a lease, hold it and read it, and one reader without a lease (apache/paimon#6978's
  reader that has just started);
* consumer: the same writer and expiry (``keep_barriers=1``) with a slow running job reading
  every barrier of that table under its input lease (apache/paimon#5819's registered consumer);
* forced order: a lease taken while expiry is between its marks and its vacuum.

Counts, summed over the rounds: ``leases`` granted, ``lost`` (a granted lease whose read found
files gone), ``expiry_cycles`` and ``failed`` ones (after the object store retries;
``retries`` made), ``stale_versions`` (a lease granted on a version marked expired),
``consumer_lost`` (a running job's barrier whose input files were gone), ``raw_errors`` (a read
failing with anything but the tsb error). ``--unsafe`` runs the expiry of before issue 12 (read
the leases, vacuum; no marks, no retry, no consumer protection, no input leases) for comparison.
Last line: ``leases=N lost=0 expiry_cycles=M failed=0 stale_versions=0 ... load=<1-min load>``.

``--fast-writer SECONDS`` (issue 25 item 2) runs one race instead: the writer commits barriers
back to back for SECONDS, expiry runs every ``--expiry-every`` seconds keeping the last
``--keep`` barriers plus leases, two leased readers and one without a lease read meanwhile.
The snap table's data files are sampled every 5 s; flat means the last sample is no larger than
the retention's share (``--keep`` barriers' files plus what one expiry period writes). Last
line: ``barriers= barriers_per_s= cycles= failed= lost= files_max= files_last= bytes_last=
log_files_last= log_removed= load=`` (the commit files left in the snap table's ``_delta_log``, a
checkpoint every 10 versions, and the log files expiry's metadata cleanup deleted).

    .venv/bin/python -m benchmarks.lease_races [--rounds 10] [--barriers 25] [--postgres] [--unsafe]
    .venv/bin/python -m benchmarks.lease_races --fast-writer 120 --expiry-every 10 --keep 100 --postgres
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable

from airflow_provider_tsb.delta.log_cleanup import list_log
from airflow_provider_tsb.metastore.store import MetaStore
from benchmarks.harness import parser, report
from dev import lease_world as lw

KEYS = ("leases", "lost", "expiry_cycles", "failed", "retries", "stale_versions", "refused", "reads", "wrong",
        "raw_errors", "expired_reads", "barriers", "consumed", "consumer_lost", "forced_lost")


def fresh(url_for: Callable[[str], str], folder: str, *, consumer: bool) -> tuple[str, dict[str, str]]:
    url = url_for(folder)
    store = MetaStore(url)
    store.migrate()
    locations = lw.build(store, f"{folder}/wh", consumer=consumer)
    for _ in range(3):
        lw.write_barrier(store, locations)
    store.dispose()
    return url, locations


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--rounds", type=int, default=10)
    options.add_argument("--barriers", type=int, default=25, help="barriers the writer commits per race")
    options.add_argument("--postgres", action="store_true", help="metastore on a throwaway PostgreSQL")
    options.add_argument("--unsafe", action="store_true", help="the expiry of before issue 12, for comparison")
    options.add_argument("--fast-writer", type=float, default=None, metavar="SECONDS",
                         help="one race: a writer committing back to back for SECONDS")
    options.add_argument("--expiry-every", type=float, default=10.0,
                         help="seconds between expiry cycles (fast writer)")
    options.add_argument("--keep", type=int, default=100, help="barriers expiry keeps (fast writer)")
    args = options.parse_args()
    server = None
    if args.postgres:
        from dev.pg import start_postgres

        server = start_postgres()
        names = iter(range(10**6))

        def url_for(_folder: str) -> str:
            return server.create_database(f"lease_races_{next(names)}")
    else:
        def url_for(folder: str) -> str:
            return f"sqlite:///{folder}/tsb.db"

    if args.fast_writer is not None:
        try:
            fast_writer(url_for, args)
        finally:
            if server is not None:
                server.stop()
        return
    totals = dict.fromkeys(KEYS, 0)
    started = time.monotonic()
    try:
        for i in range(args.rounds):
            with tempfile.TemporaryDirectory() as folder:
                url, locations = fresh(url_for, folder, consumer=False)
                race = lw.race(url, locations, folder, seconds=300, barriers=args.barriers, readers=2,
                               unleased_readers=1, keep_barriers=2, unsafe=args.unsafe, interval=0.05, seed=i)
            with tempfile.TemporaryDirectory() as folder:
                url, locations = fresh(url_for, folder, consumer=True)
                consumer = lw.race(url, locations, folder, seconds=300, barriers=max(1, args.barriers // 2), readers=0,
                                   unleased_readers=0, consumer=True, keep_barriers=1, unsafe=args.unsafe,
                                   interval=0.05, seed=i)
            with tempfile.TemporaryDirectory() as folder:
                url, locations = fresh(url_for, folder, consumer=False)
                store = MetaStore(url)
                lw.write_barrier(store, locations)
                forced = lw.forced_order(url, locations, folder, unsafe=args.unsafe, barrier=1)
                store.dispose()
            round_counts = dict.fromkeys(KEYS, 0)
            for counts in (race, consumer):
                for key in KEYS:
                    round_counts[key] += int(counts.get(key, 0))
            round_counts["leases"] += int(forced["granted"])
            round_counts["forced_lost"] += forced["lost"]
            round_counts["lost"] += forced["lost"]
            for key in KEYS:
                totals[key] += round_counts[key]
            print(f"round {i + 1}: " + " ".join(f"{k}={round_counts[k]}" for k in KEYS), flush=True)
    finally:
        if server is not None:
            server.stop()
    print(f"backend={'postgresql' if args.postgres else 'sqlite'} unsafe={args.unsafe} rounds={args.rounds} "
          f"barriers_per_race={args.barriers} wall_s={time.monotonic() - started:.0f}")
    report("lease_races", **{k: totals[k] for k in KEYS})


def data_files(location: str) -> tuple[int, int]:
    """(Parquet files, bytes) under ``location`` (the Delta log excluded)."""
    count = size = 0
    for root, _, names in os.walk(location):
        if "_delta_log" in root:
            continue
        for name in names:
            if name.endswith(".parquet"):
                count += 1
                size += os.path.getsize(os.path.join(root, name))
    return count, size


def fast_writer(url_for: Callable[[str], str], args: argparse.Namespace) -> None:
    """One race with a writer committing back to back; prints the samples and the last line."""
    with tempfile.TemporaryDirectory() as folder:
        url, locations = fresh(url_for, folder, consumer=False)
        result: dict[str, dict[str, int]] = {}
        worker = threading.Thread(target=lambda: result.setdefault("race", lw.race(
            url, locations, folder, seconds=args.fast_writer, readers=2, unleased_readers=1, keep_barriers=args.keep,
            interval=0.0, expiry_pause=args.expiry_every)))
        started = time.monotonic()
        worker.start()
        samples = []
        while worker.is_alive():
            worker.join(5.0)
            samples.append(data_files(locations[lw.SNAP]))
            print(f"t={time.monotonic() - started:.0f}s files={samples[-1][0]} bytes={samples[-1][1]}", flush=True)
        counts = result["race"]
        log_files = len(list_log(locations[lw.SNAP]).commits)
    print(f"seconds={args.fast_writer:.0f} keep={args.keep} "
          f"expiry_every_s={args.expiry_every:g} backend={'postgresql' if args.postgres else 'sqlite'}")
    report("lease_races", barriers=counts.get("barriers", 0),
           barriers_per_s=round(counts.get("barriers", 0) / args.fast_writer, 1),
           cycles=counts.get("expiry_cycles", 0), failed=counts.get("failed", 0), lost=counts.get("lost", 0),
           files_max=max(n for n, _ in samples), files_last=samples[-1][0], bytes_last=samples[-1][1],
           log_files_last=log_files, log_removed=counts.get("removed_log_files", 0))


if __name__ == "__main__":
    main()
