"""`tsb check`: the wordcount and flights topologies run while readers query every level.

Real Spark jobs, real Delta tables, a real metastore, readers in concurrent threads. The
invariants must hold at READ_COMMITTED, REPEATABLE_READ and AS OF every time; READ_UNCOMMITTED
must show anomalies, which proves the checker can catch them. With ``--kill`` the jobs are
``spark-submit`` processes killed at kill points and retried (issue 12 item 3).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.exceptions import StagedFilesGoneError
from airflow_provider_tsb.maintenance.checker import WORD_COUNT, WORDCOUNT_INVARIANTS, WORDS, ConsistencyChecker
from airflow_provider_tsb.metastore.records import BarrierState, Resolution, TableVersion
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.readers import read_tables_arrow
from airflow_provider_tsb.read.resolutions import to_arrow
from airflow_provider_tsb.spark.metastore_catalog import MetastoreCatalog
from airflow_provider_tsb.spark.outputs import collect_withdrawn

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.spark
def test_tsb_check_counts_anomalies_per_level(spark_remote: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_REMOTE": spark_remote}
    out = subprocess.run(
        [sys.executable, "-m", "airflow_provider_tsb", "check", "--output", str(tmp_path / "summary.json"),
         "--wordcount-barriers", "3", "--flights-barriers", "2", "--workdir", str(tmp_path / "check")],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) == {"READ_UNCOMMITTED", "READ_COMMITTED", "REPEATABLE_READ", "AS_OF"}
    for level in ("READ_COMMITTED", "REPEATABLE_READ", "AS_OF"):
        assert summary[level]["samples"] >= 20, summary[level]
        assert summary[level]["anomalies"] == 0, summary[level]["examples"]
    assert summary["READ_UNCOMMITTED"]["anomalies"] > 0
    assert "violated" in summary["READ_UNCOMMITTED"]["examples"][0]
    assert "wordcount: barrier 3 committed in every table" in out.stdout
    assert "flights: barrier 2 committed in every table" in out.stdout
    assert "REPEATABLE_READ" in out.stdout and "anomalies" in out.stdout


@pytest.mark.spark
def test_tsb_check_kill_and_retry_has_no_anomaly_at_read_committed(engine, tmp_path: Path) -> None:
    """Each job is SIGKILLed once (wordcount_words after PROCESSED, wordcount_counts after its
    commit) and retried, on both engines; a READ_COMMITTED answer resolved between the kill and
    the retry is read after the retry's cleanup (the forced order of issue 12 item 3). Before the
    fix the retry deleted the dead attempt's files first and that read raised FileNotFoundError."""
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    env.update(PYSPARK_PYTHON=sys.executable, **({"SPARK_REMOTE": engine.remote} if engine.remote else {}))
    workdir = tmp_path / "check"
    out = subprocess.run(
        [sys.executable, "-m", "airflow_provider_tsb", "check", "--kill", "--output", str(tmp_path / "summary.json"),
         "--wordcount-barriers", "1", "--flights-barriers", "0", "--interval", "0.2", "--workdir", str(workdir)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600,
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert out.returncode == 0, (summary, out.stderr[-3000:])
    assert sorted(p.name for p in (workdir / "killed").iterdir()) == [
        "after_commit-wordcount_counts-1", "after_files-wordcount_words-1",
    ]
    for level in ("READ_COMMITTED", "REPEATABLE_READ", "AS_OF"):
        assert summary[level]["anomalies"] == 0, summary[level]["examples"]
    assert summary["READ_COMMITTED"]["samples"] >= 5, summary["READ_COMMITTED"]
    assert "wordcount: barrier 1 committed in every table" in out.stdout
    _withdrawn_attempt_outlives_the_retry_then_goes(workdir)


def _withdrawn_attempt_outlives_the_retry_then_goes(workdir: Path) -> None:
    """After the run: the killed attempt of word_count is withdrawn, not deleted, until the grace
    period is over; then the job's garbage-collection step deletes it, and a reader still holding
    its manifest gets StagedFilesGoneError (the readers resolve again), never FileNotFoundError."""
    url = f"sqlite:///{workdir / 'tsb.db'}"
    store = MetaStore(url)
    location = Path(store.registry.table(WORD_COUNT).location)
    withdrawn = store.table_states.due_withdrawn_staging(WORD_COUNT, grace_s=0)
    assert [barrier for _, barrier in withdrawn] == [1], withdrawn
    assert store.table_states.due_withdrawn_staging(WORD_COUNT, grace_s=600) == []
    dead = location / withdrawn[0][0]
    files = [{"path": f"{withdrawn[0][0]}/{p.name}"} for p in sorted(dead.glob("*.parquet"))]
    assert files, f"the killed attempt's files are gone already: {dead}"
    held = Resolution(ConsistencyLevel.READ_COMMITTED, 1, {WORD_COUNT: TableVersion(
        WORD_COUNT, str(location), None, 1, BarrierState.PROCESSED, staged={"mode": "overwrite", "files": files})})
    assert to_arrow(held)[WORD_COUNT].num_rows > 0  # the old answer still reads
    assert collect_withdrawn(str(location), WORD_COUNT, MetastoreCatalog(url), grace_s=0) == 1
    assert not dead.exists() and store.table_states.due_withdrawn_staging(WORD_COUNT, grace_s=0) == []
    with pytest.raises(StagedFilesGoneError, match=r"barrier 1 .*staged file .* is gone.*Resolve again"):
        to_arrow(held)
    with pytest.raises(StagedFilesGoneError):
        read_tables_arrow([WORD_COUNT], resolution=held)
    fresh = read_tables_arrow([WORDS, WORD_COUNT], ConsistencyLevel.READ_COMMITTED, store=store)
    assert pc.sum(fresh[WORD_COUNT].column("cnt")).as_py() == fresh[WORDS].num_rows > 0
    store.dispose()


def test_checker_rejects_unknown_level(store) -> None:
    try:
        ConsistencyChecker(store, WORDCOUNT_INVARIANTS, levels=["SERIALIZABLE"])
    except ValueError as exc:
        assert "unknown level(s) ['SERIALIZABLE']" in str(exc)
    else:
        raise AssertionError("an unknown level was accepted")
