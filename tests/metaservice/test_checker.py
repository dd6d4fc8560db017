"""`tsb check`: the wordcount and flights topologies run while readers query every level.

Real Spark jobs, real Delta tables, a real metastore, readers in concurrent threads. The
invariants must hold at REPEATABLE_READ and AS OF every time; READ_UNCOMMITTED must show
anomalies, which proves the checker can catch them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_tsb.checker import WORDCOUNT_INVARIANTS, ConsistencyChecker

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.spark
def test_tsb_check_counts_anomalies_per_level(tmp_path: Path) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run(
        [sys.executable, "-m", "airflow_provider_tsb", "check", "--output", str(tmp_path / "summary.json"),
         "--wordcount-barriers", "3", "--flights-barriers", "2", "--workdir", str(tmp_path / "check")],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) == {"READ_UNCOMMITTED", "READ_COMMITTED", "REPEATABLE_READ", "AS_OF"}
    for level in ("REPEATABLE_READ", "AS_OF"):
        assert summary[level]["samples"] >= 20, summary[level]
        assert summary[level]["anomalies"] == 0, summary[level]["examples"]
    assert summary["READ_UNCOMMITTED"]["anomalies"] > 0
    assert "violated" in summary["READ_UNCOMMITTED"]["examples"][0]
    assert "wordcount: barrier 3 committed in every table" in out.stdout
    assert "flights: barrier 2 committed in every table" in out.stdout
    assert "REPEATABLE_READ" in out.stdout and "anomalies" in out.stdout


def test_checker_rejects_unknown_level(store) -> None:
    try:
        ConsistencyChecker(store, WORDCOUNT_INVARIANTS, levels=["SERIALIZABLE"])
    except ValueError as exc:
        assert "unknown level(s) ['SERIALIZABLE']" in str(exc)
    else:
        raise AssertionError("an unknown level was accepted")
