"""CPU seconds each kind of process used over a window, from ``/proc`` (Linux): run it next to
a benchmark to see where the machine's cores go.

Classes: the Spark Connect server's JVM, Spark's Python workers, the job clients (their
application path contains ``--job`` text, default ``scale_stage``), PostgreSQL, the benchmark
harness (``--harness`` text, default ``barrier_rate``), and the rest by executable.

    .venv/bin/python -m benchmarks.cpu_share 60 [--job scale_stage] [--harness barrier_rate]

Prints one line per class, ``<class> <cpu_s> cpu_s (<percent> of one core)``, then last line
``elapsed=<s> load=<1-min load>``.
"""

from __future__ import annotations

import collections
import os
import sys
import time

from benchmarks.harness import parser, report


def cpu_ticks() -> dict[str, tuple[int, str]]:
    """``{pid: (user + system clock ticks, command line)}`` of every process readable now."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as stat, open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                fields = stat.read().rsplit(")", 1)[1].split()
                cmd = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        out[pid] = (int(fields[11]) + int(fields[12]), cmd)
    return out


def classify(cmd: str, job: str, harness: str) -> str:
    """The class of a command line (module doc)."""
    if "SparkConnectServer" in cmd:
        return "connect_server_jvm"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
        return "pyspark_workers"
    if job in cmd:
        return "job_clients"
    if "postgres" in cmd:
        return "postgresql"
    if harness in cmd:
        return "harness"
    return "other:" + os.path.basename(cmd.split(" ")[0])


def main() -> int:
    options = parser(__doc__)
    options.add_argument("seconds", type=float, help="length of the window")
    options.add_argument("--job", default="scale_stage", help="text in the job clients' command lines")
    options.add_argument("--harness", default="barrier_rate", help="text in the harness's command line")
    args = options.parse_args()
    before, started = cpu_ticks(), time.monotonic()
    time.sleep(args.seconds)
    after, elapsed = cpu_ticks(), time.monotonic() - started
    hz = os.sysconf("SC_CLK_TCK")
    used: collections.Counter[str] = collections.Counter()
    for pid, (ticks, cmd) in after.items():
        used[classify(cmd, args.job, args.harness)] += (ticks - before.get(pid, (0, ""))[0]) / hz
    for name, seconds in used.most_common(10):
        print(f"{name} {seconds:.1f} cpu_s ({100 * seconds / elapsed:.0f}% of one core)")
    report("cpu_share", elapsed=round(elapsed, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
