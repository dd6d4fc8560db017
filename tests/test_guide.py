"""The user guide (docs/guide.md) works as written: its files are written and its commands run,
in order, in an empty folder, the way a reader follows it (issue 11)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.S | re.M)


def guide_steps(text: str) -> list[tuple[str, str, str]]:
    """``[(kind, target, body)]``: ``("file", path, content)`` for a ``python file=PATH`` block,
    ``("bash", "", script)`` for a ``bash`` block, in the order of the guide."""
    steps = []
    for lang, info, body in FENCE.findall(text):
        target = re.search(r"file=(\S+)", info)
        if target:
            steps.append(("file", target.group(1), body))
        elif lang == "bash":
            steps.append(("bash", "", body))
    return steps


def test_the_guide_has_what_the_test_runs() -> None:
    steps = guide_steps(GUIDE.read_text())
    files = [t for kind, t, _ in steps if kind == "file"]
    assert files == ["dags/readings_topology.py", "dags/readings_dag.py", "apps/clean_readings.py",
                     "apps/sensor_stats.py", "read_stats.py"]
    assert sum(kind == "bash" for kind, _, _ in steps) >= 6


@pytest.mark.spark
def test_the_guide_runs_as_written(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TSB_", "AIRFLOW_CONN_"))}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["AIRFLOW_HOME"] = str(tmp_path / "airflow")
    script = ["set -euo pipefail"]
    for kind, target, body in guide_steps(GUIDE.read_text()):
        if kind == "file":
            path = tmp_path / target
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
        else:
            script.append(body)
    proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert "clean readings: 5 sensors: ['s1', 's2', 's3']" in out
    assert "at barrier 1: 3 clean readings" in out
    assert '"barriers": [2]' in out
