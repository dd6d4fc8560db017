"""Bounded staleness on a real run (issue 13 item 3): the wordcount jobs as the operator's own
``spark-submit`` processes on the metastore catalog, one of them held back.

Barrier 1 is generated with a timestamp an hour old (a system-time barrier whose root versions
were taken an hour ago), barrier 2 now. ``wordcount_words`` runs to barrier 2,
``wordcount_counts`` only to barrier 1 (both on the metastore catalog in the tests' Spark session,
to save two Spark start-ups): a read of both tables with ``max_staleness_s=600`` is
refused -- through the store, the readers, the REST API and ``tsb versions`` -- naming
``count_of_counts`` and its writer job; the sensor with ``max_staleness_s`` times out with the
same report. Then ``wordcount_counts`` runs for barrier 2, as its own ``spark-submit``, while a
read waits (``wait_s``) and the deferrable sensor's trigger polls: both get barrier 2, and the
data read satisfies the wordcount invariants.

The same run checks freshness targets (issue 13 item 6): both sinks declare a 1 s target. While
``wordcount_counts`` is held back, ``count_of_counts`` misses it with a lag of exactly "now minus
barrier 2's generation" and ``wordcount_counts`` as the bottleneck, and ``word_count`` (lag 0)
meets it -- through the store, the REST API, ``tsb freshness`` and the sensor; the freshness
sensor waits while the held-back job catches up and then nothing misses.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_tsb.exceptions import StaleReadError
from airflow_provider_tsb.metastore.records import now_ms
from dev.job_processes import (
    COUNT_OF_COUNTS,
    WORD_COUNT,
    WORDS,
    job_command,
    job_env,
    wordcount_deployment,
)

pytestmark = [pytest.mark.spark]

HOUR_MS = 3_600_000
BOUND_S = 600.0
Q = [WORD_COUNT, COUNT_OF_COUNTS]


def first_event(trigger: Any) -> dict[str, Any]:
    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    import asyncio

    return asyncio.run(first())


def check_freshness_missed(store: Any, client: Any, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``wordcount_counts`` held back at barrier 1: count_of_counts misses its 1 s target, named with
    its lag in seconds and the bottleneck job; word_count meets it."""
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_tsb.cli import main
    from airflow_provider_tsb.sensors.freshness import TsbFreshnessSensor

    b2 = store.barriers.get("wordcount", 2)
    report = store.freshness.report("wordcount")
    lag = (report.measured_at_ms - b2.created_at_ms) / 1000
    assert lag > 1  # two Spark runs since barrier 2 was generated
    got = {t: (f.lag_s, f.missed, f.committed_barrier, f.bottleneck) for t, f in report.tables.items()}
    assert got == {WORD_COUNT: (0.0, False, 2, None), COUNT_OF_COUNTS: (lag, True, 1, "wordcount_counts")}
    assert report.jobs["wordcount_counts"].lag_s > 0 and report.jobs["wordcount_words"].lag_s == 0
    answer = client.freshness("wordcount")
    assert answer["missed"] == [COUNT_OF_COUNTS]
    assert answer["tables"][COUNT_OF_COUNTS]["bottleneck"] == "wordcount_counts"
    assert answer["tables"][COUNT_OF_COUNTS]["lag_s"] == (answer["measured_at_ms"] - b2.created_at_ms) / 1000
    lineage = client.topology("wordcount")["tables"]
    assert (lineage[COUNT_OF_COUNTS]["freshness_missed"], lineage[WORD_COUNT]["freshness_missed"]) == (True, False)
    capsys.readouterr()
    assert main(["freshness", "wordcount", "--url", url]) == 1
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows[COUNT_OF_COUNTS][2:] == ["MISSED", "1", "wordcount_counts"]
    assert rows[WORD_COUNT] == ["1", "0.0", "ok", "2", "-"]
    alert = TsbFreshnessSensor(task_id="alert", topology="wordcount", fail_on_miss=True, poke_interval=0.2, timeout=5)
    with pytest.raises(AirflowFailException, match=r"tsb.wordcount.count_of_counts: lag \d+\.\d s > target 1 s "
                       r"\(committed barrier 1, newest 2; bottleneck job 'wordcount_counts'\)"):
        alert.execute({})


