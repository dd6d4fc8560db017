"""The one harness of the benchmarks: their argument parser, percentile, load reading and result line.

* :func:`parser`: the ``argparse`` parser of a benchmark, with the options several share
  (``--keep``, ``--remote``, ``--engine``, ``--sqlite``) when it asks for them; the benchmark
  adds its own.
* :func:`percentile` (and :func:`median`, its 50th): the one definition of p50 / p95 / p99 of
  the benchmarks, **linear interpolation between the closest ranks**: of ``n`` values sorted
  ``x[0] <= ... <= x[n-1]``, the ``q``-th percentile is at position ``h = (n - 1) * q / 100``,
  ``x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])``. It is Hyndman and Fan's
  type 7, numpy's default ``percentile``, ``statistics.quantiles(method="inclusive")`` and
  Excel's ``PERCENTILE.INC``; its 50th is ``statistics.median``, and p100 the maximum. The
  percentiles ``wrk`` prints (``wrk_clients.py``) are wrk's own (its latency histogram).
* :func:`load`: the machine's load, the 1-minute load average (``os.getloadavg()[0]``) rounded
  to 1 decimal; :class:`LoadWatch` samples it through a longer run (its lowest, highest and
  mean).
* :func:`report`: a benchmark's result: one JSON object (``{"benchmark": NAME, figures...}``),
  then the same figures as ``key=value key=value ...`` on the last line of stdout, ``load=``
  always among them (:func:`load` at the report unless the benchmark gives its own reading).
  A benchmark of several runs (one per engine, shape, ...) reports each, the last one last.
  :func:`read_report` reads it back from a benchmark's output.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

#: the repository's root: run the benchmarks from here (``python -m benchmarks.NAME``)
REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------- options
def parser(description: str | None, *, keep: bool = False, remote: bool = False, engine: str | None = None,
           sqlite: bool = False) -> argparse.ArgumentParser:
    """The argument parser of a benchmark: ``description`` (its module docstring, of which
    ``--help`` shows the first paragraph) and the shared options it asks for; it adds its own.

    Args:
        description: the benchmark's docstring (or the sentence that says what it measures).
        keep: ``--keep DIR``: keep the run's tables, metastores and logs in DIR (default: a
            temporary directory).
        remote: ``--remote URL``: a running Spark Connect server (default: start a local one).
        engine: ``--engine connect|submit`` with this default: the jobs as Spark Connect
            clients of one server, or a ``spark-submit`` each.
        sqlite: ``--sqlite``: the metastore on SQLite instead of a throwaway PostgreSQL.
    """
    first = " ".join((description or "").strip().split("\n\n")[0].split()) or None
    script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    ours = script is not None and script.parent == Path(__file__).parent  # run as python -m benchmarks.NAME
    prog = f"python -m benchmarks.{script.stem}" if ours else None
    out = argparse.ArgumentParser(prog=prog, description=first)
    if keep:
        out.add_argument("--keep", metavar="DIR",
                         help="keep the run's tables, metastores and logs in this directory (default: a temporary one)")
    if remote:
        out.add_argument("--remote", metavar="URL",
                         help="a running Spark Connect server, sc://HOST:PORT (default: start a local one for the run)")
    if engine is not None:
        out.add_argument("--engine", choices=("connect", "submit"), default=engine,
                         help=f"the jobs as Spark Connect clients of one server, or a spark-submit each "
                              f"(default {engine})")
    if sqlite:
        out.add_argument("--sqlite", action="store_true", help="the metastore on SQLite instead of PostgreSQL")
    return out


# ------------------------------------------------------------------------------------ percentiles
def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (``q`` in 0..100) of ``values`` by linear interpolation between
    the closest ranks (module docstring); ``nan`` when there is none.

    Raises:
        ValueError: ``q`` outside 0..100.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is between 0 and 100, not {q}")
    ordered = sorted(values)
    if not ordered:
        return math.nan
    at = (len(ordered) - 1) * q / 100
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (at - low) * (ordered[high] - ordered[low])


def median(values: Iterable[float]) -> float:
    """``percentile(values, 50)`` (``statistics.median``); ``nan`` when there is none."""
    return percentile(values, 50)


# ------------------------------------------------------------------------------------------- load
def load() -> float:
    """The machine's load now: the 1-minute load average, rounded to 1 decimal."""
    return round(os.getloadavg()[0], 1)


