"""The walk of one barrier's plan through ``run_barrier`` in a batch run: which modules of
``airflow_provider_tsb`` it stops in, in order (issue 22 item 5).

Runs the FLIP-276 word count (``spark_apps/wordcount``: ``wordcount_words``, a merge sink fed by
the root table's changes and its own previous state; ``wordcount_counts``, an overwrite sink over
an intermediate input) in batch mode, barrier 1 untraced, then traces each job's
``run_barrier`` of barrier 2 with :func:`sys.setprofile` and prints:

* the walk: the modules entered by a call from another module, in call order, consecutive
  entries of one module merged into one *stop* (``module:first function``; a return to the
  caller and calls inside a module are not stops);
* ``stops``, ``modules``, ``revisits`` (stops in a module the walk had already left) and
  ``climbs`` (calls from a lower layer back into a higher one: ``delta/`` < ``metastore/`` <
  ``spark/``; e.g. the Delta commit calling the job's fencing check);
* ``log_reads``: the driver's Delta log reads per table: ``commit file`` (a ``_delta_log``
  commit file opened), ``commit look-up`` (a commit asked for, read or shared within the
  barrier), ``snapshot load`` (a full ``DeltaTable`` load).

Modules listed in ``--quiet`` are left out of the walk and counted apart; by default the
instruments and helpers every layer calls: the phase timer (``spark.timing``), the test kill
points (``spark.killpoints``), paths and single commit reads (``delta.log``), storage options
(``delta.storage``), the tag format (``delta.conventions``), and Arrow conversions
(``delta.arrow_rows``).

The catalog is the metastore (a SQLite file, the topology registered and its barriers generated
as the emitter does), as a job the operator starts sees it: a batch run's input lease covers its
barriers and the reports run on the report queue's thread (not traced: the walk is the
barrier's thread). ``--plan-file`` traces the plan-file catalog instead (no leases, every report
synchronous).

    .venv/bin/python -m dev.barrier_walk [--remote sc://HOST:PORT] [--plan-file] [--quiet MODULES] [--barrier 2]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "airflow_provider_tsb"
LAYERS = {"delta": 0, "metastore": 1, "spark": 2}
#: modules left out of the walk by default (see the module doc)
QUIET = "spark.timing,spark.killpoints,spark.frames,delta.log,delta.storage,delta.conventions,delta.arrow_rows"


def module_of(filename: str) -> str | None:
    """``spark.runner`` for ``.../airflow_provider_tsb/spark/runner.py``; ``None`` outside the package."""
    path = Path(filename)
    try:
        rel = path.resolve().relative_to(PACKAGE)
    except ValueError:
        return None
    return ".".join(rel.with_suffix("").parts)


def layer(module: str) -> int:
    """The layer of a module (``delta`` 0, ``metastore`` 1, ``spark`` 2, others -1)."""
    return LAYERS.get(module.split(".")[0], -1)


#: the control plane a barrier reports to (its catalog, the input lease, the report queue, the
#: metastore behind them): calls into it are *messages* of the protocol at fixed points (the
#: barrier's start, PROCESSED before its commit, WRITTEN after), listed apart from the stops
CONTROL = ("spark.catalog", "spark.metastore_catalog", "spark.barrier_reports", "spark.report_queue",
           "spark.input_leases", "metastore.")


def is_control(module: str) -> bool:
    """Whether ``module`` is of the control plane (:data:`CONTROL`)."""
    return any(module == c or (c.endswith(".") and module.startswith(c)) for c in CONTROL)


def add_stop(stops: list[str], module: str, function: str) -> None:
    """Append ``module:function`` unless the walk is already in ``module``."""
    if not stops or stops[-1].split(":")[0] != module:
        stops.append(f"{module}:{function}")


def count_revisits(stops: list[str]) -> int:
    """Stops in a module the walk had already left."""
    seen: set[str] = set()
    count = 0
    for stop in stops:
        module = stop.split(":")[0]
        count += module in seen
        seen.add(module)
    return count


@dataclass
class Walk:
    """The stops of one traced call and what they add up to.

    Attributes:
        stops: the plan's walk: the stops outside the app's reads and the control plane.
        all_stops: every stop, the app's reads and the control plane's included.
        app_reads: ``(stops before it, its stops)`` of each call the app's ``process`` made
            into the package (a read of the context).
        messages: ``(stops before it, module:function)`` of each call into the control plane.
    """

    stops: list[str] = field(default_factory=list)
    all_stops: list[str] = field(default_factory=list)
    app_reads: list[tuple[int, list[str]]] = field(default_factory=list)
    #: ``(kind, index)`` of the messages and app reads in call order (``kind``: ``control`` or ``app``)
    asides: list[tuple[str, int]] = field(default_factory=list)
    messages: list[tuple[int, str]] = field(default_factory=list)
    climbs: list[str] = field(default_factory=list)
    quiet: collections.Counter = field(default_factory=collections.Counter)
    log_reads: collections.Counter = field(default_factory=collections.Counter)

    @property
    def modules(self) -> list[str]:
        """Modules of the plan's walk in first-visit order."""
        return list(dict.fromkeys(s.split(":")[0] for s in self.stops))

    @property
    def revisits(self) -> int:
        """Stops of the plan's walk in a module it had already left."""
        return count_revisits(self.stops)


