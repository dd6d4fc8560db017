"""Consistency checker: ``tsb check`` (FLIP-276 "Data Consistency Type", verified on real runs).

It runs the wordcount and flights topologies barrier by barrier (real Spark jobs, real Delta
tables, a real metastore) while readers query every consistency level -- concurrently from one
thread per level, and also at each step of the pipeline (after ingestion, after each job's
commit) -- and checks the topologies' invariants on what they read:

* wordcount: ``sum(word_count.cnt) == count(words)`` and ``sum(count_of_counts.cnt2) == count(word_count)``;
* flights: ``count(flights_enriched) == count(raw.flights)`` and
  ``sum(carrier_daily_delay.flights) == count(flights_enriched)``.

Expected: zero anomalies at READ_COMMITTED, REPEATABLE_READ and AS OF; some at
READ_UNCOMMITTED, which shows that the checker catches the inconsistencies the barriers prevent.

With ``--kill`` every job runs as its own ``spark-submit`` process with the
metastore catalog, as the operator starts it, and is SIGKILLed once per barrier at a kill point
(:mod:`airflow_provider_tsb.spark.killpoints`) and retried. After a kill at ``after_files`` a
READ_COMMITTED answer is resolved (it serves the dead attempt's staged files), the retry runs,
and only then is the answer read: the order in which a reader could meet a deleted file.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.exceptions import InconsistentReadError
from airflow_provider_tsb.read.resolutions import to_arrow
from airflow_provider_tsb.topology import Topology

if TYPE_CHECKING:  # pyarrow and the metastore (SQLAlchemy) are loaded by ``tsb check`` only, not ``tsb --help``
    import pyarrow as pa

    from airflow_provider_tsb.metastore.store import MetaStore

#: the levels a checker samples; ``AS_OF`` is time travel to a random COMMIT barrier
LEVELS = ("READ_UNCOMMITTED", "READ_COMMITTED", "REPEATABLE_READ", "AS_OF")

Check = Callable[[Mapping[str, "pa.Table"]], tuple[bool, str]]


@dataclass(frozen=True)
class Invariant:
    """A property that must hold over a consistent read of ``tables``.

    ``check`` takes ``{canonical table name: Arrow table}`` and returns (holds, description).
    """

    name: str
    tables: tuple[str, ...]
    check: Check


def _sum(table: pa.Table, column: str) -> int:
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return 0
    return int(pc.sum(table.column(column)).as_py() or 0)


def _equal(name: str, left: int, right: int) -> tuple[bool, str]:
    return left == right, f"{name}: {left} vs {right}"


WORDS, WORD_COUNT, COUNT_OF_COUNTS = "tsb.raw.words", "tsb.wordcount.word_count", "tsb.wordcount.count_of_counts"
FLIGHTS, ENRICHED, DAILY = "tsb.raw.flights", "tsb.flights.flights_enriched", "tsb.flights.carrier_daily_delay"

WORDCOUNT_INVARIANTS = (
    Invariant(
        "sum(word_count.cnt) == count(words)", (WORDS, WORD_COUNT),
        lambda t: _equal("sum(cnt) vs count(words)", _sum(t[WORD_COUNT], "cnt"), t[WORDS].num_rows),
    ),
    Invariant(
        "sum(count_of_counts.cnt2) == count(word_count)", (WORD_COUNT, COUNT_OF_COUNTS),
        lambda t: _equal("sum(cnt2) vs count(word_count)", _sum(t[COUNT_OF_COUNTS], "cnt2"), t[WORD_COUNT].num_rows),
    ),
)
FLIGHTS_INVARIANTS = (
    Invariant(
        "count(flights_enriched) == count(raw.flights)", (FLIGHTS, ENRICHED),
        lambda t: _equal("enriched vs flights", t[ENRICHED].num_rows, t[FLIGHTS].num_rows),
    ),
    Invariant(
        "sum(carrier_daily_delay.flights) == count(flights_enriched)", (ENRICHED, DAILY),
        lambda t: _equal("sum(flights) vs enriched", _sum(t[DAILY], "flights"), t[ENRICHED].num_rows),
    ),
)


@dataclass
class LevelReport:
    """What the readers of one level saw: samples taken, anomalies (invariant violations)."""

    level: str
    samples: int = 0
    skipped: int = 0
    anomalies: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": self.level, "samples": self.samples, "skipped": self.skipped,
            "anomalies": len(self.anomalies), "examples": self.anomalies[:5],
        }


class ConsistencyChecker:
    """Reads invariant tables at each level and records violations (see module docstring).

    Args:
        store: the metastore the topologies run against.
        invariants: the invariants to check.
        levels: subset of :data:`LEVELS`.
        seed: seed of the AS OF barrier choice.
    """

    def __init__(
        self, store: MetaStore, invariants: Sequence[Invariant], levels: Sequence[str] = LEVELS, seed: int = 7
    ) -> None:
        unknown = sorted(set(levels) - set(LEVELS))
        if unknown:
            raise ValueError(f"unknown level(s) {unknown}; use {list(LEVELS)}")
        self.store = store
        self.invariants = list(invariants)
        self.reports = {level: LevelReport(level) for level in levels}
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _resolve(self, invariant: Invariant, level: str) -> Any:
        if level != "AS_OF":
            return self.store.resolution.resolve(invariant.tables, ConsistencyLevel.parse(level))
        newest = self.store.resolution.resolve(invariant.tables).barrier
        with self._lock:
            barrier = self._random.randint(1, newest)
        return self.store.resolution.resolve(invariant.tables, as_of=barrier)

    def sample(self, level: str) -> None:
        """Read every invariant's tables once at ``level`` and record the outcome."""
        report = self.reports[level]
        for invariant in self.invariants:
            try:
                resolution = self._resolve(invariant, level)
                if any(tv.version is None and tv.staged is None for tv in resolution.tables.values()):
                    raise InconsistentReadError("a table has no version yet")
                tables = to_arrow(resolution)
            except InconsistentReadError:
                with self._lock:
                    report.skipped += 1  # nothing consistent to read yet (before the first barrier)
                continue
            holds, detail = invariant.check(tables)
            with self._lock:
                report.samples += 1
                if not holds:
                    at = resolution.barrier if resolution.barrier is not None else "latest"
                    report.anomalies.append(f"{invariant.name} violated at barrier {at}: {detail}")

    def sample_held(self, invariant: Invariant, resolution: Any) -> None:
        """Read ``resolution`` (resolved earlier at its level) now and check ``invariant`` on it."""
        report = self.reports[resolution.level.value if hasattr(resolution.level, "value") else str(resolution.level)]
        try:
            holds, detail = invariant.check(to_arrow(resolution))
        except Exception as exc:  # a held answer must stay readable: any error is an anomaly
            holds, detail = False, f"reader error: {type(exc).__name__}: {exc}"
        with self._lock:
            report.samples += 1
            if not holds:
                report.anomalies.append(f"{invariant.name} on a held answer at barrier {resolution.barrier}: {detail}")

    def sample_all(self) -> None:
        """One sample at every level (called at each step of the pipeline)."""
        for level in self.reports:
            self.sample(level)

    def start(self, interval_s: float = 0.05) -> None:
        """Start one reader thread per level, sampling every ``interval_s`` seconds."""
        self._stop.clear()

        def loop(level: str) -> None:
            while not self._stop.is_set():
                try:
                    self.sample(level)
                except Exception as exc:  # a reader racing a commit must not stop the run
                    with self._lock:
                        self.reports[level].anomalies.append(f"reader error: {type(exc).__name__}: {exc}")
                self._stop.wait(interval_s)

        self._threads = [threading.Thread(target=loop, args=(lv,), daemon=True) for lv in self.reports]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop the reader threads."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def summary(self) -> dict[str, dict[str, Any]]:
        """{level: {"samples", "skipped", "anomalies", "examples"}}."""
        return {level: report.as_dict() for level, report in self.reports.items()}


