"""The walk of one barrier's plan through ``run_barrier`` in a batch run: which modules of
``airflow_provider_tsb`` it stops in, in order (issue 22 item 5).

Runs the FLIP-276 word count (``spark_apps/wordcount``: ``wordcount_words``, a merge sink fed by
the root table's changes and its own previous state; ``wordcount_counts``, an overwrite sink over
an intermediate input) in batch mode on a plan file, barrier 1 untraced, then traces each job's
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
(``delta.storage``), the tag format (``delta.conventions``) and the error classes
(``delta.errors``).

    .venv/bin/python -m dev.barrier_walk [--remote sc://HOST:PORT] [--quiet spark.timing,...] [--barrier 2]
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
QUIET = "spark.timing,spark.killpoints,delta.log,delta.storage,delta.conventions,delta.errors"


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


@dataclass
class Walk:
    """The stops of one traced call and what they add up to."""

    stops: list[str] = field(default_factory=list)
    climbs: list[str] = field(default_factory=list)
    quiet: collections.Counter = field(default_factory=collections.Counter)
    log_reads: collections.Counter = field(default_factory=collections.Counter)

    @property
    def modules(self) -> list[str]:
        """Modules in first-visit order."""
        return list(dict.fromkeys(s.split(":")[0] for s in self.stops))

    @property
    def revisits(self) -> int:
        """Stops in a module the walk had already left."""
        seen: set[str] = set()
        count = 0
        for stop in self.stops:
            module = stop.split(":")[0]
            count += module in seen
            seen.add(module)
        return count


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
def traced(quiet: set[str]) -> Iterator[Walk]:
    """Record the walk of the calls made inside the block (see the module doc)."""
    walk = Walk()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = module_of(frame.f_code.co_filename)
        if module is None:
            return
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
        current = walk.stops[-1].split(":")[0] if walk.stops else None
        if module != current:
            walk.stops.append(f"{module}:{function}")
        if caller is not None and layer(module) > layer(caller) >= 0:
            walk.climbs.append(f"{caller} -> {module}:{function}")

    sys.setprofile(profile)
    try:
        yield walk
    finally:
        sys.setprofile(None)


def trace_run_barrier(quiet: set[str], barrier: int = 2) -> tuple[Callable[..., Any], list[tuple[str, Walk]]]:
    """A ``run_barrier`` that traces its calls for ``barrier``, and the walks recorded."""
    from airflow_provider_tsb.spark import runner

    original = runner.run_barrier
    walks: list[tuple[str, Walk]] = []

    def run_barrier(spark: Any, app: Any, plan: Any, *args: Any, **kwargs: Any) -> Any:
        if plan.barrier != barrier:
            return original(spark, app, plan, *args, **kwargs)
        with traced(quiet) as walk:
            result = original(spark, app, plan, *args, **kwargs)
        walks.append((app.job_id, walk))
        return result

    return run_barrier, walks


def report(job_id: str, walk: Walk, barrier: int = 2) -> str:
    """The walk of one job's barrier as text."""
    lines = [f"job {job_id}, barrier {barrier}: stops={len(walk.stops)} modules={len(walk.modules)} "
             f"revisits={walk.revisits} climbs={len(walk.climbs)}"]
    lines += [f"  {i:2d}. {stop}" for i, stop in enumerate(walk.stops, 1)]
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
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from airflow_provider_tsb.spark import runner
    from airflow_provider_tsb.spark.catalog import PlanFileCatalog
    from airflow_provider_tsb.spark.session import get_spark
    from tsb_dev.dataplane import load_app_module, make_wordcount_plan

    spark = get_spark("tsb-barrier-walk", master="local[1]", remote=args.remote)
    apps = [load_app_module(f"wordcount/{name}.py").APP for name in ("wordcount_words", "wordcount_counts")]
    traced_run, walks = trace_run_barrier({m for m in args.quiet.split(",") if m}, args.barrier)
    runner.run_barrier = traced_run  # run_batch calls it through the module
    with tempfile.TemporaryDirectory() as tmp:
        plan, _tables = make_wordcount_plan(Path(tmp), args.barrier)
        catalog = PlanFileCatalog(plan, plan + ".report.json")
        for app in apps:
            runner.run_batch(spark, app, catalog, app.resolve_locations(catalog.tables()))
    for job_id, walk in walks:
        print(report(job_id, walk, args.barrier))
    return 0


if __name__ == "__main__":
    sys.exit(main())
