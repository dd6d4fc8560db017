"""A job whose command line puts a table elsewhere than its registration fails before it writes.

The operator builds a job's ``--table NAME=LOCATION`` arguments from the topology of the DAG file
as the worker loads it; a worker whose ``$TSB_WAREHOUSE`` differs from where the topology was
registered would read and write other tables than the ones readers resolve (found by
``benchmarks/full_year.py``: a tsb arm committed its 365 barriers into the plain arm's tables).
Here the word count's job runs as its own process, as the operator starts it on the Connect
engine, with its command line built from the same topology under another warehouse.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from airflow_provider_tsb.delta.log import latest_version
from airflow_provider_tsb.maintenance.checker import wordcount_topology
from dev.job_processes import Deployment, job_command, job_env, wordcount_deployment

pytestmark = [pytest.mark.spark]


def test_a_job_given_another_warehouse_fails_naming_both_locations(spark_remote: str, tmp_path: Path) -> None:
    dep = wordcount_deployment(tmp_path, f"sqlite:///{tmp_path / 'tsb.db'}", barriers=1, lines=10)
    elsewhere = Deployment(dep.url, dep.store, wordcount_topology(str(tmp_path / "other")), dep.root)
    command = job_command(elsewhere, "wordcount_words", 1, spark_remote)
    out = subprocess.run(command, env=job_env(dep.url, spark_remote), capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode != 0
    registered, asked = dep.location("raw.words"), elsewhere.location("raw.words")
    assert (f"job 'wordcount_words': table 'tsb.raw.words' is registered at {registered!r}, but this run would "
            f"read or write it at {asked!r}") in out.stderr, out.stderr[-3000:]
    assert f"--table tsb.raw.words={registered}" in out.stderr
    # nothing was written anywhere, nothing recorded: the job runs again with the right tables
    assert not (tmp_path / "other").exists()
    assert not Path(dep.location("wordcount.word_count"), "_delta_log").exists()
    assert dep.store.table_states.newest_written("tsb.wordcount.word_count") is None
    rerun = subprocess.run(job_command(dep, "wordcount_words", 1, spark_remote), env=job_env(dep.url, spark_remote),
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert latest_version(dep.location("wordcount.word_count")) == 0
    assert dep.store.table_states.newest_written("tsb.wordcount.word_count").barrier == 1
