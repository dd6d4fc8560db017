"""The user guide (docs/guide.md) works as written: its files are written and its commands run,
in order, in an empty folder, the way a reader follows it (issue 11)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.guide import WHO, guide_steps


def test_the_guide_has_what_the_test_runs() -> None:
    steps = guide_steps()
    files = [t for kind, t, _ in steps if kind == "file"]
    assert files == ["dags/readings_topology.py", "dags/readings_dag.py", "apps/clean_readings.py",
                     "apps/sensor_stats.py", "dags/readings_streaming_dag.py", "read_stats.py"]
    assert sum(kind == "bash" for kind, _, _ in steps) >= 6


@pytest.mark.spark
def test_the_guide_runs_as_written(followed_guide: tuple[Path, subprocess.CompletedProcess]) -> None:
    _, proc = followed_guide
    assert proc.returncode == 0, proc.stderr[-4000:]
    installed = proc.stdout.split(WHO, 1)[1].split()[0]
    if os.environ.get("TSB_GUIDE_VENV"):  # the wheel, installed outside the checkout (.ci/run)
        assert installed.startswith(os.environ["TSB_GUIDE_VENV"]) and "/site-packages/" in installed, installed
    assert "stopped the Spark Connect server" in proc.stdout
    assert "clean readings: 5 sensors: ['s1', 's2', 's3']" in proc.stdout
    assert "at barrier 1: 3 clean readings" in proc.stdout
    assert '"barriers": [2]' in proc.stdout
