"""The benchmarks share one harness (``benchmarks/harness.py``): one percentile definition, one
load reading, one result line and one argument parser; every benchmark runs as
``python -m benchmarks.NAME`` from the repository's root, and none edits ``sys.path``.

The harness's own tests and the source checks are ``unit``; the ``--help`` of every benchmark
spawns a Python process each (``slow``)."""

from __future__ import annotations

import ast
import json
import math
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import harness

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
#: ``benchmarks/*.py`` with a ``main``: the benchmarks, and ``plain`` (a spark-submit application)
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py")
                 if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in ast.parse(p.read_text()).body))
#: run as a file by ``spark-submit`` (``full_year``): its own parser, no report, no ``benchmarks.*`` import
APPLICATIONS = {"plain"}


def _sources() -> list[Path]:
    return sorted(p for p in BENCHMARKS.rglob("*.py") if "__pycache__" not in p.parts)


# ------------------------------------------------------------------------------------------ harness
def test_percentile_interpolates_between_the_closest_ranks() -> None:
    values = [50, 15, 40, 35, 20]  # sorted: 15 20 35 40 50, positions 0..4
    assert harness.percentile(values, 0) == 15
    assert harness.percentile(values, 40) == pytest.approx(29.0)  # position 1.6: 20 + 0.6 * 15
    assert harness.percentile(values, 50) == 35
    assert harness.percentile(values, 95) == pytest.approx(48.0)  # position 3.8: 40 + 0.8 * 10
    assert harness.percentile(values, 100) == 50
    assert harness.percentile(range(1, 101), 99) == pytest.approx(99.01)
    assert harness.percentile([7.0], 99) == 7.0
    assert math.isnan(harness.percentile([], 99)) and math.isnan(harness.median([]))
    for q in (-1, 101):
        with pytest.raises(ValueError):
            harness.percentile(values, q)


def test_percentile_is_statistics_inclusive_and_its_50th_the_median() -> None:
    rng = random.Random(276)
    for n in (2, 3, 10, 101, 1000):
        values = [rng.expovariate(0.1) for _ in range(n)]
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        for q in (1, 50, 95, 99):
            assert harness.percentile(values, q) == pytest.approx(cuts[q - 1])
        assert harness.median(values) == pytest.approx(statistics.median(values))


def test_the_result_line(capsys: pytest.CaptureFixture[str]) -> None:
    result = harness.report("demo", p99_ms=12.3456, ratio=1.0, count=3, engine="connect", lag_s=float("nan"),
                            tiny=0.000123456, big=123456.789, load=(1.24, 3.4))
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == ("p99_ms=12.35 ratio=1.0 count=3 engine=connect lag_s=nan tiny=0.0001235 big=123456.8 "
                       "load=1.24-3.4")
    assert json.loads(out[-2]) == result == {
        "benchmark": "demo", "p99_ms": 12.35, "ratio": 1.0, "count": 3, "engine": "connect", "lag_s": None,
        "tiny": 0.0001235, "big": 123456.8, "load": [1.24, 3.4]}
    assert harness.read_report("\n".join(["noise", *out])) == result


def test_the_result_line_always_has_the_load(capsys: pytest.CaptureFixture[str]) -> None:
    harness.report("demo", barriers=60)
    last = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(r"barriers=60 load=\d+\.\d", last), last
    harness.report("demo", load=(2.0, 2.0))
    assert capsys.readouterr().out.splitlines()[-1] == "load=2.0"
    with pytest.raises(ValueError):
        harness.read_report("barriers=60 load=1.0")


def test_load_is_the_one_minute_average() -> None:
    import os

    value = harness.load()
    assert value == round(value, 1) and value == pytest.approx(os.getloadavg()[0], abs=5.0)
    with harness.LoadWatch(every=0.01) as watch:
        time.sleep(0.1)
    assert len(watch.samples) >= 3
    low, high = watch.range
    assert low <= watch.mean <= high


def test_the_parser_has_the_shared_options() -> None:
    doc = "What it measures,\nin two lines.\n\nDetails no --help shows."
    options = harness.parser(doc, keep=True, remote=True, engine="submit", sqlite=True)
    assert options.description == "What it measures, in two lines."
    args = options.parse_args([])
    assert (args.keep, args.remote, args.engine, args.sqlite) == (None, None, "submit", False)
    args = options.parse_args(["--keep", "/tmp/x", "--remote", "sc://h:1", "--engine", "connect", "--sqlite"])
    assert (args.keep, args.remote, args.engine, args.sqlite) == ("/tmp/x", "sc://h:1", "connect", True)
    bare = harness.parser(doc).parse_args([])
    assert vars(bare) == {}


