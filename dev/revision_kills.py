"""Stress of revision (issue 12 item 7): ``tsb rollback`` SIGKILLed before a random table's step,
many times; each time the plan must be pending, the REPEATABLE_READ answer consistent (every table
at the target barrier's version), the jobs refused, and ``--resume`` must finish it with every
table holding exactly barriers 1..k; then the "jobs" commit more barriers and it starts again.

The tables are real Delta tables written with the jobs' commit convention (delta-rs, epoch-scoped
txn), the metastore is SQLite, ``tsb`` runs as its own process. No Spark: the data-plane version
with the real apps is ``tests/maintenance/test_revision.py``.

    python -m dev.revision_kills --iterations 30

Prints one JSON line of counts; exit code 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORDS, WC, CC = "tsb.raw.words", "tsb.wordcount.word_count", "tsb.wordcount.count_of_counts"
JOBS = {WC: "wordcount_words", CC: "wordcount_counts"}
DAG = """from airflow_provider_tsb.topology import Topology
topology = Topology("wordcount", warehouse={warehouse!r})
topology.root_table("raw.words")
topology.job("wordcount_words", "words.py", sources=["raw.words"], sinks=["wordcount.word_count"])
topology.job("wordcount_counts", "counts.py", sources=["wordcount.word_count"], sinks=["wordcount.count_of_counts"])
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from airflow_provider_tsb.dag_loading import load_dag_files
    from airflow_provider_tsb.delta.barriers import latest_written_barrier, table_epoch
    from airflow_provider_tsb.delta.conventions import BarrierTag, barrier_commit_properties
    from airflow_provider_tsb.delta.roots import append_words
    from airflow_provider_tsb.exceptions import RevisionPendingError
    from airflow_provider_tsb.metastore.store import MetaStore

    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="tsb-revision-kills-"))
    (root / "dags").mkdir()
    (root / "dags" / "wordcount.py").write_text(DAG.format(warehouse=str(root / "warehouse")))
    topology = load_dag_files([str(root / "dags")])[0].topologies[0]
    url = f"sqlite:///{root / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    store.registry.register_topology(topology)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def tsb(*cli: str, kill: str | None = None) -> subprocess.CompletedProcess[str]:
        extra = {"TSB_KILL_AT": f"revision:{kill}"} if kill else {}
        return subprocess.run([sys.executable, "-m", "airflow_provider_tsb", *cli, "--dags", str(root / "dags"),
                               "--url", url], capture_output=True, text=True, env={**env, **extra}, timeout=120)

    def advance_to(n: int) -> None:
        """The jobs: commit every barrier after each table's head up to n (one row per barrier)."""
        latest = store.barriers.latest
        while (latest("wordcount") or None) is None or latest("wordcount").barrier < n:
            b = (latest("wordcount").barrier if latest("wordcount") else 0) + 1
            store.barriers.create("wordcount", {WORDS: append_words(topology.location("raw.words"), [f"w{b}"])})
        for table, job in JOBS.items():
            location = topology.location(table)
            head = latest_written_barrier(location) if Path(location).exists() else None
            for b in range((head[0] if head else 0) + 1, n + 1):
                epoch = table_epoch(location).epoch if Path(location).exists() else 0
                write_deltalake(location, pa.table({"b": [b]}), mode="append",
                                commit_properties=barrier_commit_properties(BarrierTag(b, job), epoch=epoch))
                store.table_states.record_written(table, b, DeltaTable(location).version(), job)

    def rows(table: str, version: int | None = None) -> list[int]:
        return sorted(DeltaTable(topology.location(table), version=version).to_pyarrow_table().column("b").to_pylist())

    counts = {"iterations": 0, "killed": 0, "pending_after_kill": 0, "consistent_reads_while_pending": 0,
              "jobs_refused_while_pending": 0, "resumed": 0, "tables_at_target_after_resume": 0, "failures": 0}
    newest = 3
    advance_to(newest)
    for _ in range(args.iterations):
        counts["iterations"] += 1
        target = rng.randint(max(1, newest - 3), newest - 1)
        victim = rng.choice([WC, CC])
        killed = tsb("rollback", "wordcount.word_count", "--to-barrier", str(target), kill=victim)
        counts["killed"] += killed.returncode == -9
        plan = store.revisions.pending("wordcount")
        ok = plan is not None and plan.barrier == target
        counts["pending_after_kill"] += ok
        res = store.resolution.resolve([WC, CC])
        consistent = res.barrier == target and all(rows(t, res.tables[t].version) == list(range(1, target + 1))
                                                   for t in (WC, CC))
        counts["consistent_reads_while_pending"] += consistent
        refused = 0
        for job in JOBS.values():
            try:
                store.revisions.check_none_pending(job)
            except RevisionPendingError:
                refused += 1
        counts["jobs_refused_while_pending"] += refused == len(JOBS)
        resumed = tsb("rollback", "wordcount.word_count", "--resume")
        counts["resumed"] += resumed.returncode == 0
        at_target = all(rows(t) == list(range(1, target + 1)) and latest_written_barrier(topology.location(t))[0]
                        == target for t in (WC, CC))
        counts["tables_at_target_after_resume"] += at_target
        if not (killed.returncode == -9 and ok and consistent and refused == len(JOBS)
                and resumed.returncode == 0 and at_target):
            counts["failures"] += 1
            print(f"failure at target {target}, killed before {victim}: {killed.stderr[-500:]} "
                  f"{resumed.stderr[-500:]}", file=sys.stderr)
        newest += 1
        advance_to(newest)
    print(json.dumps(counts, sort_keys=True))
    return 1 if counts["failures"] else 0


if __name__ == "__main__":
    sys.stdout.flush()
    code = main()
    sys.stdout.flush()
    os._exit(code)
