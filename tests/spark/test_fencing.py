"""Zombies are fenced, not only shown (issue 12 item 5): two real ``spark-submit`` processes of
one job on one barrier (an Airflow zombie and its retry, the second started 0-0.5 s after the
first) give one Delta commit and nothing of the loser a reader can see; the older attempt fails
with the fencing error naming the job, the barrier and the attempt that won. On SQLite and
PostgreSQL; ``benchmarks/fencing_race.py`` runs the same race many times.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dev.fencing import run_races

pytestmark = [pytest.mark.spark]


def test_zombie_and_retry_race_gives_one_commit_and_a_fenced_error(tmp_path: Path, metastore_url: str) -> None:
    counts = run_races(tmp_path, metastore_url, races=1, max_delay_s=0.5)
    assert counts.races == 1
    assert counts.commits_per_barrier_max == 1, counts.examples
    assert counts.orphans_visible == 0, counts.examples
    assert counts.other_failures == 0, counts.examples
    assert counts.fenced_errors == 1, counts.examples
    fenced = counts.examples[0]
    assert "FencedError: job 'wordcount_words', barrier 1: this attempt (fencing token 1) was fenced" in fenced
    assert "attempt 2 of the job started after it" in fenced


def test_the_winner_cleans_up_while_the_fenced_attempt_drops_its_own_directory(tmp_path: Path) -> None:
    """The race CI once lost: the winner, having committed, lists the barrier's attempt
    directories to delete the loser's; the fenced loser deletes its own meanwhile
    (``drop_unserved_attempt``). The winner must not fail on the directory it no longer finds."""
    from airflow_provider_tsb.delta.conventions import staging_dir
    from airflow_provider_tsb.spark.outputs_staging import remove_orphan_attempts

    base = tmp_path / staging_dir("wordcount_words", 0, 1)
    for attempt in ("winner", "loser", "other"):
        (base / attempt).mkdir(parents=True)
        (base / attempt / "part-0.parquet").write_bytes(b"x")

    def loser_drops_its_own() -> set[str]:  # asked after the listing, as the real race goes
        shutil.rmtree(base / "loser")
        return set()

    removed = remove_orphan_attempts(str(tmp_path), "wordcount_words", 0, 1, "winner", held=loser_drops_its_own)
    assert removed == 1  # "other"; "loser" was gone already
    assert sorted(p.name for p in base.iterdir()) == ["winner"]