def _repo() -> Path:
    return Path(os.environ.get("TSB_REPO") or Path(__file__).resolve().parents[2])


def _load_app(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"tsb_app_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"Spark application not found: {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.APP


def wordcount_topology(warehouse: str) -> Topology:
    apps = _repo() / "spark_apps" / "wordcount"
    topo = Topology("wordcount", warehouse=warehouse)
    topo.root_table("raw.words")
    topo.job("wordcount_words", str(apps / "wordcount_words.py"), sources=["raw.words"], sinks=["wordcount.word_count"])
    topo.job("wordcount_counts", str(apps / "wordcount_counts.py"), sources=["wordcount.word_count"],
             sinks=["wordcount.count_of_counts"])
    return topo


def flights_topology(warehouse: str) -> Topology:
    apps = _repo() / "spark_apps" / "flights"
    topo = Topology("flights", warehouse=warehouse)
    topo.root_table("raw.flights", event_time_column="time_hour")
    topo.root_table("raw.weather", event_time_column="time_hour")
    topo.job("enrich_flights", str(apps / "enrich_flights.py"), sources=["raw.flights", "raw.weather"],
             sinks=["flights.flights_enriched"])
    topo.job("carrier_daily_delay", str(apps / "carrier_daily_delay.py"), sources=["flights.flights_enriched"],
             sinks=["flights.carrier_daily_delay"])
    topo.job("carrier_ranking", str(apps / "carrier_ranking.py"), sources=["flights.carrier_daily_delay"],
             sinks=["flights.carrier_ranking"])
    return topo


#: kill points of ``--kill``, cycled over (barrier, job): ``after_files`` leaves a served manifest
KILL_CYCLE = ("after_files", "after_commit", "while_writing")


def job_process(
    topo: Topology, job_id: str, barrier: int, url: str, kill_at: str | None, kill_dir: str,
    remote: str | None = None,
) -> int:
    """Run ``job_id`` up to ``barrier`` as its own process on the metastore catalog, as the operator
    does: a Spark Connect client of ``remote``, else ``spark-submit``; ``kill_at``: ``TSB_KILL_AT``
    for it. Returns the exit status."""
    import subprocess

    job = topo.jobs[job_id]
    if remote:
        cmd = [sys.executable, job.application]
    else:
        from airflow_provider_tsb.spark.class_data import ClassDataArchive

        submit = str(Path(sys.executable).parent / "spark-submit")
        java = ClassDataArchive(spark_submit=submit).ensure()  # as configure_submit gives it
        cmd = [submit, "--master", "local[1]", "--conf", "spark.ui.enabled=false",
               *(["--driver-java-options", java] if java else []), job.application]
    cmd += ["--mode", "batch", "--metastore-url", "env:TSB_METASTORE_URL", "--until-barrier", str(barrier)]
    for name in sorted({*job.sources, *job.sinks}):
        cmd += ["--table", f"{name}={topo.location(name)}"]
    from airflow_provider_tsb.spark.installation import CONNECT_MARKERS

    env = {k: v for k, v in os.environ.items() if k not in ("TSB_KILL_AT", "TSB_KILL_ONCE_DIR", *CONNECT_MARKERS)}
    env.update(TSB_METASTORE_URL=url, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               TSB_SPARK_LOG_LEVEL="ERROR", PYTHONPATH=os.pathsep.join([str(_repo()), env.get("PYTHONPATH", "")]))
    if remote:
        env["SPARK_REMOTE"] = remote
    if kill_at:
        env.update(TSB_KILL_AT=kill_at, TSB_KILL_ONCE_DIR=kill_dir)
    done = subprocess.run(cmd, env=env, cwd=os.path.dirname(kill_dir), capture_output=True, text=True)
    if done.returncode not in (0, -9, 137):
        raise RuntimeError(f"job {job_id} failed at barrier {barrier} (exit {done.returncode}): {done.stderr[-3000:]}")
    return done.returncode


def _run_killed_and_retried(
    checker: ConsistencyChecker, store: MetaStore, topo: Topology, job_id: str, barrier: int, point: str,
    url: str, workdir: str, remote: str | None,
) -> None:
    """The job killed at ``point`` for ``barrier``, a READ_COMMITTED answer held, the retry, the read."""
    kill_dir = os.path.join(workdir, "killed")
    code = job_process(topo, job_id, barrier, url, f"{point}:{job_id}:{barrier}", kill_dir, remote)
    sinks = set(topo.jobs[job_id].sinks)
    held = []
    if code != 0:
        for invariant in checker.invariants:
            if sinks & set(invariant.tables):
                try:
                    held.append((invariant, store.resolution.resolve(invariant.tables,
                                                                     ConsistencyLevel.READ_COMMITTED)))
                except InconsistentReadError:
                    pass
        checker.sample_all()
        if job_process(topo, job_id, barrier, url, None, kill_dir, remote) != 0:
            raise RuntimeError(f"the retry of job {job_id} at barrier {barrier} was killed")
    for invariant, resolution in held:
        checker.sample_held(invariant, resolution)


def _checked_topologies(
    warehouse: str, wordcount_barriers: int, flights_barriers: int
) -> tuple[list[tuple[Topology, int, Callable[[Topology, str], Any]]], list[Invariant]]:
    """``([(topology, barriers to run, its ingest(topology, run key))], invariants)`` of the
    topologies :func:`run_check` runs (a count of 0 skips one)."""
    from tsb_examples.ingest import ingest_next_flights_days, ingest_next_words

    plans: list[tuple[Topology, int, Callable[[Topology, str], Any]]] = []
    invariants: list[Invariant] = []
    if wordcount_barriers:
        plans.append((wordcount_topology(warehouse), wordcount_barriers,
                      lambda t, key: ingest_next_words(t.location("raw.words"), key, lines=60)))
        invariants += WORDCOUNT_INVARIANTS
    if flights_barriers:
        plans.append((flights_topology(warehouse), flights_barriers,
                      lambda t, key: ingest_next_flights_days(t.location("raw.flights"), t.location("raw.weather"),
                                                              key)))
        invariants += FLIGHTS_INVARIANTS
    return plans, invariants


def run_check(
    workdir: str, *, wordcount_barriers: int = 4, flights_barriers: int = 2, interval_s: float = 0.05,
    log: Callable[[str], None] = print, kill: bool = False, remote: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Run both topologies under concurrent readers; returns :meth:`ConsistencyChecker.summary`.

    Args:
        workdir: folder for the metastore (SQLite) and the warehouse; created if missing.
        wordcount_barriers / flights_barriers: barriers to run per topology (0 skips it).
        interval_s: pause of each reader thread between samples, seconds.
        kill: run each job as its own process, SIGKILLed once per barrier at a kill point of
            :data:`KILL_CYCLE` and retried (see module docstring).
        remote: the jobs' Spark Connect server (``sc://host:port``): every job and the
            in-process runs are its clients; ``None``: a local Spark in this process, and
            ``spark-submit`` processes with ``kill``.
    """
    from airflow_provider_tsb.hooks.barrier import read_root_versions
    from airflow_provider_tsb.metastore.store import MetaStore
    from airflow_provider_tsb.spark import AppRun, get_spark, run_batch
    from airflow_provider_tsb.spark.metastore_catalog import MetastoreCatalog

    os.makedirs(workdir, exist_ok=True)
    url = f"sqlite:///{os.path.join(os.path.abspath(workdir), 'tsb.db')}"
    store = MetaStore(url)
    store.migrate()
    warehouse = os.path.join(workdir, "warehouse")
    plans, invariants = _checked_topologies(warehouse, wordcount_barriers, flights_barriers)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = get_spark("tsb-check", remote=remote) if not kill else None  # --kill: every job is its own process
    catalog = MetastoreCatalog(url)
    checker = ConsistencyChecker(store, invariants)
    for topo, _, _ in plans:
        store.registry.register_topology(topo)
    checker.start(interval_s)
    try:
        for topo, count, ingest in plans:
            apps = {job.id: _load_app(Path(job.application)) for job in topo.jobs_in_order()}
            overrides = {name: topo.location(name) for name in topo.tables}
            for n in range(count):
                ingest(topo, f"check/{topo.name}/{n}")
                checker.sample_all()
                barrier = store.barriers.create(topo.name, read_root_versions(topo),
                                                        run_key=f"check/{topo.name}/{n}")
                for j, job in enumerate(topo.jobs_in_order()):
                    if kill:
                        point = KILL_CYCLE[(n + j) % len(KILL_CYCLE)]
                        _run_killed_and_retried(checker, store, topo, job.id, barrier.barrier, point, url, workdir,
                                                remote)
                    else:
                        app = apps[job.id]
                        run_batch(AppRun(spark, app, catalog, app.resolve_locations(None, overrides)),
                                  until_barrier=barrier.barrier)
                    checker.sample_all()
                log(f"{topo.name}: barrier {barrier.barrier} committed in every table")
    finally:
        checker.stop()
    return checker.summary()


def format_summary(summary: Mapping[str, Mapping[str, Any]]) -> str:
    """A table of samples and anomalies per level, plus example anomalies."""
    lines = [f"{'level':<18} {'samples':>8} {'anomalies':>10}"]
    for level, row in summary.items():
        lines.append(f"{level:<18} {row['samples']:>8} {row['anomalies']:>10}")
    for level, row in summary.items():
        for example in row["examples"][:2]:
            lines.append(f"  {level}: {example}")
    return "\n".join(lines)