def test_bounded_staleness_names_the_held_back_job_then_reads_fresh(
    spark: Any, wordcount_apps: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from airflow.sdk.exceptions import AirflowSensorTimeout
    from fastapi.testclient import TestClient

    from airflow_provider_tsb.api.routes import create_metaservice_app
    from airflow_provider_tsb.cli import main
    from airflow_provider_tsb.hooks.barrier import read_root_versions
    from airflow_provider_tsb.read.client import TsbClient
    from airflow_provider_tsb.read.readers import read_tables_arrow
    from airflow_provider_tsb.sensors.barrier_committed import TsbBarrierCommittedSensor
    from airflow_provider_tsb.sensors.freshness import TsbFreshnessSensor
    from airflow_provider_tsb.spark.app import run_batch
    from airflow_provider_tsb.spark.app_run import AppRun
    from airflow_provider_tsb.spark.metastore_catalog import MetastoreCatalog
    from airflow_provider_tsb.triggers.barrier_committed import TsbBarrierCommittedTrigger
    from tsb_examples.ingest import ingest_next_words

    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    monkeypatch.setenv("TSB_METASTORE_URL", url)
    dep = wordcount_deployment(tmp_path, url, barriers=0)
    store, topo = dep.store, dep.topology
    for sink in Q:  # freshness targets, registered with the topology
        topo.table(sink, freshness=1)
    store.registry.register_topology(topo)
    ingest_next_words(topo.location("raw.words"), "t/0", lines=20)
    store.barriers.create(topo.name, read_root_versions(topo), run_key="t/0", ts_ms=now_ms() - HOUR_MS)
    ingest_next_words(topo.location("raw.words"), "t/1", lines=20)
    store.barriers.create(topo.name, read_root_versions(topo), run_key="t/1")
    catalog = MetastoreCatalog(url)
    locations = {name: topo.location(name) for name in (WORDS, *Q)}
    words_app, counts_app = wordcount_apps
    assert run_batch(AppRun(spark, words_app, catalog, words_app.resolve_locations(locations)),
                     until_barrier=2) == [1, 2]
    # held back: wordcount_counts is not run for barrier 2
    assert run_batch(AppRun(spark, counts_app, catalog, counts_app.resolve_locations(locations)),
                     until_barrier=1) == [1]

    assert store.resolution.resolve(Q).barrier == 1  # no bound: the hour-old barrier 1
    with pytest.raises(StaleReadError) as err:
        store.resolution.resolve(Q, max_staleness_s=BOUND_S)
    message = str(err.value)
    assert "the newest COMMIT barrier over ['tsb.wordcount.word_count', 'tsb.wordcount.count_of_counts'] is " \
        "barrier 1, 36" in message
    assert "lagging: tsb.wordcount.count_of_counts: newest WRITTEN barrier 1, 36" in message
    assert re.search(r"writer job 'wordcount_counts' \((running|succeeded), on barrier 1\)", message)
    assert "(newest generated barrier: 2, " in message
    assert err.value.lagging == {COUNT_OF_COUNTS: "wordcount_counts"}
    with pytest.raises(StaleReadError, match="writer job 'wordcount_counts'"):
        read_tables_arrow(Q, store=store, max_staleness_s=BOUND_S)
    client = TsbClient("/tsb/api/v1", http=TestClient(create_metaservice_app(store, prefix="/tsb/api/v1")))
    with pytest.raises(StaleReadError, match="lagging: tsb.wordcount.count_of_counts"):
        client.versions(Q, max_staleness_s=BOUND_S)
    assert main(["versions", "--url", url, "--max-staleness", str(BOUND_S), *Q]) == 1
    assert "writer job 'wordcount_counts'" in capsys.readouterr().err
    sensor = TsbBarrierCommittedSensor(task_id="fresh", tables=Q, max_staleness_s=BOUND_S, poke_interval=0.2,
                                       timeout=0.5, mode="poke")
    with pytest.raises(AirflowSensorTimeout, match="at most 600 s old within 0 s: bounded staleness.*wordcount_counts"):
        sensor.execute({})
    check_freshness_missed(store, client, url, capsys)

    # the held-back job runs; a waiting read and the deferrable sensor's trigger see barrier 2
    trigger = TsbBarrierCommittedTrigger(Q, 0, poll_interval_s=0.2, timeout_s=240, max_staleness_s=BOUND_S)
    job = subprocess.Popen(job_command(dep, "wordcount_counts", 2), env=job_env(url), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    fresh_sensor = TsbFreshnessSensor(task_id="fresh_targets", topology="wordcount", poke_interval=0.2, timeout=240,
                                      mode="poke")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        fired = pool.submit(first_event, trigger)
        met = pool.submit(fresh_sensor.execute, {})
        start = time.monotonic()
        fresh = store.resolution.resolve(Q, max_staleness_s=BOUND_S, wait_s=240)
        waited = time.monotonic() - start
        event = fired.result(timeout=240)
        assert met.result(timeout=240) == {WORD_COUNT: 0.0, COUNT_OF_COUNTS: 0.0}  # waited, then met
    _, stderr = job.communicate(timeout=300)
    assert job.returncode == 0, stderr[-3000:]
    assert fresh.barrier == 2 and waited > 1  # it waited for the job, not failed
    assert event == {"status": "committed", "barrier": 2, "tables": Q}
    assert sensor.execute({}) == 2
    assert client.versions(Q, max_staleness_s=BOUND_S)["barrier"] == 2
    capsys.readouterr()  # the sensor's log lines
    assert main(["versions", "--url", url, "--max-staleness", str(BOUND_S), *Q]) == 0
    assert json.loads(capsys.readouterr().out)["barrier"] == 2
    report = store.freshness.report("wordcount")
    assert report.missed == [] and {t: (f.lag_s, f.committed_barrier, f.bottleneck) for t, f in report.tables.items()} \
        == {WORD_COUNT: (0.0, 2, None), COUNT_OF_COUNTS: (0.0, 2, None)}
    assert client.freshness("wordcount")["missed"] == []
    assert main(["freshness", "wordcount", "--url", url]) == 0
    data = read_tables_arrow([WORDS, *Q], store=store, max_staleness_s=BOUND_S)
    words, counts, histogram = (data[t].to_pylist() for t in (WORDS, *Q))
    assert sum(r["cnt2"] for r in histogram) == len(counts)  # every word counted once
    assert sum(r["cnt"] * r["cnt2"] for r in histogram) == sum(r["cnt"] for r in counts) == len(words)
