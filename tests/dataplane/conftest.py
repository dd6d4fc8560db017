"""Fixtures of the data-plane tests: the wordcount apps and a clean reference run (the Spark session is
tests/conftest.py's Spark Connect client)."""

from __future__ import annotations

import os
import sys

import pytest

from tsb_dev.dataplane import (
    COUNT_OF_COUNTS,
    WORD_COUNT,
    load_app_module,
    make_wordcount_plan,
    rows_at_barrier,
    run_wordcount_batch,
)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def wordcount_apps() -> tuple[object, object]:
    words = load_app_module("wordcount/wordcount_words.py").APP
    counts = load_app_module("wordcount/wordcount_counts.py").APP
    return words, counts


@pytest.fixture(scope="session")
def clean_wordcount(
    spark: object, wordcount_apps: tuple[object, object], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[int, list[tuple]]]:
    """Reference run: 4 barriers in batch mode; ``{table: {barrier: rows}}``."""
    root = tmp_path_factory.mktemp("clean_wordcount")
    plan, tables = make_wordcount_plan(root, 4)
    run_wordcount_batch(spark, wordcount_apps, plan)
    return {
        name: {b: rows_at_barrier(spark, tables[name], b) for b in range(1, 5)}
        for name in (WORD_COUNT, COUNT_OF_COUNTS)
    }
