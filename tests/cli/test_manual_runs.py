"""``tsb root append``, ``tsb barrier create`` and ``tsb job run``: a topology's steps by hand, as
a developer runs them (each a ``tsb`` process; the job through ``spark-submit``, as the operator)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_tsb.consistency import ReadOptions
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.resolutions import to_arrow
from dev.e2e import spark_connection

REPO = Path(__file__).resolve().parents[2]
TSB = [sys.executable, "-m", "airflow_provider_tsb"]

DAG_FILE = '''
from airflow_provider_tsb.topology import Topology

CONF = {{"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}}

topology = Topology("wc", warehouse={warehouse!r})
topology.root_table("raw.words")
topology.job("wordcount_words", {apps!r} + "/wordcount_words.py", sources=["raw.words"],
             sinks=["wordcount.word_count"], conf=CONF)
topology.job("wordcount_counts", {apps!r} + "/wordcount_counts.py", sources=["wordcount.word_count"],
             sinks=["wordcount.count_of_counts"], conf=CONF)
'''


def tsb(*args: str, env: dict[str, str], ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([*TSB, *args], env=env, capture_output=True, text=True, timeout=600)
    if ok:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.spark
def test_a_topology_by_hand_from_root_append_to_a_consistent_read(spark_remote: str, tmp_path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    apps = str(REPO / "spark_apps" / "wordcount")
    (dags / "wc.py").write_text(DAG_FILE.format(warehouse=str(tmp_path / "wh"), apps=apps))
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    MetaStore(url).migrate()
    env = {**os.environ, "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection(spark_remote), "PYSPARK_PYTHON": sys.executable}
    env.pop("TSB_METASTORE_URL", None)
    words = tmp_path / "words.csv"
    words.write_text("word\nto\nbe\nor\nnot\nto\nbe\n")

    appended = json.loads(tsb("root", "append", "tsb.raw.words", str(words), "--dags", str(dags), "--run-key", "d1",
                              env=env).stdout)
    assert (appended["version"], appended["rows"], appended["appended"]) == (0, 6, True)
    again = json.loads(tsb("root", "append", "raw.words", str(words), "--dags", str(dags), "--run-key", "d1",
                           env=env).stdout)
    assert (again["version"], again["rows"], again["appended"]) == (0, 0, False)

    barrier = json.loads(tsb("barrier", "create", "wc", "--dags", str(dags), "--url", url, env=env).stdout)
    assert (barrier["barrier"], barrier["root_versions"]) == (1, {"tsb.raw.words": 0})

    # the second job before the first: its input is not WRITTEN at barrier 1, said before Spark starts
    early = tsb("job", "run", "wordcount_counts", "--barrier", "1", "--dags", str(dags), "--url", url, env=env,
                ok=False)
    assert early.returncode == 1 and "tsb.wordcount.word_count" in early.stderr and "barrier 1" in early.stderr

    for job in ("wordcount_words", "wordcount_counts"):
        run = json.loads(tsb("job", "run", job, "--barrier", "1", "--dags", str(dags), "--url", url, env=env).stdout)
        assert run["barriers"] == [1]

    store = MetaStore(url)
    tables = to_arrow(store.resolution.resolve(["tsb.wordcount.word_count", "tsb.wordcount.count_of_counts"],
                                      ReadOptions()))
    counts = dict(zip(*tables["tsb.wordcount.word_count"].select(["word", "cnt"]).to_pydict().values(), strict=True))
    assert counts == {"to": 2, "be": 2, "or": 1, "not": 1}
    assert sum(tables["tsb.wordcount.count_of_counts"].column("cnt2").to_pylist()) == len(counts)


def test_manual_runs_name_what_is_wrong(tmp_path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "wc.py").write_text(DAG_FILE.format(warehouse=str(tmp_path / "wh"), apps="/apps"))
    env = {**os.environ}
    missing = tsb("job", "run", "nope", "--barrier", "1", "--dags", str(dags), env=env, ok=False)
    assert missing.returncode == 1
    assert "job 'nope' is declared by no topology" in missing.stderr and "wordcount_words" in missing.stderr
    (tmp_path / "x.csv").write_text("word\na\n")
    sink = tsb("root", "append", "wordcount.word_count", str(tmp_path / "x.csv"), "--dags", str(dags), env=env,
               ok=False)
    assert "is not a root table of topology 'wc'" in sink.stderr and "tsb.raw.words" in sink.stderr
    bad = tsb("job", "run", "wordcount_words", "--barrier", "zero", "--dags", str(dags), env=env, ok=False)
    assert bad.returncode == 2 and "'zero' is not a barrier id" in bad.stderr
