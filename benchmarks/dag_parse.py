"""Parse time of the example DAG files the way Airflow 3's dag-processor parses them (issue 23).

The dag-processor (``airflow dag-processor``) imports Airflow once, pre-imports the ``airflow.*``
modules a DAG file names (``[dag_processor] parsing_pre_import_modules``), then forks a child
per file that imports the file. Everything else the file pulls in (``airflow_provider_tsb`` and
its dependencies) is imported again in every child, every ``min_file_process_interval``; a
child slower than ``[core] dagbag_import_timeout`` (default 30 s) records an import error, which
marks the file's DAGs stale ("Deactivated", missing from the DAG list).

This does the same: a parent imports ``airflow.dag_processing.processor`` and ``airflow.models``,
then per file and run pre-imports the file's ``airflow.*`` imports (Airflow's own
``iter_airflow_imports``), forks, and the child times ``BundleDagBag(<file>)`` (the
dag-processor's ``DagBag``, which puts the file's folder, its bundle, on ``sys.path``: DAG files
import ``common.*`` from it). The baseline of the same run is a plain DAG file (an
``EmptyOperator``, no tsb import). Prints one line per file (median over ``--runs``), then last
line ``<file stem>_s=<median> ... baseline_s=<median> load=<1 min>``.

    .venv/bin/python -m benchmarks.dag_parse [--runs 3] [dags/*.py ...]
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import REPO, median, parser, report

BASELINE_DAG = '''
import pendulum
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG("plain_baseline", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
    EmptyOperator(task_id="nothing")
'''


def _child_parse(path: str, write_fd: int) -> None:
    """In the forked child: parse ``path`` with the dag-processor's DagBag (its folder the
    bundle), write "seconds dags errors"."""
    try:
        from airflow.dag_processing.dagbag import BundleDagBag

        start = time.perf_counter()
        bag = BundleDagBag(dag_folder=path, bundle_path=Path(path).parent, safe_mode=False)
        took = time.perf_counter() - start
        if bag.import_errors:
            print(f"{path}: {bag.import_errors}", file=sys.stderr)
        os.write(write_fd, f"{took} {len(bag.dags)} {len(bag.import_errors)}".encode())
    finally:
        os._exit(0)  # never return into the parent's loop


def parse_once(path: str) -> tuple[float, int, int]:
    """(seconds, DAGs found, import errors) of one dag-processor-like parse of ``path``."""
    from airflow.utils.file import iter_airflow_imports

    for module in iter_airflow_imports(path):  # what the dag-processor pre-imports in the parent
        importlib.import_module(module)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child_parse(path, write_fd)
    os.close(write_fd)
    os.waitpid(pid, 0)
    out = os.read(read_fd, 200).decode().split()
    os.close(read_fd)
    if len(out) != 3:
        raise RuntimeError(f"parsing {path} failed in the child (no result)")
    return float(out[0]), int(out[1]), int(out[2])


def median_parse_s(path: str, runs: int) -> tuple[float, int, int]:
    """Median parse seconds over ``runs`` forks, and the DAG / import error counts of the last.

    Raises:
        RuntimeError: the file had import errors (a DAG file that does not parse is no figure).
    """
    times, dags, errors = [], 0, 0
    for _ in range(runs):
        took, dags, errors = parse_once(path)
        times.append(took)
    if errors:
        raise RuntimeError(f"{path}: {errors} import error(s); fix the DAG file first")
    return median(times), dags, errors


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see module docstring). Returns the exit code."""
    options = parser(__doc__)
    options.add_argument("--runs", type=int, default=3, help="forked parses per file (median reported)")
    options.add_argument("files", nargs="*", help="DAG files (default: dags/*.py)")
    args = options.parse_args(argv)
    files = args.files or sorted(str(p) for p in (REPO / "dags").glob("*.py"))
    with tempfile.TemporaryDirectory(prefix="tsb-dag-parse-") as tmp:
        os.environ.setdefault("AIRFLOW_HOME", tmp)
        os.environ.setdefault("TSB_WAREHOUSE", str(Path(tmp) / "warehouse"))
        importlib.import_module("airflow.models")  # what the dag-processor itself has imported
        importlib.import_module("airflow.dag_processing.processor")
        baseline_file = Path(tmp) / "plain_baseline.py"
        baseline_file.write_text(BASELINE_DAG)
        figures = {}
        for path in [str(baseline_file), *files]:
            seconds, dags, _ = median_parse_s(path, args.runs)
            figures[Path(path).stem] = seconds
            print(f"{Path(path).name}: {seconds:.3f} s ({dags} DAG(s), median of {args.runs})")
    baseline = figures.pop("plain_baseline")
    report("dag_parse", **{f"{k}_s": round(v, 3) for k, v in figures.items()}, baseline_s=round(baseline, 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
