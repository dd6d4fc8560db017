"""The example ingestion resumes after its own newest slice, whatever else was appended (issue 11)."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from airflow_provider_tsb.root_tables import append_to_root
from tsb_examples.ingest import corpus_lines, ingest_next_words, words_of


def test_an_append_by_other_means_does_not_restart_the_ingestion(tmp_path) -> None:
    loc = str(tmp_path / "words")
    first = ingest_next_words(loc, run_key="run-1", lines=5)
    assert first["lines"] == [0, 5]
    append_to_root(loc, pa.table({"word": ["hand", "typed"]}), run_key="manual")
    # a retry of run-1 still finds its commit behind the manual one: nothing appended twice
    assert ingest_next_words(loc, run_key="run-1", lines=5)["replayed"] is True
    second = ingest_next_words(loc, run_key="run-2", lines=5)
    assert second["lines"] == [5, 10] and second["replayed"] is False  # resumes, does not restart at 0
    words = DeltaTable(loc).to_pyarrow_table().column("word").to_pylist()
    assert len(words) == len(words_of(corpus_lines()[:10])) + 2
