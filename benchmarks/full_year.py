"""All of 2013 (336,776 flights, one barrier per day) through the three flights jobs.

Three arms, each on its own copy of the root tables (the same days, the same commits) and its
own metastore, every job its own ``spark-submit`` (built by ``TsbSparkJobOperator`` for tsb):

* ``batch``: the 365 barriers are generated first; then a catch-up in batch mode, one
  ``spark-submit`` per job processing every pending barrier, job after job;
* ``streaming``: the same barriers, the three jobs as streaming queries started at once
  (pipelining: job 2 on barrier n while job 1 is on n+1), stopping on their own after the
  final barrier (end of input, FLIP-147);
* ``plain``: ``benchmarks/plain.py``, the same ``process()`` functions over the same epochs
  with the same write path and no barrier bookkeeping, one ``spark-submit`` per job.

Wall times include each ``spark-submit``'s start-up. Checks the FLIP-276 invariants at
REPEATABLE_READ at the last barrier of both tsb arms and that the plain arm's ranking has the
same rows. Last line:

    seconds=<batch catch-up> streaming_seconds=<s> barriers=<n> ratio=<batch/plain> load=<1-min load>

    .venv/bin/python -m benchmarks.full_year [--days 365] [--arms batch,streaming,plain] [--engine submit|connect]
        [--warmup-days N] [--order interleaved|sequential] [--chunk-days N] [--keep DIR] [--remote URL]

``--engine connect`` runs every arm's jobs (``plain.py`` included) as Spark Connect clients of
one server (``--remote``, or a local one started for the run): no JVM start per job. The arms
then share one JVM, which compiles Spark's and the server's hot code as they run: on a fresh
server the flights jobs' first barriers take 2-4 times as long as after 60 barriers, so the
arm that ran first paid the whole warm-up (tsb's batch arm, against a plain arm that ran on a
warm server). ``--warmup-days`` (default 60 on Connect) first runs the batch and the plain arm
over that many days on throwaway copies, untimed. With ``spark-submit`` every job starts its
own JVM in every arm, so no warm-up is needed (default 0).

Even after the warm-up, the arm that ran second was the faster on Connect (its ``spark`` phase
20-30 ms a barrier shorter per job, 2026-11-27): the server keeps warming through a year, and of two runs of one
job the second is the faster. So by default (``--order interleaved``) the batch and plain arms
run in turns of ``--chunk-days`` barriers of one job (61 on Connect: six turns a job, each turn a
process of each arm; 0: one turn per job), the arm that goes first alternating turn by turn
(ABBA), each arm's seconds the sum of its turns', as ``barrier_overhead`` alternates its
pairs; ``--order sequential`` runs each arm whole in the order ``--arms`` gives. The streaming
arm always runs whole. Every job, the plain arm's included, logs a ``tsb-timing`` line per
barrier in ``<keep>/<arm>/logs``, to compare the arms phase by phase.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.flights_bench import JOBS, SINKS, FlightsBench, check_invariants, engine_server
from benchmarks.harness import parser, report

#: the plain arm's ``spark-submit`` application (run as a file: :mod:`benchmarks.plain`)
PLAIN = Path(__file__).resolve().parent / "plain.py"
TIMEOUT_S = 3 * 3600


def prepare(root: Path, days: list[dt.date], engine: str = "submit", remote: str | None = None) -> FlightsBench:
    """A topology with one barrier per day ingested (the streaming input, already arrived); its
    jobs run on ``engine`` (a client of ``remote`` for ``connect``)."""
    bench = FlightsBench(root, engine=engine, remote=remote)
    for day in days:
        bench.ingest_day(day)
        bench.generate()
    bench.end_input()
    bench.generate(final=True)
    return bench


def run_batch(bench: FlightsBench) -> float:
    return sum(batch_job(bench, job_id) for job_id in JOBS)


def batch_job(bench: FlightsBench, job_id: str, until: int | None = None) -> float:
    """Seconds of one tsb job's batch catch-up of every pending barrier (up to ``until``)."""
    start = time.monotonic()
    bench.launch(job_id, "batch", bench.root / "logs", until_barrier=until).wait(TIMEOUT_S)
    return time.monotonic() - start


