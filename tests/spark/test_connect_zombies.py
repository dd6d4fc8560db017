"""A killed Spark Connect client's work does not outlive its retry.

Spark Connect finishes a dead client's running operations on the server: a job killed while its
barrier's write runs would still land files after its retry started (measured by hand on this
machine: a SIGKILLed client's write completed 64 s after the kill). So each attempt records its
session id in the metastore with its fencing token, and the next attempt interrupts and releases
that session before it writes anything (``interrupt_session``).
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from airflow_provider_tsb.metastore.models import JobRow
from dev.job_processes import REPO, job_command, job_env, wordcount_deployment

JOB = "wordcount_words"

#: the wordcount_words app, killed (SIGKILL) while it plans its first barrier's output, once its
#: attempt and Spark Connect session are recorded
KILLED_APP = '''
import os, signal, sys
sys.path.insert(0, {apps!r})
from airflow_provider_tsb.spark import TsbApp, run_app
import wordcount_words as base

def process(ctx):
    os.kill(os.getpid(), signal.SIGKILL)

APP = TsbApp(job_id=base.APP.job_id, sources=base.APP.sources, sinks=base.APP.sinks, process=process)
if __name__ == "__main__":
    sys.exit(run_app(APP))
'''


def _spark_session(dep: object, job_id: str) -> str | None:
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    with Session(dep.store.engine) as s:  # type: ignore[attr-defined]
        return s.scalar(select(JobRow.spark_session).where(JobRow.id == job_id))


def _session_closed(url: str, session_id: str) -> bool:
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    from airflow_provider_tsb.spark.session import _with_param

    probe = SparkSession.builder.remote(_with_param(url, "session_id", session_id)).create()
    try:
        probe.range(1).count()
    except PySparkException as exc:
        return "SESSION_CLOSED" in str(exc)
    finally:
        probe.client.close()
    return False


def test_the_retry_releases_the_killed_attempts_session(spark_remote: str, tmp_path: Path) -> None:
    """Attempt 1 dies (SIGKILL) mid-barrier; attempt 2 records its own session and closes the first's."""
    dep = wordcount_deployment(tmp_path, f"sqlite:///{tmp_path / 'tsb.db'}", barriers=1, lines=10)
    app = tmp_path / "killed_wordcount_words.py"
    app.write_text(KILLED_APP.format(apps=str(REPO / "spark_apps" / "wordcount")))
    real = dep.topology.jobs[JOB].application
    killed_cmd = [str(app) if arg == real else arg for arg in job_command(dep, JOB, 1, spark_remote)]
    killed = subprocess.run(killed_cmd, env=job_env(dep.url, spark_remote), capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    first = _spark_session(dep, JOB)
    assert first and dep.store.job_runs.fencing_token(JOB) == 1
    assert not _session_closed(spark_remote, first)  # the dead client's session lives on the server

    retry = subprocess.run(job_command(dep, JOB, 1, spark_remote), env=job_env(dep.url, spark_remote),
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert retry.returncode == 0, retry.stderr[-3000:]
    second = _spark_session(dep, JOB)
    assert second and second != first and dep.store.job_runs.fencing_token(JOB) == 2
    assert _session_closed(spark_remote, first)
    dep.store.dispose()


@pytest.mark.timeout(300)
def test_interrupt_session_stops_another_clients_running_operation(spark_remote: str) -> None:
    """What the retry does to the dead attempt's session: its running operation is cancelled."""
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from airflow_provider_tsb.spark.session import interrupt_session

    other = SparkSession.builder.remote(spark_remote).create()
    outcome: dict[str, object] = {}

    def long_action() -> None:  # minutes of work on 2 cores
        began = time.monotonic()
        try:
            other.range(0, 10**12, numPartitions=4).select(F.sum(F.hash("id"))).collect()
            outcome["error"] = None
        except PySparkException as exc:
            outcome["error"] = str(exc)
        outcome["seconds"] = time.monotonic() - began

    worker = threading.Thread(target=long_action)
    worker.start()
    time.sleep(4)
    interrupted = interrupt_session(spark_remote, other.session_id)
    worker.join(timeout=120)
    assert not worker.is_alive()
    assert len(interrupted) == 1, interrupted
    assert outcome["error"] and "OPERATION_CANCELED" in str(outcome["error"]) or "SESSION_CLOSED" in str(
        outcome["error"]
    ), outcome
    assert float(outcome["seconds"]) < 60  # type: ignore[arg-type]
    assert _session_closed(spark_remote, other.session_id)
    other.client.close()


#: the wordcount_words app, held in its first barrier's process() until ``<dir>/go`` exists
#: (it writes ``<dir>/waiting`` first), so that another attempt takes over meanwhile
HELD_APP = '''
import os, sys, time
from pathlib import Path
sys.path.insert(0, {apps!r})
from airflow_provider_tsb.spark import TsbApp, run_app
import wordcount_words as base

def process(ctx):
    folder = Path({folder!r})
    (folder / "waiting").touch()
    deadline = time.monotonic() + 240
    while not (folder / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return base.process(ctx)

APP = TsbApp(job_id=base.APP.job_id, sources=base.APP.sources, sinks=base.APP.sinks, process=process)
if __name__ == "__main__":
    sys.exit(run_app(APP))
'''


def test_a_fenced_attempt_on_connect_ends_with_fenced_error(spark_remote: str, tmp_path: Path) -> None:
    """Issue 57 item 3: the attempt that takes over closes the older attempt's Spark Connect
    session; the older one used to die with ``[INVALID_HANDLE.SESSION_CLOSED]``. It ends with
    ``FencedError`` naming the attempt that won, and the barrier is committed once."""
    dep = wordcount_deployment(tmp_path, f"sqlite:///{tmp_path / 'tsb.db'}", barriers=1, lines=10)
    app = tmp_path / "held_wordcount_words.py"
    app.write_text(HELD_APP.format(apps=str(REPO / "spark_apps" / "wordcount"), folder=str(tmp_path)))
    real = dep.topology.jobs[JOB].application
    held_cmd = [str(app) if arg == real else arg for arg in job_command(dep, JOB, 1, spark_remote)]
    with (tmp_path / "held.log").open("w") as out:
        held = subprocess.Popen(held_cmd, env=job_env(dep.url, spark_remote), stdout=out, stderr=subprocess.STDOUT,
                                cwd=tmp_path)
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "waiting").exists():
            assert held.poll() is None and time.monotonic() < deadline, (tmp_path / "held.log").read_text()[-3000:]
            time.sleep(0.2)
        winner = subprocess.run(job_command(dep, JOB, 1, spark_remote), env=job_env(dep.url, spark_remote),
                                capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert winner.returncode == 0, winner.stderr[-3000:]
        (tmp_path / "go").touch()
        assert held.wait(timeout=120) != 0
    finally:
        if held.poll() is None:
            held.kill()
    output = (tmp_path / "held.log").read_text()
    last = output.strip().splitlines()[-1]
    assert last.startswith("airflow_provider_tsb.exceptions.FencedError: "), output[-3000:]
    assert "job 'wordcount_words'" in last and "attempt 2 of the job started after it" in last, last
    from deltalake import DeltaTable

    from airflow_provider_tsb.delta.barriers import barrier_of_version

    sink = dep.location("wordcount.word_count")
    tags = [barrier_of_version(sink, v) for v in range(DeltaTable(sink).version() + 1)]
    assert [t for t in tags if t is not None] == [1]  # one commit of barrier 1
    dep.store.dispose()