# ------------------------------------------------------------------------------------------ sources
def test_no_benchmark_touches_sys_path() -> None:
    """Every module is imported as ``benchmarks.NAME`` (``python -m`` from the repository's root)."""
    found = [f"{p.relative_to(REPO)}:{node.lineno}" for p in _sources() for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.Attribute) and node.attr == "path"
             and isinstance(node.value, ast.Name) and node.value.id == "sys"]
    assert found == []


#: a percentile, median or load of a benchmark's own (the harness has the one of each)
OWN_DEFINITIONS = re.compile(
    r"def (percentile|median|p9\d|_p9\d)\b|quantile|statistics\.median|\[\s*int\(\s*(len\(\w+\)\s*\*\s*)?0?\.\d"
    r"|getloadavg|/proc/loadavg")


def test_no_benchmark_defines_its_own_percentile_or_load() -> None:
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in _sources() if p.name != "harness.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if OWN_DEFINITIONS.search(line)]
    assert found == []


def test_the_scanner_finds_planted_definitions() -> None:
    planted = ["def percentile(values, q):", "def _p99(v):", "statistics.quantiles(v, n=100)",
               "p99 = sorted(times)[int(0.99 * (len(times) - 1))]", "ms[int(len(ms) * 0.99)]",
               "statistics.median(times)", "load = os.getloadavg()[0]"]
    assert [line for line in planted if not OWN_DEFINITIONS.search(line)] == []
    assert not OWN_DEFINITIONS.search("from benchmarks.harness import median, percentile")


def test_every_benchmark_reports_through_the_harness() -> None:
    assert len(SCRIPTS) >= 30, SCRIPTS
    missing = []
    for name in sorted(set(SCRIPTS) - APPLICATIONS):
        tree = ast.parse((BENCHMARKS / f"{name}.py").read_text())
        calls = {node.func.id for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
        if "report" not in calls or not {"parser", "chain_parser"} & calls:
            missing.append(name)
    assert missing == []


def test_the_docs_run_the_benchmarks_as_modules() -> None:
    """``make bench``, the README and the docs run ``python -m benchmarks.NAME``, never the file."""
    old = re.compile(r"python3? benchmarks/\w+\.py|\$\(PY\) benchmarks/")
    texts = [REPO / "Makefile", REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    found = [f"{p.relative_to(REPO)}:{n}" for p in texts for n, line in enumerate(p.read_text().splitlines(), 1)
             if old.search(line)]
    assert found == []
    bench = (REPO / "Makefile").read_text().split("\nbench:", 1)[1].split("\n\n", 1)[0]
    assert [m for m in re.findall(r"-m benchmarks\.(\w+)", bench) if m not in SCRIPTS] == []


# ------------------------------------------------------------------------------------------ --help
#: run in one child process from the repository's root: each benchmark as ``python -m`` runs it
#: (``runpy.run_module(..., run_name="__main__", alter_sys=True)``, ``sys.argv`` = NAME ``--help``),
#: its output captured; prints ``{name: [exit code, output]}`` as JSON. One interpreter for all
#: shares the imports (pyspark, deltalake, fastapi...): a process each took 46 s on the busy 2-core
#: machine (load 13), this 5 s.
HELP_DRIVER = """
import contextlib, io, json, runpy, sys
found = {}
for name in sys.argv[1:]:
    out, code = io.StringIO(), None
    sys.argv = [name, "--help"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            runpy.run_module("benchmarks." + name, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:
            code = repr(exc)
    found[name] = [code, out.getvalue()]
print(json.dumps(found))
"""


@pytest.mark.slow
def test_every_benchmark_runs_as_a_module() -> None:
    """Every benchmark's ``--help``, run as ``python -m benchmarks.NAME`` runs it, from the root."""
    done = subprocess.run([sys.executable, "-c", HELP_DRIVER, *SCRIPTS], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(found) == SCRIPTS
    failed = {name: out[-2000:] for name, (code, out) in found.items() if code not in (0, None) or "usage:" not in out}
    assert failed == {}
    wrong_usage = [name for name, (_, out) in found.items()
                   if name not in APPLICATIONS and f"usage: python -m benchmarks.{name}" not in out]
    assert wrong_usage == []


@pytest.mark.slow
def test_a_benchmark_runs_with_python_dash_m() -> None:
    """The command the docs give, in a process of its own: ``.venv/bin/python -m benchmarks.e2e_latency --help``."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.e2e_latency", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage: python -m benchmarks.e2e_latency") and "--engine" in done.stdout
