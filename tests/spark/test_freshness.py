"""Freshness targets on a PostgreSQL metastore with real Spark jobs (issue 13 item 6).

The SQLite run (held-back ``wordcount_counts``, its catch-up as its own ``spark-submit``, the
REST API, the sensor and ``tsb freshness``) is in tests/spark/test_staleness.py. Here the
same wordcount jobs run on the metastore catalog over PostgreSQL (in the tests' Spark session, to
save Spark start-ups): ``wordcount_counts`` is held back at barrier 1 while ``wordcount_words``
commits barrier 2, so ``count_of_counts`` misses its 1 s target -- lag exactly "now minus barrier
2's generation", bottleneck ``wordcount_counts`` -- and ``word_count`` meets it; then
``wordcount_counts`` runs for barrier 2 and nothing misses.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from dev.job_processes import COUNT_OF_COUNTS, WORD_COUNT, WORDS, wordcount_deployment
from tests.conftest import _pg_database

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def test_freshness_names_the_held_back_job_on_postgresql(
    spark: Any, wordcount_apps: tuple[Any, Any], postgres: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_tsb.cli import main
    from airflow_provider_tsb.spark.app import run_batch
    from airflow_provider_tsb.spark.app_run import AppRun
    from airflow_provider_tsb.spark.metastore_catalog import MetastoreCatalog

    url = _pg_database(postgres)
    dep = wordcount_deployment(tmp_path, url, barriers=2)
    store, topo = dep.store, dep.topology
    for sink in (WORD_COUNT, COUNT_OF_COUNTS):
        topo.table(sink, freshness=1)
    store.registry.register_topology(topo)
    catalog = MetastoreCatalog(url)
    locations = {name: topo.location(name) for name in (WORDS, WORD_COUNT, COUNT_OF_COUNTS)}
    words_app, counts_app = wordcount_apps
    assert run_batch(AppRun(spark, words_app, catalog, words_app.resolve_locations(locations)),
                     until_barrier=2) == [1, 2]
    assert run_batch(AppRun(spark, counts_app, catalog, counts_app.resolve_locations(locations)),
                     until_barrier=1) == [1]
    b2 = store.barriers.get("wordcount", 2)
    time.sleep(max(0.0, 1.1 - (time.time() * 1000 - b2.created_at_ms) / 1000))  # past the 1 s target

    report = store.freshness.report("wordcount")
    lag = (report.measured_at_ms - b2.created_at_ms) / 1000
    assert {t: (f.target_s, f.lag_s, f.missed, f.committed_barrier, f.bottleneck) for t, f in report.tables.items()} \
        == {WORD_COUNT: (1.0, 0.0, False, 2, None), COUNT_OF_COUNTS: (1.0, lag, True, 1, "wordcount_counts")}
    assert report.missed == [COUNT_OF_COUNTS] and lag > 1
    jobs = {j: (f.written_barrier, f.ready_barrier, f.lag_s > 0) for j, f in report.jobs.items()}
    assert jobs == {"wordcount_words": (2, 2, False), "wordcount_counts": (1, 2, True)}
    capsys.readouterr()
    assert main(["freshness", "wordcount", "--url", url]) == 1
    shown = capsys.readouterr().out
    print(shown)  # the README's example (pytest -s)
    rows = {line.split()[0]: line.split()[1:] for line in shown.splitlines()[2:]}
    assert rows[COUNT_OF_COUNTS][2:] == ["MISSED", "1", "wordcount_counts"] and rows[WORD_COUNT][2:] == ["ok", "2", "-"]

    assert run_batch(AppRun(spark, counts_app, catalog, counts_app.resolve_locations(locations)),
                     until_barrier=2) == [2]
    report = store.freshness.report("wordcount")
    assert report.missed == [] and {t: (f.lag_s, f.committed_barrier) for t, f in report.tables.items()} == {
        WORD_COUNT: (0.0, 2), COUNT_OF_COUNTS: (0.0, 2)}
    assert all(f.lag_s == 0 for f in report.jobs.values())
    store.dispose()
