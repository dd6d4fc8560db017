"""Races of two attempts of one job on one barrier (an Airflow zombie and its retry), counted.

Each race starts the ``wordcount_words`` job twice for the same barrier, as two real
``spark-submit`` processes (the operator's command, :mod:`dev.job_processes`), the
second after a random delay, and checks what a reader and the Delta log see afterwards:

* ``commits``: Delta commits of ``word_count`` tagged with the barrier (must be 1);
* ``orphans_visible``: anything of the loser a reader could see -- a PROCESSED manifest still
  served, a READ_COMMITTED or REPEATABLE_READ answer whose ``sum(cnt) != count(words)``, or
  an attempt directory of the barrier that is neither the committed one, nor deleted, nor
  withdrawn (tracked for deletion after the grace period);
* ``fenced``: processes that failed with the FencedError message (job, barrier, winner);
* ``other_failures``: processes that failed otherwise (must be 0).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.delta.barriers import version_of_barrier
from airflow_provider_tsb.delta.conventions import parse_tag
from airflow_provider_tsb.delta.log import commit_info, latest_version
from airflow_provider_tsb.read.resolutions import to_arrow
from dev.job_processes import (
    WORD_COUNT,
    WORDS,
    Deployment,
    start_job,
    wordcount_deployment,
)

JOB = "wordcount_words"
FENCED_TEXT = "was fenced"


@dataclass
class RaceCounts:
    """Totals over the races (see module docstring)."""

    races: int = 0
    commits_per_barrier_max: int = 0
    orphans_visible: int = 0
    fenced_errors: int = 0
    other_failures: int = 0
    examples: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"races={self.races} commits_per_barrier_max={self.commits_per_barrier_max} "
                f"orphans_visible={self.orphans_visible} fenced_errors={self.fenced_errors} "
                f"other_failures={self.other_failures}")


def commits_of(location: str, barrier: int) -> list[int]:
    """Versions of the table tagged with ``barrier`` (its exactly-once commits)."""
    out = []
    for version in range(latest_version(location) + 1):
        tag = parse_tag(commit_info(location, version))
        if tag is not None and tag.barrier == barrier:
            out.append(version)
    return out


def visible_orphans(dep: Deployment, barrier: int) -> list[str]:
    """What a reader could see of a losing attempt at ``barrier`` (empty when nothing)."""
    import pyarrow.compute as pc

    problems = []
    state = dep.store.table_states.get(WORD_COUNT, barrier)
    if state is None or state.state != "WRITTEN" or state.manifest:
        shown = (state.state, state.manifest) if state is not None else None
        problems.append(f"barrier {barrier}: word_count (state, manifest) is {shown}")
    for level in (ConsistencyLevel.READ_COMMITTED, ConsistencyLevel.REPEATABLE_READ):
        as_of = barrier if level is ConsistencyLevel.REPEATABLE_READ else None
        read = to_arrow(dep.store.resolution.resolve([WORDS, WORD_COUNT], level, as_of=as_of))
        cnt = int(pc.sum(read[WORD_COUNT].column("cnt")).as_py() or 0)
        if cnt != read[WORDS].num_rows:
            problems.append(f"barrier {barrier} at {level.value}: sum(cnt)={cnt} count(words)={read[WORDS].num_rows}")
    location = dep.location("wordcount.word_count")
    version = version_of_barrier(location, barrier)
    committed = parse_tag(commit_info(location, version)).attempt if version is not None else None
    base = Path(location) / "tsb_staging" / JOB / "0" / str(barrier)
    tracked = {p for p in dep.store.table_states.held_staging(WORD_COUNT, barrier, grace_s=1e9)}
    for attempt in sorted(base.iterdir()) if base.is_dir() else []:
        rel = f"tsb_staging/{JOB}/0/{barrier}/{attempt.name}"
        if attempt.name != committed and rel not in tracked and any(attempt.iterdir()):
            problems.append(f"barrier {barrier}: untracked orphan attempt directory {rel}")
    return problems


def run_races(root: Path, url: str, races: int, *, max_delay_s: float = 1.5, seed: int = 12) -> RaceCounts:
    """Run ``races`` races, one barrier each, on a fresh wordcount deployment under ``root``."""
    rng = random.Random(seed)
    dep = wordcount_deployment(root, url, barriers=races, lines=10)
    counts = RaceCounts()
    location = dep.location("wordcount.word_count")
    for barrier in range(1, races + 1):
        logs = [root / f"race{barrier}-a.log", root / f"race{barrier}-b.log"]
        first = start_job(dep, JOB, barrier, logs[0])
        time.sleep(rng.uniform(0, max_delay_s))
        second = start_job(dep, JOB, barrier, logs[1])
        codes = [first.wait(timeout=600), second.wait(timeout=600)]
        counts.races += 1
        for code, log in zip(codes, logs, strict=True):
            text = log.read_text()
            if code != 0 and FENCED_TEXT in text and "FencedError" in text:
                counts.fenced_errors += 1
                if len(counts.examples) < 3:
                    counts.examples.append(next(line for line in text.splitlines() if FENCED_TEXT in line)[:400])
            elif code != 0:
                counts.other_failures += 1
                counts.examples.append(f"barrier {barrier}: exit {code}: {text[-1500:]}")
        commits = commits_of(location, barrier)
        counts.commits_per_barrier_max = max(counts.commits_per_barrier_max, len(commits))
        orphans = visible_orphans(dep, barrier)
        counts.orphans_visible += len(orphans)
        counts.examples.extend(orphans)
    dep.store.dispose()
    return counts
