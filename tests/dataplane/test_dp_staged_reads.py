"""READ_COMMITTED never reads a file that is gone (issue 12 item 3).

Forced order with real ``spark-submit`` processes on the metastore catalog: the job dies after
reporting PROCESSED (kill point ``after_files``), a reader resolves READ_COMMITTED (it gets the
dead attempt's staged manifest), the retry runs to the end, then the reader reads its answer.
Before the fix the retry deleted the dead attempt's files first and the read raised
``FileNotFoundError``; now the files are withdrawn and kept for the staging grace period, and
a reader that outlives it gets ``StagedFilesGoneError`` (the readers resolve again).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.exceptions import StagedFilesGoneError
from airflow_provider_tsb.readers import read_tables_arrow
from airflow_provider_tsb.spark.metastore_catalog import MetastoreCatalog
from airflow_provider_tsb.spark.outputs import collect_withdrawn
from tests.support.job_processes import KILLED, WORD_COUNT, WORDS, run_job, wordcount_deployment

pytestmark = [pytest.mark.spark]


def _sum_cnt(table) -> int:  # noqa: ANN001 - pyarrow.Table
    import pyarrow.compute as pc

    return int(pc.sum(table.column("cnt")).as_py() or 0)


def test_read_committed_answer_outlives_the_retry_cleanup(tmp_path: Path) -> None:
    dep = wordcount_deployment(tmp_path, f"sqlite:///{tmp_path / 'tsb.db'}", barriers=1)
    killed = run_job(dep, "wordcount_words", 1, TSB_KILL_AT="after_files:wordcount_words:1")
    assert killed.returncode in KILLED, killed.stdout[-2000:] + killed.stderr[-3000:]

    held = dep.store.resolve([WORDS, WORD_COUNT], ConsistencyLevel.READ_COMMITTED)
    assert held.barrier == 1 and held.tables[WORD_COUNT].staged  # the dead attempt's manifest
    dead_dir = str(Path(held.tables[WORD_COUNT].staged["files"][0]["path"]).parent)

    retry = run_job(dep, "wordcount_words", 1, TSB_STAGING_GRACE_SECONDS="3600")
    assert retry.returncode == 0, retry.stderr[-3000:]
    # the old answer still reads: old files, consistent with its words
    tables = held.to_arrow()
    assert _sum_cnt(tables[WORD_COUNT]) == tables[WORDS].num_rows > 0
    # new resolutions get the committed barrier, the dead attempt is withdrawn, not served
    fresh = dep.store.resolve([WORDS, WORD_COUNT], ConsistencyLevel.READ_COMMITTED)
    assert fresh.tables[WORD_COUNT].state == "WRITTEN" and fresh.tables[WORD_COUNT].staged is None
    location = Path(dep.location("wordcount.word_count"))
    assert (location / dead_dir).is_dir()
    assert dead_dir in dep.store.held_staging(WORD_COUNT, 1, grace_s=3600)
    assert dep.store.due_withdrawn_staging(WORD_COUNT, grace_s=3600) == []

    # once the grace period is over (0 s here) the job's garbage-collection step deletes it
    # (the step every write of the job runs after WRITTEN; called directly to save a Spark run)
    catalog = MetastoreCatalog(dep.url)
    assert collect_withdrawn(str(location), WORD_COUNT, catalog, grace_s=0) == 1
    assert not (location / dead_dir).exists()
    assert dep.store.due_withdrawn_staging(WORD_COUNT, grace_s=0) == []
    committed = fresh.tables[WORD_COUNT]
    assert read_tables_arrow([WORD_COUNT], resolution=fresh)[WORD_COUNT].num_rows > 0  # committed files kept
    assert committed.version is not None
    # a reader that held the answer past the grace period gets a tsb error, not FileNotFoundError
    with pytest.raises(StagedFilesGoneError, match=r"barrier 1 .*staged file .* is gone.*Resolve again"):
        held.to_arrow()
    with pytest.raises(StagedFilesGoneError):
        read_tables_arrow([WORDS, WORD_COUNT], resolution=held)
    # the readers resolve again when they resolved themselves
    again = read_tables_arrow([WORDS, WORD_COUNT], ConsistencyLevel.READ_COMMITTED, store=dep.store)
    assert _sum_cnt(again[WORD_COUNT]) == again[WORDS].num_rows