def run_streaming(bench: FlightsBench) -> float:
    start = time.monotonic()
    since = int(time.time() * 1000) - 3600_000  # the final barrier was generated before the jobs start
    procs = [bench.launch(j, "streaming", bench.root / "logs", final_since_ms=since) for j in JOBS]
    for p in procs:
        p.wait(TIMEOUT_S)
    return time.monotonic() - start


def run_plain(bench: FlightsBench) -> float:
    """``plain.py`` per job over the epochs of ``bench``'s barriers (not counting the final one)."""
    return sum(plain_job(bench, job_id) for job_id in JOBS)


def plain_job(bench: FlightsBench, job_id: str, barriers: tuple[int, int] | None = None) -> float:
    """Seconds of ``plain.py`` running one job over the epochs of ``bench``'s barriers (those
    from ``barriers[0]`` to ``barriers[1]`` when given)."""
    epochs = bench.root / "epochs.json"
    if not epochs.exists():
        infos = [b for b in bench.store.barriers.list(bench.topology.name, limit=100_000,
                                                          ascending=True) if not b.final]
        epochs.write_text(json.dumps({"barriers": [{"barrier": b.barrier, "ts": b.ts_ms, "roots": b.root_versions}
                                                   for b in infos]}))
    (bench.root / "logs").mkdir(parents=True, exist_ok=True)
    argv, env = bench.command(job_id, "batch")
    job = bench.topology.jobs[job_id]
    app_at = _app_index(argv)
    tables = [f"--table={n}={bench.location(n)}" for n in (*job.sources, *job.sinks)]
    argv = [*argv[:app_at], str(PLAIN), "--script", argv[app_at], "--epochs", str(epochs), *tables]
    if barriers is not None:
        argv += ["--barriers", f"{barriers[0]}:{barriers[1]}"]
    start = time.monotonic()
    with (bench.root / "logs" / f"plain-{job_id}.log").open("ab") as log:
        rc = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=TIMEOUT_S).returncode
    if rc != 0:
        raise RuntimeError(f"plain {job_id} exited with {rc}; log {log.name}")
    return time.monotonic() - start


def run_interleaved(batch: FlightsBench, plain: FlightsBench, days: int, chunk: int) -> dict[str, float]:
    """The batch and plain arms in turns of ``chunk`` barriers of one job (each turn a process
    of each arm), the arm that goes first alternating turn by turn and from one job's first turn
    to the next's (ABBA), after the ingested days are flushed to disk: on one Connect server
    each stretch of a job runs next to the same stretch of the other arm, so the server's
    warming through the year and the advantage of running second fall on both arms alike.
    ``chunk`` >= ``days``: one turn per job. The tsb arm's last turn takes the final barrier.
    Returns each arm's seconds, the sum of its turns'."""
    seconds = {"batch": 0.0, "plain": 0.0}
    os.sync()  # the arms' ingested days written out now, not by the kernel during the first turn
    for index, job_id in enumerate(JOBS):
        # each job starts with the arm the previous job started second with: a job's first
        # turn (new query shapes after another job's) was the slow one for the arm going first
        turn = index
        for first in range(1, days + 1, chunk):
            last = min(first + chunk - 1, days)
            runners = {"batch": lambda j=job_id, n=last: batch_job(batch, j, None if n == days else n),
                       "plain": lambda j=job_id, a=first, b=last: plain_job(plain, j, (a, b))}
            spent = {}
            for arm in (("batch", "plain") if turn % 2 == 0 else ("plain", "batch")):
                spent[arm] = runners[arm]()
                seconds[arm] += spent[arm]
            print(f"  {job_id} barriers {first}-{last}: batch {spent['batch']:.1f} s, plain {spent['plain']:.1f} s "
                  f"({'batch' if turn % 2 == 0 else 'plain'} first)", flush=True)
            turn += 1
    return seconds


def _app_index(argv: list[str]) -> int:
    """Where the application (the first ``.py``) is in a ``spark-submit`` command line."""
    return next(i for i, a in enumerate(argv) if a.endswith(".py"))


