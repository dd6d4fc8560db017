"""Exactly-once under SIGKILL: kill the app at each kill point, rerun, compare with a clean run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from deltalake import DeltaTable

from airflow_provider_tsb.delta import version_of_barrier
from airflow_provider_tsb.delta.conventions import parse_tag
from airflow_provider_tsb.delta.log import commit_info, latest_version, read_commit_actions
from airflow_provider_tsb.spark.catalog import read_report
from airflow_provider_tsb.spark.installation import CONNECT_MARKERS
from dev.dataplane import APPS, REPO, WORD_COUNT, make_wordcount_plan, rows_at_barrier


def run_app(plan: str, kill_at: str | None, remote: str | None) -> subprocess.CompletedProcess:
    """The app as its own process: a Spark Connect client of ``remote``, else its own driver."""
    env = {k: v for k, v in os.environ.items() if k not in ("TSB_KILL_AT", *CONNECT_MARKERS)}
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if remote:
        env["SPARK_REMOTE"] = remote
    if kill_at:
        env["TSB_KILL_AT"] = kill_at
    cmd = [sys.executable, str(APPS / "wordcount/wordcount_words.py"), "--plan", plan, "--report", plan + ".report"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def referenced_paths(location: str) -> set[str]:
    paths: set[str] = set()
    for version in range(latest_version(location) + 1):
        for action in read_commit_actions(location, version) or []:
            if "add" in action:
                paths.add(action["add"]["path"])
    return paths


def test_sigkill_at_every_point_then_rerun_is_exactly_once(spark, clean_wordcount, engine, tmp_path: Path) -> None:
    """Kill while writing barrier 1 (table creation), after the files of 2, after the commit of 3; on
    both engines (a killed Spark Connect client leaves its server-side work behind)."""
    plan, tables = make_wordcount_plan(tmp_path, 4)
    loc = tables[WORD_COUNT]
    for point, barrier in (("while_writing", 1), ("after_files", 2), ("after_commit", 3)):
        killed = run_app(plan, f"{point}:wordcount_words:{barrier}", engine.remote)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-3000:])
        report = read_report(plan + ".report")
        written = {w["barrier"] for w in report["written"]}
        assert barrier not in written
        if point == "while_writing":
            assert not Path(loc, "_delta_log").exists()
            # the attempt directory is left behind (its partial files may have been removed by
            # the JVM's shutdown hooks when the driver died, or not, as on a lost machine)
            assert list(Path(loc, "tsb_staging", "wordcount_words", "0", "1").iterdir())
        if point == "after_files":
            assert any(p["barrier"] == 2 and p["manifest"] for p in report["processed"])
            assert version_of_barrier(loc, 2) is None
        if point == "after_commit":
            assert rows_at_barrier(spark, loc, 3) == clean_wordcount[WORD_COUNT][3]
    rerun = run_app(plan, None, engine.remote)
    assert rerun.returncode == 0, rerun.stderr[-3000:]

    for b in (1, 2, 3, 4):
        assert rows_at_barrier(spark, loc, b) == clean_wordcount[WORD_COUNT][b]
    # no duplicate commits: each barrier tagged exactly once, txn at 4
    tags = [parse_tag(commit_info(loc, v)) for v in range(latest_version(loc) + 1)]
    assert sorted(t.barrier for t in tags if t) == [1, 2, 3, 4]
    assert DeltaTable(loc).transaction_version("tsb:wordcount_words") == 4
    # no orphan files: every staged file is referenced by the log
    staged = {str(p.relative_to(loc)) for p in Path(loc, "tsb_staging").rglob("*") if p.is_file()}
    assert staged == referenced_paths(loc)
    report = read_report(plan + ".report")
    assert sorted(w["barrier"] for w in report["written"]) == [1, 2, 3, 4]
