"""A batch run's single input lease, seen from outside the job's own process.

The word count's first job runs as the operator starts it on the Connect engine (its own
process, ``--metastore-url``) over four barriers, while this test polls the metastore: the run
holds one lease on ``tsb.raw.words`` from its start to its end, covering the epochs of the
barriers still to come (versions 0..3, narrowed to 1..3 and 2..3 behind barriers 2 and 3), and
leaves none behind. Each barrier's start record, queued behind the work, lands before its end
record: every timing says ``succeeded`` with one attempt.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from dev.job_processes import job_command, job_env, wordcount_deployment

pytestmark = [pytest.mark.spark]

WORDS = "tsb.raw.words"


def test_a_batch_run_holds_one_narrowing_lease_and_ends_it(spark_remote: str, tmp_path: Path) -> None:
    dep = wordcount_deployment(tmp_path, f"sqlite:///{tmp_path / 'tsb.db'}", barriers=4, lines=10)
    proc = subprocess.Popen(job_command(dep, "wordcount_words", 4, spark_remote), env=job_env(dep.url, spark_remote),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    seen: list[list[tuple[int, int]]] = []
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        ranges = dep.store.leases.leased_ranges(WORDS)
        if ranges and (not seen or seen[-1] != ranges):
            seen.append(ranges)
        time.sleep(0.02)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out[-3000:]
    # one lease at a time, only ever narrowing from the run's whole range, never past its end
    assert seen and seen[0] == [(0, 3)], (seen, out[-2000:])
    assert all(len(r) == 1 and r[0] in {(0, 3), (1, 3), (2, 3)} for r in seen), seen
    assert [r[0][0] for r in seen] == sorted(r[0][0] for r in seen), seen
    assert dep.store.leases.leased_ranges(WORDS) == []  # ended with the run
    timings = dep.store.job_runs.job_barriers(["wordcount_words"], [1, 2, 3, 4])
    assert [(t.barrier, t.status, t.attempts) for t in timings] == [(b, "succeeded", 1) for b in (1, 2, 3, 4)]
    assert all(t.started_at_ms is not None and t.finished_at_ms is not None and t.started_at_ms <= t.finished_at_ms
               for t in timings), timings
    assert dep.store.registry.job("wordcount_words").current_barrier == 4
    assert dep.store.table_states.newest_written("tsb.wordcount.word_count").barrier == 4
