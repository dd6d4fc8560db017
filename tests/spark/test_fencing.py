"""Zombies are fenced, not only shown (issue 12 item 5): two real ``spark-submit`` processes of
one job on one barrier (an Airflow zombie and its retry, the second started 0-0.5 s after the
first) give one Delta commit and nothing of the loser a reader can see; the older attempt fails
with the fencing error naming the job, the barrier and the attempt that won. On SQLite and
PostgreSQL; ``benchmarks/fencing_race.py`` runs the same race many times.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tsb_dev.fencing import run_races

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