def main() -> int:
    options = parser(__doc__, keep=True, remote=True, engine="submit")
    options.add_argument("--days", type=int, default=365, help="2013 days, one barrier each (1..365)")
    options.add_argument("--arms", default="batch,streaming,plain")
    options.add_argument("--order", choices=("interleaved", "sequential"), default="interleaved",
                         help="interleaved (default): the batch and plain arms job by job, ABBA; sequential: "
                              "each arm whole, in the order --arms gives")
    options.add_argument("--chunk-days", type=int, default=None,
                         help="interleaved: barriers per turn of a job (default 61 with --engine connect: six "
                              "turns a job; 0: one turn per job)")
    options.add_argument("--warmup-days", type=int, default=None,
                         help="untimed batch and plain runs over this many days first, each on its own copy "
                              "(default 60 with --engine connect, 0 with submit)")
    args = options.parse_args()
    if not 1 <= args.days <= 365:
        options.error("--days must be 1..365")
    if args.chunk_days is None:
        args.chunk_days = 61 if args.engine == "connect" else 0
    if args.chunk_days < 0:
        options.error("--chunk-days must be >= 0")
    if args.warmup_days is None:
        args.warmup_days = 60 if args.engine == "connect" else 0
    if not 0 <= args.warmup_days <= 365:
        options.error("--warmup-days must be 0..365")
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tsb-year-"))
    with engine_server(args.engine, args.remote, base) as remote:
        return run_arms(args, base, remote)


def run_arms(args: argparse.Namespace, base: Path, remote: str | None) -> int:
    """Run the arms of ``args`` under ``base``; the exit code (1 when a check failed)."""
    arms = args.arms.split(",")
    from tsb_examples.datasets import nycflights13 as nyc

    days = nyc.days(dt.date(2013, 1, 1), args.days)
    if args.warmup_days:
        warm = nyc.days(dt.date(2013, 1, 1), args.warmup_days)
        for arm, runner in (("batch", run_batch), ("plain", run_plain)):
            spent = runner(prepare(base / "warmup" / arm, warm, args.engine, remote))
            print(f"warm-up {arm}: {len(warm)} days in {spent:.1f} s (not counted)", flush=True)
    seconds: dict[str, float] = {}
    benches: dict[str, FlightsBench] = {}
    interleave = args.order == "interleaved" and {"batch", "plain"} <= set(arms)
    for arm in arms:
        t0 = time.monotonic()
        benches[arm] = bench = prepare(base / arm, days, args.engine, remote)
        flights = sum(nyc.flights_of_day(d).num_rows for d in days)
        print(f"{arm}: {len(days)} days ({flights:,} flights) ingested, {len(days)} barriers + a final one "
              f"generated in {time.monotonic() - t0:.0f} s", flush=True)
        if interleave and arm in ("batch", "plain"):
            if {"batch", "plain"} <= set(benches):
                seconds.update(run_interleaved(benches["batch"], benches["plain"], len(days),
                                               args.chunk_days or len(days)))
                print(f"batch: {seconds['batch']:.1f} s, plain: {seconds['plain']:.1f} s (interleaved)", flush=True)
            continue
        runner = {"batch": run_batch, "streaming": run_streaming, "plain": run_plain}[arm]
        seconds[arm] = runner(bench)
        print(f"{arm}: {seconds[arm]:.1f} s", flush=True)

    last = len(days)
    ok = True
    for arm in ("batch", "streaming"):
        if arm in benches:
            checks = check_invariants(benches[arm], last)
            newest = benches[arm].store.table_states.newest_written
            heads = {s: (h.barrier if (h := newest(s)) else None) for s in SINKS}
            good = all(checks.values()) and all(h == last + 1 for h in heads.values())
            ok = ok and good
            print(f"{arm}: invariants at REPEATABLE_READ at barrier {last}: {checks}; final barrier in every "
                  f"sink: {heads}")
    if "plain" in benches and "batch" in benches:
        from deltalake import DeltaTable

        def rows(bench: FlightsBench, version: int | None) -> list:
            loc = bench.location("flights.carrier_ranking")
            return sorted(DeltaTable(loc, version=version).to_pyarrow_table().to_pylist(), key=repr)

        same = rows(benches["plain"], None) == rows(benches["batch"], benches["batch"].store.table_states.version_at(
            "tsb.flights.carrier_ranking", last))
        ok = ok and same
        print(f"plain carrier_ranking == tsb carrier_ranking at barrier {last}: {same}")
    print(f"(tables and logs in {base})")
    figures = {"seconds": round(seconds.get("batch", float("nan")), 1),
               "streaming_seconds": round(seconds.get("streaming", float("nan")), 1), "barriers": len(days)}
    if "plain" in seconds and "batch" in seconds:
        figures["ratio"] = round(seconds["batch"] / seconds["plain"], 3)
    report("full_year", **figures)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