def _read_kind(module: str, function: str, frame: Any) -> str | None:
    """A Delta log read made by this call (``commit file``, ``snapshot load``, ``incremental``)."""
    if module == "delta.log" and function == "_read_commit_file":
        return f"commit file {Path(str(frame.f_locals.get('location'))).name}"
    if module == "delta.log" and function == "read_commit_actions":
        return f"commit look-up {Path(str(frame.f_locals.get('location'))).name}"
    if module == "delta.log" and function == "open_table":
        return f"snapshot load {Path(str(frame.f_locals.get('location'))).name}"
    return None


@contextmanager
def traced(quiet: set[str], app_code: Any = None) -> Iterator[Walk]:
    """Record the walk of the calls made inside the block (see the module doc); ``app_code``:
    the code object of the app's ``process``, whose calls into the package are its reads."""
    walk = Walk()
    #: (the frame of the call being left out, "app" or "control"), until it returns
    outside: list[tuple[Any, str]] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "return":
            if outside and frame is outside[-1][0]:
                outside.pop()
            return
        if event != "call":
            return
        if app_code is not None and frame.f_code is app_code:
            outside.append((frame, "app"))
            return
        module = module_of(frame.f_code.co_filename)
        if module is None:
            return
        _record(walk, outside, frame, module, quiet)

    sys.setprofile(profile)
    try:
        yield walk
    finally:
        sys.setprofile(None)


def _record(walk: Walk, outside: list[tuple[Any, str]], frame: Any, module: str, quiet: set[str]) -> None:
    """One call into ``module`` of the package (see :func:`traced`)."""
    function = frame.f_code.co_name
    read = _read_kind(module, function, frame)
    if read:
        walk.log_reads[read] += 1
    if module in quiet:
        walk.quiet[module] += 1
        return
    caller = module_of(frame.f_back.f_code.co_filename) if frame.f_back is not None else None
    if caller == module:
        return  # inside the module: not a stop
    add_stop(walk.all_stops, module, function)
    kind = outside[-1][1] if outside else None
    if kind == "control":
        return
    if kind == "app":
        if caller is None:  # the app's process calls the context: a new read
            walk.asides.append(("app", len(walk.app_reads)))
            walk.app_reads.append((len(walk.stops), []))
        add_stop(walk.app_reads[-1][1], module, function)
        return
    if is_control(module):
        walk.asides.append(("control", len(walk.messages)))
        walk.messages.append((len(walk.stops), f"{module}:{function}"))
        outside.append((frame, "control"))
        return
    add_stop(walk.stops, module, function)
    if caller is not None and layer(module) > layer(caller) >= 0:
        walk.climbs.append(f"{caller} -> {module}:{function}")


def trace_run_barrier(quiet: set[str], barrier: int = 2) -> tuple[Callable[..., Any], list[tuple[str, Walk]]]:
    """A ``run_barrier`` that traces its calls for ``barrier``, and the walks recorded."""
    from airflow_provider_tsb.spark import runner

    original = runner.run_barrier
    walks: list[tuple[str, Walk]] = []

    def run_barrier(run: Any, plan: Any, *args: Any, **kwargs: Any) -> Any:
        if plan.barrier != barrier:
            return original(run, plan, *args, **kwargs)
        with traced(quiet, getattr(run.app.process, "__code__", None)) as walk:
            result = original(run, plan, *args, **kwargs)
        walks.append((run.job_id, walk))
        return result

    return run_barrier, walks


