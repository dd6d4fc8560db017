"""FLIP-276 wordcount on real Spark + Delta: invariants, modes, restore, alignment."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from airflow_provider_tsb.delta import restore_to_barrier, version_of_barrier
from airflow_provider_tsb.delta.roots import append_words
from airflow_provider_tsb.exceptions import MisalignedInputError
from airflow_provider_tsb.spark import BarrierContext, PlanFile, PlanFileCatalog, Sink, TsbApp, read_report
from airflow_provider_tsb.spark.app import BarrierPlan, run_barrier, run_batch
from airflow_provider_tsb.spark.app_run import AppRun, StreamOptions
from airflow_provider_tsb.spark.inputs import read_snapshot
from airflow_provider_tsb.spark.streaming import run_streaming
from dev.dataplane import (
    COUNT_OF_COUNTS,
    WORD_COUNT,
    WORDS,
    make_wordcount_plan,
    rows_at_barrier,
    run_wordcount_batch,
    words_for,
)


def snapshot_tables(spark, tables, barriers) -> dict[str, dict[int, list[tuple]]]:
    return {
        name: {b: rows_at_barrier(spark, tables[name], b) for b in barriers} for name in (WORD_COUNT, COUNT_OF_COUNTS)
    }


def test_invariants_at_every_barrier(spark, clean_wordcount) -> None:
    words_total = 0
    for b in range(1, 5):
        words_total += len(words_for(b))
        word_count = clean_wordcount[WORD_COUNT][b]
        count_of_counts = clean_wordcount[COUNT_OF_COUNTS][b]
        assert sum(cnt for _, cnt in word_count) == words_total
        assert sum(cnt2 for _, cnt2 in count_of_counts) == len(word_count)


def test_one_barrier_at_a_time_matches_batch(spark, wordcount_apps, clean_wordcount, tmp_path: Path) -> None:
    plan, tables = make_wordcount_plan(tmp_path, 4)
    for until in range(1, 5):
        run_wordcount_batch(spark, wordcount_apps, plan, until=until)
        run_wordcount_batch(spark, wordcount_apps, plan, until=until)  # replay: no-op
    assert snapshot_tables(spark, tables, range(1, 5)) == clean_wordcount
    report = read_report(plan + ".report.json")
    written = {(w["table"], w["barrier"]) for w in report["written"]}
    assert (WORD_COUNT, 4) in written and (COUNT_OF_COUNTS, 4) in written
    assert any(p["manifest"] for p in report["processed"] if p["table"] == WORD_COUNT)


def test_streaming_matches_batch_and_picks_up_new_barriers(
    spark, wordcount_apps, clean_wordcount, tmp_path: Path
) -> None:
    plan, tables = make_wordcount_plan(tmp_path, 2)
    catalog = PlanFileCatalog(plan, plan + ".report.json")
    words_app, counts_app = wordcount_apps

    def more_barriers() -> None:
        time.sleep(3)
        planfile = PlanFile(plan)
        for b in (3, 4):
            append_words(tables[WORDS], words_for(b))
            planfile.append_barrier([WORDS], ts_ms=1_700_000_000_000 + b * 1000)

    feeder = threading.Thread(target=more_barriers)
    feeder.start()
    done = run_streaming(AppRun(spark, words_app, catalog, words_app.resolve_locations(catalog.tables())),
                         StreamOptions(max_barriers=4, idle_timeout_s=60, trigger_interval_s=0.3))
    feeder.join()
    assert done == [1, 2, 3, 4]
    done = run_streaming(AppRun(spark, counts_app, catalog, counts_app.resolve_locations(catalog.tables())),
                         StreamOptions(until_barrier=4, idle_timeout_s=20, trigger_interval_s=0.3))
    assert done == [1, 2, 3, 4]
    assert snapshot_tables(spark, tables, range(1, 5)) == clean_wordcount


def test_restore_then_reprocess_matches_clean_run(spark, wordcount_apps, clean_wordcount, tmp_path: Path) -> None:
    plan, tables = make_wordcount_plan(tmp_path, 4)
    run_wordcount_batch(spark, wordcount_apps, plan)
    for name in (WORD_COUNT, COUNT_OF_COUNTS):
        result = restore_to_barrier(tables[name], 2)
        assert result.changed and result.epoch == 1
        assert version_of_barrier(tables[name], 3) is None
    run_wordcount_batch(spark, wordcount_apps, plan)
    assert snapshot_tables(spark, tables, range(1, 5)) == clean_wordcount


def test_alignment_reads_all_inputs_at_the_same_barrier(spark, wordcount_apps, tmp_path: Path) -> None:
    """A job joining a root table and an intermediate table that is several barriers ahead."""
    plan, tables = make_wordcount_plan(tmp_path, 4)
    run_wordcount_batch(spark, wordcount_apps[:1], plan)  # word_count is at barrier 4
    out_loc = str(tmp_path / "joined")
    tables["check.joined"] = out_loc
    PlanFile(plan).set_tables({"check.joined": out_loc})

    def process(ctx: BarrierContext) -> dict:
        words = ctx.snapshot(WORDS).groupBy("word").agg(F.count(F.lit(1)).cast("long").alias("n"))
        joined = words.join(ctx.snapshot(WORD_COUNT), "word", "full_outer").select(
            "word", F.lit(ctx.barrier).cast("long").alias("barrier"), "n", "cnt"
        )
        return {"check.joined": joined}

    app = TsbApp("check_join", {WORDS: None, WORD_COUNT: None}, {"check.joined": Sink("append")}, process)
    catalog = PlanFileCatalog(plan)
    locations = app.resolve_locations(catalog.tables())
    assert run_batch(AppRun(spark, app, catalog, locations), until_barrier=2) == [1, 2]
    rows = read_snapshot(spark, out_loc, version_of_barrier(out_loc, 2)).collect()
    assert rows and all(r["n"] == r["cnt"] for r in rows)  # same barrier in both inputs
    assert {r["barrier"] for r in rows} == {1, 2}

    # a plan that would read word_count at barrier 4's version while processing barrier 3
    good = catalog.pending_barriers(app.job_id, {n: locations[n] for n in app.sources}, after=2)[0]
    assert good.barrier == 3
    bad = BarrierPlan(
        barrier=3,
        ts_ms=good.ts_ms,
        inputs={**good.inputs, WORD_COUNT: version_of_barrier(tables[WORD_COUNT], 4)},
        previous_barrier=2,
        previous_inputs=good.previous_inputs,
    )
    with pytest.raises(MisalignedInputError, match=r"input wordcount.word_count .*barrier 4.*barrier 3"):
        run_barrier(AppRun(spark, app, None, locations), bad)


def test_job_waits_for_upstream_barrier(spark, wordcount_apps, tmp_path: Path) -> None:
    plan, tables = make_wordcount_plan(tmp_path, 3)
    words_app, counts_app = wordcount_apps
    catalog = PlanFileCatalog(plan)
    run_batch(AppRun(spark, words_app, catalog, words_app.resolve_locations(catalog.tables())), until_barrier=2)
    # counts can only process what word_count has WRITTEN
    assert run_batch(AppRun(spark, counts_app, catalog, counts_app.resolve_locations(catalog.tables()))) == [1, 2]
