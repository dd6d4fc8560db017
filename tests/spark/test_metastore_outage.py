"""A streaming job rides out a metastore outage (issue 21 item 4).

The job runs the way the operator runs it on the default engine: its own Spark Connect client
process of the session's server, in streaming mode on the metastore catalog, here a real
PostgreSQL. While it waits for barriers the PostgreSQL server is stopped for 20 s (every
connection cut, new ones refused) and started again; the job keeps polling through the outage
(retries with backoff, ``$TSB_METASTORE_RETRY_SECONDS``), then commits the barriers generated
after it. Before, it died with ``MetastoreError ... Connection refused`` and needed an Airflow
retry.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from airflow_provider_tsb.hooks.barrier import read_root_versions
from dev.job_processes import job_command, job_env, wordcount_deployment
from dev.pg import start_postgres
from tsb_examples.ingest import ingest_next_words

pytestmark = [pytest.mark.postgres]


def _written(store, table: str, barrier: int) -> bool:
    state = store.table_states.get(table, barrier)
    return state is not None and state.state == "WRITTEN"


def test_a_streaming_job_survives_a_20_s_metastore_outage(spark_remote: str, tmp_path: Path) -> None:
    server = start_postgres()
    try:
        url = server.create_database("outage")
        dep = wordcount_deployment(tmp_path, url, barriers=1, lines=10)
        command = job_command(dep, "wordcount_words", 3, spark_remote)
        command[command.index("batch")] = "streaming"
        command += ["--idle-timeout", "120", "--trigger-interval", "0.2"]
        log = tmp_path / "job.log"
        with log.open("w") as out:
            job = subprocess.Popen(command, env=job_env(url, spark_remote), stdout=out, stderr=subprocess.STDOUT,
                                   cwd=tmp_path)
        try:
            deadline = time.monotonic() + 240
            while not _written(dep.store, "wordcount.word_count", 1):
                assert job.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
            server.outage(20)  # the job polls for barrier 2 all along
            assert job.poll() is None, "the job died during the outage:\n" + log.read_text()[-3000:]
            for n in (2, 3):
                ingest_next_words(dep.location("raw.words"), f"t/{n}", lines=10)
                dep.store.barriers.create(dep.topology.name, read_root_versions(dep.topology), run_key=f"t/{n}")
            assert job.wait(timeout=300) == 0, log.read_text()[-3000:]
        finally:
            if job.poll() is None:
                job.kill()
        output = log.read_text()
        assert "unreachable" in output and "retrying" in output, output[-3000:]  # it did ride the outage out
        assert all(_written(dep.store, "wordcount.word_count", b) for b in (1, 2, 3))
    finally:
        server.stop()