def report(job_id: str, walk: Walk, barrier: int = 2) -> str:
    """The walk of one job's barrier as text."""
    lines = [f"job {job_id}, barrier {barrier}: stops={len(walk.stops)} modules={len(walk.modules)} "
             f"revisits={walk.revisits} climbs={len(walk.climbs)} (all calls: stops={len(walk.all_stops)} "
             f"modules={len({s.split(':')[0] for s in walk.all_stops})} revisits={count_revisits(walk.all_stops)})"]
    asides = collections.defaultdict(list)  # {stops before: lines}, in call order
    for kind, index in walk.asides:
        if kind == "control":
            position, message = walk.messages[index]
            asides[position].append(f"      control: {message}")
        else:
            position, read = walk.app_reads[index]
            asides[position].append("      the app reads: " + " -> ".join(read))
    for i, stop in enumerate(walk.stops, 1):
        lines += asides.pop(i - 1, [])
        lines.append(f"  {i:2d}. {stop}")
    lines += [line for position in sorted(asides) for line in asides[position]]
    if walk.climbs:
        lines.append("  climbs: " + "; ".join(walk.climbs))
    if walk.quiet:
        lines.append("  left out: " + ", ".join(f"{m} ({n} calls)" for m, n in sorted(walk.quiet.items())))
    lines.append("  log_reads: " + (", ".join(f"{k} x{n}" for k, n in sorted(walk.log_reads.items())) or "none"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--remote", help="a Spark Connect server (default: a local Spark driver)")
    parser.add_argument("--quiet", default=QUIET, help="modules left out of the walk (comma-separated)")
    parser.add_argument("--barrier", type=int, default=2,
                        help="the barrier traced (2: the first after the sinks were created; 3 and on: an append "
                             "after an append, each run's steady state)")
    parser.add_argument("--plan-file", action="store_true",
                        help="the plan-file catalog (default: the metastore, as the operator's jobs run)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from airflow_provider_tsb.spark.session import get_spark

    spark = get_spark("tsb-barrier-walk", master="local[1]", remote=args.remote)
    for job_id, walk in walk_wordcount(spark, args.barrier, plan_file=args.plan_file, quiet=args.quiet):
        print(report(job_id, walk, args.barrier))
    return 0


def walk_wordcount(spark: Any, barrier: int = 2, *, plan_file: bool = False, quiet: str = QUIET,
                   ) -> list[tuple[str, Walk]]:
    """Run the word count's two jobs in batch mode up to ``barrier`` on ``spark`` and return
    ``[(job id, the walk of its barrier)]`` (module doc; ``quiet``: comma-separated modules)."""
    from airflow_provider_tsb.spark import runner
    from airflow_provider_tsb.spark.app_run import AppRun
    from dev.dataplane import load_app_module

    apps = [load_app_module(f"wordcount/{name}.py").APP for name in ("wordcount_words", "wordcount_counts")]
    traced_run, walks = trace_run_barrier({m for m in quiet.split(",") if m}, barrier)
    original, runner.run_barrier = runner.run_barrier, traced_run  # run_batch calls it through the module
    try:
        with tempfile.TemporaryDirectory() as tmp:
            catalog = _catalog(Path(tmp), barrier, plan_file=plan_file)
            for app in apps:
                runner.run_batch(AppRun(spark, app, catalog, app.resolve_locations(catalog.tables())))
    finally:
        runner.run_barrier = original
    return walks


def _catalog(root: Path, barriers: int, *, plan_file: bool) -> Any:
    """The word count's catalog with ``barriers`` barriers generated: a plan file, or a metastore
    (SQLite) with the topology registered, as a job started by the operator reads it."""
    if plan_file:
        from airflow_provider_tsb.spark.catalog import PlanFileCatalog
        from dev.dataplane import make_wordcount_plan

        plan, _tables = make_wordcount_plan(root, barriers)
        return PlanFileCatalog(plan, plan + ".report.json")
    from airflow_provider_tsb.spark.metastore_catalog import MetastoreCatalog
    from dev.job_processes import wordcount_deployment

    url = f"sqlite:///{root}/tsb.db"
    wordcount_deployment(root, url, barriers)
    return MetastoreCatalog(url)


if __name__ == "__main__":
    sys.exit(main())