class LoadWatch:
    """:func:`load` sampled through a run (``with LoadWatch() as watch: ...``): on entering, every
    ``every`` seconds on a thread of its own, and on leaving.

    ``watch.range`` (lowest, highest) is the ``load=`` figure of a run that takes a while
    (``load=1.2-3.4``); ``watch.mean`` the mean of the samples.
    """

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self.samples: list[float] = []
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LoadWatch:
        self.samples.append(load())
        self._thread = threading.Thread(target=self._run, name="load-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self.samples.append(load())

    def _run(self) -> None:
        while not self._done.wait(self.every):
            self.samples.append(load())

    @property
    def low(self) -> float:
        return min(self.samples, default=load())

    @property
    def high(self) -> float:
        return max(self.samples, default=load())

    @property
    def range(self) -> tuple[float, float]:
        """``(lowest, highest)`` load of the run (``load=low-high`` in the result line)."""
        return self.low, self.high

    @property
    def mean(self) -> float:
        """The mean of the samples, rounded to 1 decimal."""
        return round(sum(self.samples) / len(self.samples), 1) if self.samples else load()


# ----------------------------------------------------------------------------------------- result
def rounded(value: float) -> float:
    """``value`` to four significant digits, at least one decimal (``0.01234``, ``1.034``,
    ``12.35``, ``1234.5``); a benchmark that wants fewer rounds its figure itself."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, max(1, 3 - math.floor(math.log10(abs(value)))))


def _figure(value: Any) -> Any:
    """A figure as the JSON object holds it: floats :func:`rounded` (``nan`` as ``null``), a
    ``(low, high)`` pair (a range) as a list, anything else but numbers and strings as text."""
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        return rounded(value) if math.isfinite(value) else None
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
        return [_figure(float(v)) for v in value]
    return str(value)


def _text(value: Any) -> str:
    """A JSON-held figure as the ``key=value`` line writes it."""
    if value is None:
        return "nan"
    if isinstance(value, list):
        low, high = (_text(v) for v in value)
        return low if low == high else f"{low}-{high}"
    return str(value)


def line(**figures: Any) -> str:
    """``key=value key=value ...`` of ``figures``, rounded as :func:`report` rounds them."""
    return " ".join(f"{key}={_text(_figure(value))}" for key, value in figures.items())


def report(name: str, /, **figures: Any) -> dict[str, Any]:
    """Print the result of benchmark ``name``: ``figures`` as one JSON object (with
    ``"benchmark": name``), then as ``key=value ...``, the last line of stdout. ``load`` is
    added (:func:`load` now) unless given: a number, or a ``(low, high)`` range
    (:attr:`LoadWatch.range`). Floats are :func:`rounded`. Returns the JSON object.
    """
    figures.setdefault("load", load())
    held = {key: _figure(value) for key, value in figures.items()}
    result = {"benchmark": name, **held}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.write(" ".join(f"{key}={_text(value)}" for key, value in held.items()) + "\n")
    sys.stdout.flush()
    return result


def read_report(output: str) -> dict[str, Any]:
    """The JSON object of the last :func:`report` in a benchmark's ``output`` (its stdout).

    Raises:
        ValueError: ``output`` holds no report.
    """
    for text in reversed(output.splitlines()):
        if text.startswith('{"benchmark": '):
            return json.loads(text)
    raise ValueError("no benchmark report in the output")


def module_command(name: str, *args: str) -> list[str]:
    """The command that runs benchmark ``name`` with ``args`` in a process of its own (run it
    with ``cwd=REPO``): ``python -m benchmarks.NAME ARGS``."""
    return [sys.executable, "-m", f"benchmarks.{name}", *args]


__all__ = ["REPO", "LoadWatch", "line", "load", "median", "module_command", "parser", "percentile", "read_report",
           "report", "rounded"]
