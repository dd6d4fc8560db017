"""Sustained barrier rate of a streaming topology (issue 25 item 1).

A chain of ``--jobs`` wordcount-sized streaming jobs (``benchmarks/apps/scale_stage.py``: each
appends the rows its source gained in the barrier's epoch to its sink; a micro-batch of several
barriers is one scan, its ``process_micro_batch``, unless ``--no-micro-batch``), each the process the
operator starts, as Spark Connect clients of one local server (``--engine submit``: a
``spark-submit`` each), with the metastore on a throwaway PostgreSQL (``--sqlite``: SQLite).
For ``--seconds`` seconds, barriers are generated as fast as the topology commits them: a few
rows are appended to the root table and a barrier generated whenever fewer than
``--max-in-flight`` barriers are generated but not yet COMMIT (the emitter's backpressure).
With ``--ingest-process`` a writer process of its own appends the rows, up to two commits ahead
of the generator, as the ingest task runs beside the emitter in production (on 2 cores it
costs more than it overlaps: 3.59 barriers/s against 5.16 in the generating loop).
With ``--emitter`` the barriers come from the production emitter instead
(:class:`EmitterProcess`: ``TsbBarrierHook.emit``, the loop ``TsbBarrierEmitterOperator`` runs,
in a process of its own, checking every ``--emit-interval`` seconds) and the root from the
ingest process: the path a deployed streaming topology runs, its own checks included.
Meanwhile snapshot expiry runs every ``--expiry-every`` seconds on every table, in a process of
its own as a ``TsbExpireOperator`` task would, keeping the last ``--keep`` barriers plus leases,
and counts failed cycles.

Figures: ``cpu_cores`` (:class:`CpuShares`: the cores each role used in the window),
``barriers_per_s`` (barriers COMMIT in the window / seconds), ``generate_p99_ms`` (one
barrier's generation: root versions, tag checks, barrier log, metastore), ``commit_lag_p99_s``
(generation to WRITTEN in every sink), ``expiry_failed``. The baseline line is the generation
alone (``generate_only_p99_ms``: the same bookkeeping with no job running, as fast as it goes),
so ``bookkeeping_share`` = generation time / time per committed barrier says whether the rate
is bounded by the jobs or by the bookkeeping. The FLIP-276 invariant (every sink holds the
root's rows) is checked at REPEATABLE_READ at the end; ``sink_files_max`` is the most live data
files a sink holds then (an ``append`` sink gains a file per barrier unless ``--compaction``).
Last line: ``barriers_per_s= generate_p99_ms= commit_lag_p99_s= expiry_failed= load=``.

    .venv/bin/python -m benchmarks.barrier_rate [--seconds 600] [--jobs 2] [--rows 100]
        [--max-in-flight 4] [--max-barriers-per-trigger 16] [--sqlite] [--engine connect|submit]
        [--compaction MIN_FILES] [--no-micro-batch] [--ingest-process] [--emitter [--emit-interval 0.02]]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.flights_bench import FlightsBench, check_alive, engine_server, wait_committed
from benchmarks.harness import load, median, parser, percentile, report
from benchmarks.topology_scale import ROOT, append_root, build_topology, e2e_delays, invariants_hold, shape_edges

#: seconds between the harness's checks for room in flight (three metastore queries each; the
#: emitter checks once per ``interval_s``): every 5 ms, the checks took about half of the harness
#: process's samples (py-spy) while it shares the 2 cores with the jobs it measures
ROOM_POLL_S = 0.025


class ExpiryLoop:
    """Snapshot expiry of every table every ``every_s`` seconds, in a process of its own (as
    production runs it: ``TsbExpireOperator`` in a worker, never in the emitter's process, so it
    does not hold the generating process's GIL); counts cycles and failures."""

    def __init__(self, url: str, tables: list[str], keep: int, every_s: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._done, self._results = ctx.Event(), ctx.Queue()
        self._process = ctx.Process(
            target=_expiry_loop, args=(url, tables, keep, every_s, self._done, self._results), daemon=True)
        self.cycles = self.failed = self.removed = 0
        self.errors: list[str] = []

    def start(self) -> None:
        self._process.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def stop(self) -> None:
        """Stop after the running cycle and read its counts."""
        self._done.set()
        self.cycles, self.failed, self.removed, self.errors = self._results.get(timeout=600)
        self._process.join(60)


def _expiry_loop(url: str, tables: list[str], keep: int, every_s: float, done: Any, results: Any) -> None:
    """The expiry process's loop (:class:`ExpiryLoop`); puts ``(cycles, failed, removed, errors)``."""
    from airflow_provider_tsb.maintenance.expiry import expire_snapshots
    from airflow_provider_tsb.metastore.store import MetaStore

    store = MetaStore(url)
    cycles = failed = removed = 0
    errors: list[str] = []
    while not done.wait(every_s):
        for table in tables:
            cycles += 1
            try:
                removed += expire_snapshots(store, table, keep)["removed_files"]
            except Exception as exc:  # counted and reported: the figure is how many fail
                failed += 1
                errors.append(f"{table}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    store.dispose()
    results.put((cycles, failed, removed, errors))


class IngestLoop:
    """The root table's writer in a process of its own, as production has it (the flights DAG's
    ingest task runs beside the emitter, not inside it): it appends ``rows`` rows whenever fewer
    than ``ahead`` of its commits wait for a barrier, so the generator finds a new root version
    ready instead of writing it itself between two generations."""

    def __init__(self, location: str, rows: int, start_id: int, hour: int, ahead: int, compaction: Any = None) -> None:
        ctx = multiprocessing.get_context("spawn")
        #: the root's newest version (the writer's), and the root version of the newest barrier
        self.root_version, self.consumed = ctx.Value("q", -1), ctx.Value("q", -1)
        self._done, self._ended = ctx.Event(), ctx.Queue()
        self._process = ctx.Process(target=_ingest_loop, daemon=True, args=(
            location, rows, start_id, hour, ahead, compaction, self.root_version, self.consumed, self._done,
            self._ended))
        self.commits = 0

    def start(self, root_version: int, consumed: int) -> None:
        self.root_version.value, self.consumed.value = root_version, consumed
        self._process.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def ready(self) -> bool:
        """True when the root has a commit no barrier covers yet."""
        return self.root_version.value > self.consumed.value

    def stop(self) -> tuple[int, int]:
        """Stop after the running append; ``(next id, next hour)`` for later appends."""
        self._done.set()
        next_id, hour, self.commits = self._ended.get(timeout=120)
        self._process.join(60)
        return next_id, hour


def _ingest_loop(location: str, rows: int, next_id: int, hour: int, ahead: int, compaction: Any, root_version: Any,
                 consumed: Any, done: Any, ended: Any) -> None:
    """The writer process of :class:`IngestLoop`; puts ``(next id, next hour, commits)``."""
    from types import SimpleNamespace

    bench = SimpleNamespace(location=lambda _table: location)
    commits = 0
    while not done.is_set():
        if root_version.value - consumed.value >= ahead:
            time.sleep(0.002)
            continue
        root_version.value = append_root(bench, next_id, rows, hour, compaction)  # type: ignore[arg-type]
        next_id, hour, commits = next_id + rows, hour + 1, commits + 1
    ended.put((next_id, hour, commits))


class EmitterProcess:
    """The production emitter (``--emitter``): :meth:`TsbBarrierHook.emit`, the loop of
    ``TsbBarrierEmitterOperator.execute``, in a process of its own as a worker runs the task, for
    ``seconds``, every ``interval_s``, with ``max_in_flight``; its own checks (root versions, end
    of input, latest barrier, room in flight) each interval. Each generation is timed, and the
    root version it covered is handed to the :class:`IngestLoop` (``consumed``)."""

    def __init__(self, url: str, warehouse: Path, jobs: int, seconds: float, interval_s: float, max_in_flight: int,
                 consumed: Any) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._results = ctx.Queue()
        self._process = ctx.Process(target=_emitter_loop, daemon=True, args=(
            url, str(warehouse), jobs, seconds, interval_s, max_in_flight, consumed, self._results))

    def start(self) -> None:
        self._process.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def result(self, timeout_s: float) -> tuple[list[int], list[float]]:
        """``(barrier ids emitted, ms per generation)`` once the emitter returned.

        Raises:
            RuntimeError: the emitter's process ended without them (its traceback is above).
        """
        import queue

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                out = self._results.get(timeout=1.0)
            except queue.Empty:
                if not self._process.is_alive():
                    raise RuntimeError(f"the emitter process failed (exit code {self._process.exitcode})") from None
                continue
            self._process.join(60)
            return out
        raise RuntimeError(f"the emitter did not return within {timeout_s:.0f} s")


def _emitter_loop(url: str, warehouse: str, jobs: int, seconds: float, interval_s: float, max_in_flight: int,
                  consumed: Any, results: Any) -> None:
    """The process of :class:`EmitterProcess`; puts ``(barrier ids, ms per generation)``."""
    os.environ["TSB_METASTORE_URL"] = url  # the hook's metastore (TsbMetastoreHook's first choice)
    from airflow_provider_tsb.hooks.barrier import TsbBarrierHook

    topology, _ = build_topology("rate_chain", "chain", jobs, Path(warehouse))
    gen_ms: list[float] = []

    class TimedHook(TsbBarrierHook):
        def generate_at(self, store: Any, versions: dict[str, int], run_key: str, *, final: bool = False) -> Any:
            tick = time.perf_counter()
            info = super().generate_at(store, versions, run_key, final=final)
            gen_ms.append((time.perf_counter() - tick) * 1000)
            if info is not None:
                consumed.value = max(versions.values())  # the one root
            return info

    hook = TimedHook(topology, ts_kind="event")
    emitted = hook.emit("bench/emitter", interval_s=interval_s, duration_s=seconds, max_in_flight=max_in_flight,
                        final_on_stop=False)
    results.put((emitted, gen_ms))


class CpuShares:
    """CPU time of the run's processes by role over the measured window, in cores (CPU seconds
    per second): where the 2 cores go. Roles: ``harness`` (this process: the generator unless
    ``--emitter``, and the root's writer unless ``--ingest-process`` or ``--emitter``), ``emitter``,
    ``ingest``, ``expiry``, ``jobs`` (the jobs'
    processes and their children), ``spark`` (the Connect server's JVM and its Python workers),
    ``postgres``, ``other`` (the rest of the machine)."""

    def __init__(self, roles: dict[int, str]) -> None:
        self._roles = roles
        self._start: dict[int, tuple[str, float]] = {}
        self._tick = 0.0

    def _sample(self) -> dict[int, tuple[str, float]]:
        import psutil

        out = {}
        for proc in psutil.process_iter(["pid", "ppid", "name", "cmdline", "cpu_times"]):
            info = proc.info
            if info["cpu_times"] is None:
                continue
            out[info["pid"]] = (self._role(info), info["cpu_times"].user + info["cpu_times"].system)
        return out

    def _role(self, info: dict[str, Any]) -> str:
        import psutil

        cmd = " ".join(info["cmdline"] or [])
        if info["name"] == "postgres" or cmd.startswith("postgres"):
            return "postgres"
        if "SparkConnectServer" in cmd or "pyspark.daemon" in cmd or "pyspark/daemon" in cmd:
            return "spark"
        pid = info["pid"]
        while pid:  # a process of a known role, or its descendant
            if pid in self._roles:
                return self._roles[pid]
            try:
                pid = psutil.Process(pid).ppid()
            except psutil.Error:
                break
        return "other"

    def start(self) -> None:
        self._start, self._tick = self._sample(), time.monotonic()

    def line(self) -> str:
        """``cpu_cores harness=.. emitter=.. ingest=.. expiry=.. jobs=.. spark=.. postgres=.. other=.. total=..``."""
        end, seconds = self._sample(), time.monotonic() - self._tick
        cores = dict.fromkeys(["harness", "emitter", "ingest", "expiry", "jobs", "spark", "postgres", "other"], 0.0)
        for pid, (role, cpu) in end.items():
            cores[role] += (cpu - self._start.get(pid, (role, 0.0))[1]) / seconds
        return "cpu_cores " + " ".join(f"{k}={v:.2f}" for k, v in cores.items()) + f" total={sum(cores.values()):.2f}"


def generate_only(bench: FlightsBench, rows: int, count: int, start_id: int, hour: int,
                  compaction: Any = None) -> list[float]:
    """The baseline: ``count`` appends and generations with no job running; ms per generation."""
    times = []
    for _ in range(count):
        append_root(bench, start_id, rows, hour, compaction)
        start_id, hour = start_id + rows, hour + 1
        tick = time.perf_counter()
        bench.generate()
        times.append((time.perf_counter() - tick) * 1000)
    return times


def root_compaction_of(args: argparse.Namespace) -> Any:
    """The root's auto compaction: ``--compaction`` files, as the sinks' (``None`` without it)."""
    from airflow_provider_tsb.delta.compaction import Compaction

    return Compaction(min_files=args.compaction) if args.compaction else None


def metastore_url(args: argparse.Namespace, root: Path) -> tuple[str, object | None]:
    """The metastore URL and the PostgreSQL server to stop (``None`` for SQLite)."""
    if args.sqlite:
        return f"sqlite:///{root / 'tsb.db'}", None
    from dev.pg import start_postgres

    server = start_postgres()
    return server.create_database("barrier_rate"), server


def run(args: argparse.Namespace, root: Path, remote: str | None) -> tuple[list[str], dict[str, Any]]:
    """The measured run (module doc); its lines and the figures of its result line."""
    url, server = metastore_url(args, root)
    try:
        return _measure(args, root, remote, url)
    finally:
        if server is not None:
            server.stop()


def _harness_loop(args: argparse.Namespace, bench: FlightsBench, procs: list[Any], ingest: IngestLoop | None,
                  next_id: int, hour: int, root_compaction: Any, started: float
                  ) -> tuple[list[int], list[float], list[float], int, int]:
    """Barriers generated by this process for ``--seconds`` whenever there is room in flight,
    each after an append to the root (or once the ingest process has one ready); ``(barrier
    ids, ms per generation, ms per append, next row id, next hour)``."""
    generated, gen_ms, append_ms = [], [], []
    room = 0  # barriers that may still be generated before in flight is read again
    while time.monotonic() - started < args.seconds:
        if room <= 0:  # in flight only grows by what this loop generates: read it when the room is used up
            room = args.max_in_flight - bench.in_flight()
            if room <= 0:
                check_alive(procs)
                time.sleep(ROOM_POLL_S)
                continue
        if ingest is None:
            tick = time.perf_counter()
            append_root(bench, next_id, args.rows, hour, root_compaction)
            append_ms.append((time.perf_counter() - tick) * 1000)
            next_id, hour = next_id + args.rows, hour + 1
        elif not ingest.ready():
            time.sleep(0.002)
            continue
        tick = time.perf_counter()
        info = bench.generate()
        gen_ms.append((time.perf_counter() - tick) * 1000)
        generated.append(info.barrier)
        room -= 1
        if ingest is not None:
            ingest.consumed.value = max(info.root_versions.values())  # the one root
    return generated, gen_ms, append_ms, next_id, hour


def _measure(args: argparse.Namespace, root: Path, remote: str | None, url: str) -> tuple[list[str], dict[str, Any]]:
    topology, env = build_topology("rate_chain", "chain", args.jobs, root / "warehouse")
    sinks = tuple(sink for _, sink in shape_edges("chain", args.jobs).values())
    bench = FlightsBench(root, engine=args.engine, remote=remote, topology=topology, sinks=sinks, url=url)
    next_id, hour = 0, 0
    root_compaction = root_compaction_of(args)
    append_root(bench, next_id, args.rows, hour, root_compaction)
    next_id, hour = next_id + args.rows, hour + 1
    warm = bench.generate()
    warm_up, warm_root = warm.barrier, max(warm.root_versions.values())
    if args.compaction:
        env = {j: {**e, "TSB_SCALE_COMPACTION": str(args.compaction)} for j, e in env.items()}
    if args.no_micro_batch:
        env = {j: {**e, "TSB_SCALE_MICRO_BATCH": "0"} for j, e in env.items()}
    procs = [bench.launch(j, "streaming", root / "logs", final_since_ms=int(time.time() * 1000), env_vars=env[j],
                          trigger_interval_s=0.05, max_barriers_per_trigger=args.max_barriers_per_trigger)
             for j in env]
    expiry = ExpiryLoop(url, [ROOT, *sinks], args.keep, args.expiry_every)
    try:
        wait_committed(bench, procs, warm_up, timeout_s=900)
        print(f"warm-up barrier {warm_up} COMMIT; {len(procs)} jobs streaming", flush=True)
        expiry.start()
        ingest = (IngestLoop(bench.location(ROOT), args.rows, next_id, hour, 2, root_compaction)
                  if args.ingest_process or args.emitter else None)
        emitter = (EmitterProcess(url, root / "warehouse", args.jobs, args.seconds, args.emit_interval,
                                  args.max_in_flight, ingest.consumed) if args.emitter and ingest is not None else None)
        if ingest is not None:
            ingest.start(root_version=warm_root, consumed=warm_root)
        if emitter is not None:
            emitter.start()
        roles = {os.getpid(): "harness", expiry.pid: "expiry", **{p.process.pid: "jobs" for p in procs}}
        roles.update({x.pid: name for name, x in (("ingest", ingest), ("emitter", emitter)) if x is not None})
        cpu = CpuShares(roles)
        cpu.start()
        started = time.monotonic()
        if emitter is not None:
            time.sleep(max(args.seconds - 1.0, 0.0))
            cpu_line = cpu.line()  # before the emitter's process ends and its CPU times with it
            generated, gen_ms = emitter.result(timeout_s=args.seconds + 300)
            append_ms: list[float] = []
        else:
            generated, gen_ms, append_ms, next_id, hour = _harness_loop(
                args, bench, procs, ingest, next_id, hour, root_compaction, started)
            cpu_line = cpu.line()
        window = time.monotonic() - started
        if ingest is not None:
            next_id, hour = ingest.stop()
            print(f"ingest: {ingest.commits} root commits in {len(generated)} barriers", flush=True)
        committed = [b for b in generated if bench.committed(b)]
        wait_committed(bench, procs, generated[-1], timeout_s=900)
        expiry.stop()
        from airflow_provider_tsb.delta.roots import mark_end_of_input

        mark_end_of_input(bench.location(ROOT))
        final = bench.generate(final=True).barrier
        for p in procs:
            p.wait(timeout_s=600)
    finally:
        for p in procs:
            if p.process.poll() is None:
                p.process.kill()
    lags = e2e_delays(bench, generated)
    baseline = generate_only(bench, args.rows, 50, next_id + 10**6, hour + 10**4, root_compaction)
    ok = invariants_hold(bench, "chain", args.jobs, final)
    from deltalake import DeltaTable

    sink_files = max(DeltaTable(bench.location(sink)).get_add_actions().num_rows for sink in sinks)
    rate = len(committed) / window
    share = (sum(gen_ms) / len(gen_ms) / 1000) * rate
    if expiry.errors:
        print("expiry errors:", *expiry.errors[:5], sep="\n  ")
    backend = "sqlite" if args.sqlite else "postgresql"
    figures = {"barriers_per_s": round(rate, 2), "generate_p99_ms": round(percentile(gen_ms, 99), 1),
               "commit_lag_p99_s": round(percentile(lags, 99), 2), "expiry_failed": expiry.failed, "load": load()}
    return [
        f"engine={args.engine} jobs={args.jobs} rows={args.rows} "
        f"max_in_flight={args.max_in_flight} max_barriers_per_trigger={args.max_barriers_per_trigger} "
        f"compaction={args.compaction} micro_batch={'off' if args.no_micro_batch else 'on'} "
        f"ingest={'process' if args.ingest_process or args.emitter else 'serial'} "
        f"generator={f'emitter(interval_s={args.emit_interval})' if args.emitter else 'harness'} "
        f"sink_files_max={sink_files} "
        f"seconds={window:.0f} metastore={backend} "
        f"expiry_cycles={expiry.cycles} expiry_removed_files={expiry.removed} invariants={'ok' if ok else 'FAILED'}",
        cpu_line,
        f"baseline: generate_only_median_ms={median(baseline):.1f} "
        f"generate_only_p99_ms={percentile(baseline, 99):.1f} "
        f"bookkeeping_share={share:.2f} commit_lag_median_s={median(lags):.2f} "
        f"generate_median_ms={median(gen_ms):.1f} root_append_median_ms={median(append_ms or [0.0]):.1f} "
        f"root_append_p99_ms={percentile(append_ms or [0.0], 99):.1f}",
    ], figures


def chain_parser(description: str | None) -> argparse.ArgumentParser:
    """The harness's parser with the options of the chain shared with ``catch_up``: ``--engine``
    (default ``connect``), ``--sqlite``, ``--jobs``, ``--rows`` and ``--max-barriers-per-trigger``."""
    options = parser(description, engine="connect", sqlite=True)
    options.add_argument("--jobs", type=int, default=2, help="jobs in the chain")
    options.add_argument("--rows", type=int, default=100, help="rows appended to the root per barrier")
    options.add_argument("--max-barriers-per-trigger", type=int, default=16,
                         help="ready barriers a job's micro-batch takes at most (1: a micro-batch per barrier)")
    return options


def main() -> int:
    options = chain_parser(__doc__)
    options.add_argument("--seconds", type=float, default=600.0, help="length of the measured window")
    options.add_argument("--max-in-flight", type=int, default=4, help="barriers generated but not COMMIT, at most")
    options.add_argument("--expiry-every", type=float, default=10.0, help="seconds between expiry cycles")
    options.add_argument("--keep", type=int, default=100, help="barriers expiry keeps")
    options.add_argument("--ingest-process", action="store_true",
                         help="append to the root in a writer process of its own, up to two commits ahead of the "
                              "generator, instead of in the generating loop before each generation")
    options.add_argument("--emitter", action="store_true",
                         help="generate with the production emitter (TsbBarrierHook.emit, the loop of "
                              "TsbBarrierEmitterOperator) in a process of its own, the root written by the ingest "
                              "process, instead of this harness's loop")
    options.add_argument("--emit-interval", type=float, default=0.02,
                         help="--emitter: seconds between the emitter's checks (its interval_s)")
    options.add_argument("--no-micro-batch", action="store_true",
                         help="the stages without process_micro_batch: a plan per barrier of a micro-batch")
    options.add_argument("--compaction", type=int, default=0, metavar="MIN_FILES",
                         help="auto compaction of every table at this many small files: the sinks' in their "
                              "barrier commits, the root's after its appends (default 0: off)")
    args = options.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    base = Path(tempfile.mkdtemp(prefix="tsb-rate-"))
    with engine_server(args.engine, None, base / args.engine) as remote:
        lines, figures = run(args, base / "run", remote)
    print(f"(tables and logs in {base})")
    for line in lines:
        print(line)
    report("barrier_rate", **figures)
    return 0 if "invariants=ok" in lines[0] else 1


if __name__ == "__main__":
    sys.exit(main())
