"""Where a barrier generation's time goes beside the jobs: the sustained-rate benchmark with each
step of the generation timed.

Runs ``python -m benchmarks.barrier_rate`` with the arguments given (its own figures are printed as
usual) after wrapping, in this process, the steps of
:meth:`~airflow_provider_tsb.metastore.barriers.BarrierManager.create` (the module's
private functions, the tag check, the barrier log's read and append, the domain lock), the
hook's Delta reads (root versions, watermark, figures) and every SQL statement (by verb) with
timers. At exit it prints, per step, the median and mean over the generations after the first
20 and the mean over the slowest 1 %, in ms; ``cpu`` is the generating thread's CPU time::

    PYTHONPATH=. .venv/bin/python dev/generation_phases.py --seconds 180 --max-in-flight 48 \\
        --max-barriers-per-trigger 48 --compaction 16

The wrappers cost a few microseconds per call: the benchmark's own ``generate_p99_ms`` is the
figure to quote, this breakdown says where it comes from.
"""

from __future__ import annotations

import atexit
import collections
import functools
import runpy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WARM_UP = 20

#: ms per step of the generation being timed
_STEPS: collections.defaultdict[str, float] = collections.defaultdict(float)
#: (total ms, {step: ms}) per generation
_TIMED: list[tuple[float, dict[str, float]]] = []


def _timed(owner: Any, name: str, label: str | None = None) -> None:
    """Replace ``owner.name`` by a wrapper adding its wall time to ``_STEPS[label or name]``."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tick = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            _STEPS[label or name] += (time.perf_counter() - tick) * 1000

    setattr(owner, name, wrapper)


def _time_statements() -> None:
    """Time every SQL statement by its verb (``sql:SELECT``...) and count them (``statements``)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    started: dict[str, Any] = {}

    @event.listens_for(Engine, "before_cursor_execute")
    def _before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        started["tick"], started["verb"] = time.perf_counter(), statement.split()[0].upper()

    @event.listens_for(Engine, "after_cursor_execute")
    def _after(*_args: Any) -> None:
        _STEPS["sql:" + started["verb"]] += (time.perf_counter() - started["tick"]) * 1000
        _STEPS["statements"] += 1


def install() -> None:
    """Wrap the generation's steps and the benchmark's ``FlightsBench.generate`` (module doc)."""
    import airflow_provider_tsb.delta.barrier_log as barrier_log
    import airflow_provider_tsb.hooks.barrier as hook
    import airflow_provider_tsb.metastore.barriers as barriers
    import benchmarks.flights_bench as flights_bench

    for name in ("read_root_versions", "root_figures"):
        _timed(hook, name)
    _timed(hook.TsbBarrierHook, "watermark")
    for name, value in vars(barriers).copy().items():
        if name.startswith("_") and callable(value) and not isinstance(value, type) \
                and getattr(value, "__module__", "") == barriers.__name__:
            _timed(barriers, name)
    for name in ("check_tables", "log_barrier", "lock_domain"):
        _timed(barriers, name)
    _timed(barrier_log, "logged_barrier")
    _timed(barrier_log, "write_barrier")
    _time_statements()
    generate = flights_bench.FlightsBench.generate

    def timed_generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        _STEPS.clear()
        tick, cpu = time.perf_counter(), time.thread_time()
        try:
            return generate(self, *args, **kwargs)
        finally:
            _STEPS["cpu"] = (time.thread_time() - cpu) * 1000
            _TIMED.append(((time.perf_counter() - tick) * 1000, dict(_STEPS)))

    flights_bench.FlightsBench.generate = timed_generate  # type: ignore[method-assign]


def report() -> None:
    """Print the breakdown (module doc)."""
    timed = _TIMED[WARM_UP:]
    if not timed:
        return
    totals = sorted(total for total, _ in timed)
    slowest = sorted(timed, key=lambda t: t[0])[-max(1, len(timed) // 100):]
    print(f"phases: generations={len(timed)} median_ms={statistics.median(totals):.1f} "
          f"p99_ms={totals[int(len(totals) * 0.99)]:.1f}")
    for step in sorted({step for _, steps in timed for step in steps}):
        every = [steps.get(step, 0.0) for _, steps in timed]
        slow = [steps.get(step, 0.0) for _, steps in slowest]
        print(f"  {step:30s} median={statistics.median(every):7.2f} mean={statistics.mean(every):7.2f} "
              f"slowest_1pct_mean={statistics.mean(slow):7.2f}")
    print(f"  {'total':30s} slowest_1pct_mean={statistics.mean(t for t, _ in slowest):.2f}")


def main() -> None:
    install()
    atexit.register(report)
    sys.argv = ["benchmarks.barrier_rate", *sys.argv[1:]]
    runpy.run_module("benchmarks.barrier_rate", run_name="__main__")


if __name__ == "__main__":
    main()
