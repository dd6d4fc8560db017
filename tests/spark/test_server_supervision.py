"""The one Spark is supervised: a SIGKILL of the Connect server mid-barrier ends its streaming job
in seconds, with the server's URL and log named, the supervisor brings the server back, and
the job's retry commits every barrier exactly once.

Before, the job stayed alive and silent for pyspark's ten minutes of retries (the first job
logged ``[RETRIES_EXCEEDED]`` after 611 s, and the downstream ones nothing at all), nothing
restarted the server, and recovery was by hand.

The server runs as users run it: ``tsb spark start --supervise`` in a process of its own, with
its own state folder (never the test session's shared server). The job runs as the operator
runs it on the ``connect`` engine: its own client process, streaming, on the metastore catalog.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.hooks.barrier import read_root_versions
from airflow_provider_tsb.spark.server_watch import SERVER_LOST_EXIT, ServerWatch, ServerWatchOptions
from dev.job_processes import job_command, job_env, supervised_server, wordcount_deployment
from dev.local_airflow import free_port
from tsb_examples.ingest import ingest_next_words

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB, SINK = "wordcount_words", "wordcount.word_count"


def _written(store: object, barrier: int) -> bool:
    state = store.table_states.get(SINK, barrier)  # type: ignore[attr-defined]
    return state is not None and state.state == "WRITTEN"


def _wait(what: str, ok: object, timeout: float, *logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while not ok():  # type: ignore[operator]
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p}:\n{p.read_text()[-2500:]}" for p in logs if p.exists())
            raise AssertionError(f"{what} within {timeout} s\n{tails}")
        time.sleep(0.5)


def _barrier(dep: object, n: int) -> None:
    topology = dep.topology  # type: ignore[attr-defined]
    ingest_next_words(topology.location("raw.words"), f"t/{n}", lines=10)
    dep.store.barriers.create(topology.name, read_root_versions(topology), run_key=f"t/{n}")  # type: ignore[attr-defined]


def test_a_killed_server_ends_its_job_in_seconds_and_the_retry_commits_every_barrier_once(tmp_path: Path) -> None:
    job: subprocess.Popen | None = None
    with supervised_server(tmp_path, master="local[1]") as server:
        home, url, first_pid = server.home, server.url, server.record()["pid"]
        try:
            dep = wordcount_deployment(tmp_path, f"sqlite:///{tmp_path / 'tsb.db'}", barriers=1, lines=10)
            command = job_command(dep, JOB, 3, url)
            command[command.index("batch")] = "streaming"
            command += ["--idle-timeout", "180", "--trigger-interval", "0.2"]
            env = job_env(dep.url, url, TSB_SPARK_HOME=str(home))
            job_log = tmp_path / "job.log"
            with job_log.open("w") as out:
                job = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
            _wait("barrier 1 is WRITTEN", lambda: _written(dep.store, 1), 240, job_log)
            _barrier(dep, 2)
            time.sleep(1.0)  # the job is on barrier 2 (its micro-batch, or its poll for it)
            os.kill(first_pid, signal.SIGKILL)
            killed_at = time.monotonic()
            assert job.wait(timeout=90) == SERVER_LOST_EXIT, job_log.read_text()[-3000:]
            noticed_s = time.monotonic() - killed_at
            assert noticed_s < 30, f"the job noticed the dead server after {noticed_s:.0f} s"
            output = job_log.read_text()
            assert f"job {JOB}: the Spark Connect server {url}" in output, output[-3000:]
            assert str(home / "server.log") in output and "tsb spark start --supervise" in output, output[-3000:]
            with job_log.open("a") as out:  # the retry, as Airflow's runs it a second later: the same command
                job = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
            _wait("the supervisor restarts the server", lambda: server.restarted(first_pid), 240,
                  server.supervisor_log)
            _barrier(dep, 3)
            assert job.wait(timeout=300) == 0, job_log.read_text()[-3000:]
        finally:
            if job is not None and job.poll() is None:
                job.kill()
    assert all(_written(dep.store, b) for b in (1, 2, 3))
    words = Counter(DeltaTable(dep.location("raw.words")).to_pyarrow_table().column("word").to_pylist())
    counts = {r["word"]: r["cnt"] for r in DeltaTable(dep.location(SINK)).to_pyarrow_table().to_pylist()}
    assert counts == dict(words)  # 0 lost, 0 counted twice
    assert not (home / "server.json").exists()  # SIGTERM stopped the supervisor and its server


def test_the_watch_names_a_server_that_refuses_connections_and_one_restarted_under_it(tmp_path: Path) -> None:
    """The watch's two findings, without a Spark: nothing listens (after its budget), and the local
    server's record names another process (at once: the job's session died with the old one)."""
    import socket

    lost: list[str] = []
    port = free_port()
    watch = ServerWatch(f"sc://127.0.0.1:{port}", "j", ServerWatchOptions(interval_s=0.1, budget_s=0.5),
                        on_lost=lost.append, home=tmp_path)
    watch.start()
    _wait("the watch reports", lambda: lost, 10)
    assert lost[0].startswith(f"job j: the Spark Connect server sc://127.0.0.1:{port} refuses connections")
    assert "its log: the Spark Connect server's own log" in lost[0]

    listener = socket.create_server(("127.0.0.1", port))
    try:
        record = {"pid": 1, "url": f"sc://127.0.0.1:{port}", "log": str(tmp_path / "server.log")}
        (tmp_path / "server.json").write_text(json.dumps(record))
        lost.clear()
        watch = ServerWatch(record["url"], "j", ServerWatchOptions(interval_s=0.1, budget_s=60),
                            on_lost=lost.append, home=tmp_path).start()
        time.sleep(0.5)
        assert lost == []  # it answers: nothing to say
        (tmp_path / "server.json").write_text(json.dumps({**record, "pid": 2}))
        _wait("the watch sees the restart", lambda: lost, 10)
        watch.stop()
    finally:
        listener.close()
    assert "was restarted (pid 1 -> 2)" in lost[0] and f"its log: {tmp_path / 'server.log'}" in lost[0]
    with pytest.raises(ValueError, match=r"TSB_SPARK_WATCH_SECONDS='soon'"):
        os.environ["TSB_SPARK_WATCH_SECONDS"] = "soon"
        try:
            ServerWatchOptions.from_env()
        finally:
            del os.environ["TSB_SPARK_WATCH_SECONDS"]


#: a job of the wordcount topology whose query exhausts the server's heap: every word's text
#: gathered into one list, 40 million long (several GB on a 512 MB heap)
HEAP_BOMB = '''
import sys
from pyspark.sql import functions as F
from airflow_provider_tsb.spark import Sink, TsbApp, run_app

def process(ctx):
    big = ctx.spark.range(0, 40_000_000).select(F.concat(F.lit("x" * 100), F.col("id").cast("string")).alias("s"))
    big.agg(F.collect_list("s")).collect()
    return {}

APP = TsbApp(job_id="wordcount_counts", sources={"wordcount.word_count": None},
             sinks={"wordcount.count_of_counts": Sink(mode="overwrite", schema="cnt long, cnt2 long")}, process=process)

if __name__ == "__main__":
    sys.exit(run_app(APP))
'''


def test_a_job_that_exhausts_the_heap_is_named_and_the_others_resume(tmp_path: Path) -> None:
    """Issue 57 item 3: one job's query exhausted the shared server's heap; the server spent two
    minutes stopping its SparkContext, the guilty job saw only "Cannot call methods on a stopped
    SparkContext" and every other job hung. The server now exits on an OutOfMemoryError
    (``-XX:+ExitOnOutOfMemoryError``), its supervisor starts it again, the guilty job and the
    innocent one end naming the memory, and the innocent one's retry commits every barrier once."""
    jobs: list[subprocess.Popen] = []
    with supervised_server(tmp_path, master="local[1]", options=("--driver-memory", "512m")) as server:
        home, url, first_pid = server.home, server.url, server.record()["pid"]
        try:
            dep = wordcount_deployment(tmp_path, f"sqlite:///{tmp_path / 'tsb.db'}", barriers=1, lines=10)
            env = job_env(dep.url, url, TSB_SPARK_HOME=str(home))
            innocent_cmd = job_command(dep, JOB, 3, url)
            innocent_cmd[innocent_cmd.index("batch")] = "streaming"
            innocent_cmd += ["--idle-timeout", "240", "--trigger-interval", "0.2"]
            innocent_log, guilty_log = tmp_path / "innocent.log", tmp_path / "guilty.log"
            with innocent_log.open("w") as out:
                jobs.append(subprocess.Popen(innocent_cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                             cwd=tmp_path))
            _wait("barrier 1 is WRITTEN", lambda: _written(dep.store, 1), 240, innocent_log)
            bomb = tmp_path / "heap_bomb.py"
            bomb.write_text(HEAP_BOMB)
            guilty_cmd = [sys.executable, str(bomb), *job_command(dep, "wordcount_counts", 1, url)[2:]]
            with guilty_log.open("w") as out:
                jobs.append(subprocess.Popen(guilty_cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path))
            innocent, guilty = jobs
            assert guilty.wait(timeout=240) != 0, guilty_log.read_text()[-3000:]
            assert innocent.wait(timeout=90) == SERVER_LOST_EXIT, innocent_log.read_text()[-3000:]
            for name, log in (("wordcount_counts", guilty_log), (JOB, innocent_log)):
                text = log.read_text()
                said = f"job {name}: the Spark Connect server {url}"
                assert said in text and "ran out of memory (java.lang.OutOfMemoryError: Java heap space, heap 512m)" \
                    in text, (name, text[-3000:])
            _wait("the supervisor restarts the server",
                  lambda: server.record().get("pid") not in (None, first_pid), 240, server.supervisor_log)
            with innocent_log.open("a") as out:  # the innocent job's retry, as Airflow runs it
                jobs.append(subprocess.Popen(innocent_cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                             cwd=tmp_path))
            _barrier(dep, 2)
            _barrier(dep, 3)
            assert jobs[-1].wait(timeout=300) == 0, innocent_log.read_text()[-3000:]
        finally:
            for job in jobs:
                if job.poll() is None:
                    job.kill()
    words = Counter(DeltaTable(dep.location("raw.words")).to_pyarrow_table().column("word").to_pylist())
    counts = {r["word"]: r["cnt"] for r in DeltaTable(dep.location(SINK)).to_pyarrow_table().to_pylist()}
    assert counts == dict(words)  # 0 lost, 0 counted twice
