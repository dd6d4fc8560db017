"""Helpers of the data-plane tests (``tests/spark``, ``tests/delta``, ``tests/maintenance``): the wordcount
apps, plans and reads at a barrier."""

from __future__ import annotations

import importlib.util
import os
import random
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
APPS = REPO / "spark_apps"
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

WORDS = "raw.words"
WORD_COUNT = "wordcount.word_count"
COUNT_OF_COUNTS = "wordcount.count_of_counts"
VOCAB = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "kiwi"]


def load_app_module(relative: str) -> ModuleType:
    """Import an app script of ``spark_apps/`` by path (they are scripts, not a package)."""
    path = APPS / relative
    name = "tsb_app_" + relative.replace("/", "_").removesuffix(".py")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def words_for(barrier: int) -> list[str]:
    """Deterministic words ingested before ``barrier``."""
    rng = random.Random(barrier)
    return [rng.choice(VOCAB) for _ in range(rng.randint(5, 25))]


def wordcount_tables(root: Path) -> dict[str, str]:
    return {
        WORDS: str(root / "words"),
        WORD_COUNT: str(root / "word_count"),
        COUNT_OF_COUNTS: str(root / "count_of_counts"),
    }


def make_wordcount_plan(root: Path, barriers: int) -> tuple[str, dict[str, str]]:
    """Ingest words and generate ``barriers`` barriers; return (plan path, tables)."""
    from airflow_provider_tsb.delta.roots import append_words
    from airflow_provider_tsb.spark.catalog import PlanFile

    tables = wordcount_tables(root)
    plan = PlanFile(str(root / "plan.json"))
    plan.set_tables(tables)
    for b in range(1, barriers + 1):
        append_words(tables[WORDS], words_for(b))
        plan.append_barrier([WORDS], ts_ms=1_700_000_000_000 + b * 1000)
    return plan.path, tables


def table_rows(spark: object, location: str, version: int) -> list[tuple]:
    """Sorted rows of a table version (test helper; collects a small table)."""
    from airflow_provider_tsb.spark.inputs import read_snapshot

    return sorted(tuple(r) for r in read_snapshot(spark, location, version).collect())


def rows_at_barrier(spark: object, location: str, barrier: int) -> list[tuple]:
    from airflow_provider_tsb.delta import version_of_barrier

    version = version_of_barrier(location, barrier)
    assert version is not None, f"{location} has no version for barrier {barrier}"
    return table_rows(spark, location, version)


def run_wordcount_batch(spark: object, apps: tuple[object, object], plan: str, until: int | None = None) -> None:
    from airflow_provider_tsb.spark.app import run_batch
    from airflow_provider_tsb.spark.app_run import AppRun
    from airflow_provider_tsb.spark.catalog import PlanFileCatalog

    catalog = PlanFileCatalog(plan, plan + ".report.json")
    for app in apps:
        run_batch(AppRun(spark, app, catalog, app.resolve_locations(catalog.tables())), until_barrier=until)


def write_sink(spark: object, df: object, *, table: str, location: str, job_id: str, barrier: int,
               inputs: dict[str, int] | None = None, ts_ms: int | None = None, catalog: object = None,
               **options: object) -> object:
    """:func:`~airflow_provider_tsb.spark.barrier_commit.write_barrier` of one barrier, its
    :class:`~airflow_provider_tsb.spark.write_options.WriteOptions` given as keywords."""
    from airflow_provider_tsb.spark.barrier_commit import write_barrier
    from airflow_provider_tsb.spark.write_options import WriteOptions, WriteTarget

    target = WriteTarget(table, location, job_id, barrier, dict(inputs or {}), ts_ms)
    return write_barrier(spark, df, target, WriteOptions(**options), catalog=catalog)  # type: ignore[arg-type]
