"""The streaming flights topology on a busy machine (issue 21 item 4).

Starts ``--hogs`` CPU hogs (busy Python loops, the load of other work on an Airflow worker) and
waits until the 1-minute load average reaches ``--load``, then runs ``e2e_latency`` for each
engine (``python -m benchmarks.e2e_latency``, its result read from its report): the three
flights jobs as streaming jobs the way the operator starts them, a barrier every ``--interval``
seconds, ``--barriers`` barriers plus the final one. A job process that exits before the final
barrier is a failed attempt (Airflow would retry it); the benchmark counts them and checks that
every barrier reached COMMIT with the invariants holding.

Prints each engine's output, then reports one result per engine (the last engine's last):
``engine=<e> load=<1-min load average during the run, mean> barriers=<committed> failed_attempts=<n>
e2e_median_s=<s> e2e_p95_s=<s>``.

    .venv/bin/python -m benchmarks.under_load [--barriers 30] [--hogs 10] [--load 8] [--engines connect,submit]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO, LoadWatch, load, module_command, parser, read_report, report

HOG = "import os\nos.nice(0)\nwhile True:\n    pass\n"


def start_hogs(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` busy loops at normal priority."""
    return [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(count)]


def wait_for_load(target: float, timeout_s: float = 240) -> float:
    """Wait until the 1-minute load average is at least ``target``; the load reached."""
    deadline = time.monotonic() + timeout_s
    while load() < target and time.monotonic() < deadline:
        time.sleep(2)
    return load()


def run_engine(engine: str, barriers: int, interval: float, root: Path) -> dict[str, Any]:
    """Run ``e2e_latency`` on ``engine`` under ``root``; its figures, the load and the failed
    attempts."""
    command = module_command("e2e_latency", "--engine", engine, "--barriers", str(barriers),
                             "--interval", str(interval), "--keep", str(root))
    with (root.parent / f"{engine}.out").open("w") as out, LoadWatch() as loads:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        proc.wait()
    text = (root.parent / f"{engine}.out").read_text()
    try:
        figures = read_report(text) if proc.returncode == 0 else {}
    except ValueError:
        figures = {}
    # e2e_latency stops at the first job process that exits before the final barrier
    failed = 0 if proc.returncode == 0 else max(1, text.count("stopped before the final barrier"))
    print(text[-2500:], flush=True)
    return {"engine": engine, "load": loads.mean, "barriers": figures.get("barriers", 0), "failed_attempts": failed,
            "e2e_median_s": figures.get("e2e_median_s"), "e2e_p95_s": figures.get("e2e_p95_s")}


def main() -> int:
    options = parser(__doc__, keep=True)
    options.add_argument("--barriers", type=int, default=30)
    options.add_argument("--interval", type=float, default=2.0, help="seconds between barriers (at least)")
    options.add_argument("--hogs", type=int, default=10, help="busy loops to start")
    options.add_argument("--load", type=float, default=8.0, help="1-minute load average to reach first")
    options.add_argument("--engines", default="connect,submit")
    args = options.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tsb-under-load-"))
    hogs = start_hogs(args.hogs)
    rows = []
    try:
        print(f"load average {wait_for_load(args.load):.1f} with {args.hogs} hogs", flush=True)
        for engine in [e for e in args.engines.split(",") if e]:
            rows.append(run_engine(engine, args.barriers, args.interval, base / engine))
    finally:
        for hog in hogs:
            hog.kill()
    for row in rows:
        report("under_load", **row)
    return 0 if all(r["failed_attempts"] == 0 and r["barriers"] == args.barriers for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
