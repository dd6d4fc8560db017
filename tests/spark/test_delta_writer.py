"""Delta's own Spark writer commits the barriers (``Sink(writer="delta")``, issue 58 item 3).

Each sink's write for barrier n is Delta's transactional write with its application transaction
(``txnAppId`` = the job's app id, ``txnVersion`` = n) and the barrier in ``userMetadata``. The
wordcount topology written this way must give what the staged writer gives, barrier by barrier,
exactly once across replays and SIGKILLs, with the tags ``tsb db rebuild`` and the readers use,
fencing of a zombie, and the integrity figures recorded with WRITTEN.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta import version_of_barrier
from airflow_provider_tsb.delta.conventions import app_id, parse_tag
from airflow_provider_tsb.delta.log import commit_info, latest_version
from airflow_provider_tsb.exceptions import DeltaLogIntegrityError, FencedError
from airflow_provider_tsb.hooks.barrier import read_root_versions
from airflow_provider_tsb.hooks.metastore import committed_head
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.readers import read_tables_pandas
from airflow_provider_tsb.spark.catalog import read_report
from airflow_provider_tsb.spark.cli import run_app
from airflow_provider_tsb.spark.installation import CONNECT_MARKERS
from airflow_provider_tsb.spark.write_options import WRITER_VARIABLE
from dev.dataplane import (
    APPS,
    COUNT_OF_COUNTS,
    REPO,
    WORD_COUNT,
    WORDS,
    make_wordcount_plan,
    rows_at_barrier,
    run_wordcount_batch,
    words_for,
    write_sink,
)
from tests.support.orchestration import wordcount_topology

pytestmark = pytest.mark.delta_spark


def delta_apps(apps: tuple[object, ...]) -> tuple[object, ...]:
    """The wordcount apps with every sink on Delta's own writer."""
    return tuple(dataclasses.replace(app, sinks={name: dataclasses.replace(sink, writer="delta")
                                                 for name, sink in app.sinks.items()}) for app in apps)


def barrier_commits(location: str) -> list[tuple[int, int]]:
    """``(version, barrier)`` of every tagged commit of the table, oldest first."""
    tags = [(v, parse_tag(commit_info(location, v))) for v in range(latest_version(location) + 1)]
    return [(v, t.barrier) for v, t in tags if t is not None]


def test_the_delta_writer_gives_the_staged_writers_tables_exactly_once(
    spark, wordcount_apps, clean_wordcount, tmp_path: Path
) -> None:
    """Both sinks (a merge, an overwrite) at every barrier equal the staged writer's; a replay
    adds no version; every commit carries Delta's txn and the tag in ``userMetadata``; nothing
    is staged."""
    plan, tables = make_wordcount_plan(tmp_path, 4)
    apps = delta_apps(wordcount_apps)
    for until in (2, 4):
        run_wordcount_batch(spark, apps, plan, until=until)
    versions = {name: latest_version(tables[name]) for name in (WORD_COUNT, COUNT_OF_COUNTS)}
    run_wordcount_batch(spark, apps, plan)  # a replay of every barrier: Delta skips them all
    assert {name: latest_version(tables[name]) for name in versions} == versions

    for name in (WORD_COUNT, COUNT_OF_COUNTS):
        location = tables[name]
        assert {b: rows_at_barrier(spark, location, b) for b in range(1, 5)} == clean_wordcount[name], name
        assert [b for _, b in barrier_commits(location)] == [1, 2, 3, 4], name  # one commit per barrier
        job = "wordcount_words" if name == WORD_COUNT else "wordcount_counts"
        assert DeltaTable(location).transaction_version(app_id(job, 0)) == 4
        history = {r["version"]: json.loads(r["userMetadata"]) for r in spark.sql(
            f"DESCRIBE HISTORY delta.`{location}`").select("version", "userMetadata").collect() if r["userMetadata"]}
        for b in range(1, 5):
            meta = history[version_of_barrier(location, b)]
            assert meta["tsb.barrier"] == b and meta["tsb.job"] == job and meta["tsb.attempt"], meta
            assert meta["tsb.inputs"], meta
        assert not Path(location, "tsb_staging").exists(), name
    merges = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{tables[WORD_COUNT]}`").collect()]
    assert "MERGE" in merges, merges  # barriers 2-4 of the merge sink are Delta's own MERGE

    report = read_report(plan + ".report.json")
    assert not [p for p in report["processed"] if p["manifest"]]  # nothing staged, no manifest served
    assert {(w["table"], w["barrier"]) for w in report["written"]} >= {(WORD_COUNT, 4), (COUNT_OF_COUNTS, 4)}


def test_a_merge_with_deletes_and_new_columns_through_the_delta_writer(spark, tmp_path: Path) -> None:
    """``delete_when`` deletes keys, a new nullable column is added (schema evolution), a
    dropped column is refused before anything is written, and compaction is Delta's OPTIMIZE."""
    location = str(tmp_path / "people")
    options = {"mode": "merge", "keys": ("id",), "delete_when": "op = 'D'", "writer": "delta"}

    def write(barrier: int, sql: str, **extra: object) -> object:
        return write_sink(spark, spark.sql(sql), table="t.people", location=location, job_id="people",
                          barrier=barrier, **{**options, **extra})

    write(1, "SELECT id, concat('p', id) AS name, 'U' AS op FROM range(6)")
    write(2, "SELECT * FROM VALUES (1L, 'one', 'U'), (2L, 'x', 'D'), (9L, 'nine', 'U') AS v(id, name, op)")
    write(3, "SELECT * FROM VALUES (3L, 'three', 'U', 7) AS v(id, name, op, age)")
    rows = {r["id"]: (r["name"], r["age"]) for r in spark.read.format("delta").load(location).collect()}
    assert rows == {0: ("p0", None), 1: ("one", None), 3: ("three", 7), 4: ("p4", None), 5: ("p5", None),
                    9: ("nine", None)}
    before = latest_version(location)
    with pytest.raises(Exception, match="dropped column"):
        write(4, "SELECT 1L AS id, 'U' AS op")
    assert latest_version(location) == before
    assert [b for _, b in barrier_commits(location)] == [1, 2, 3]

    appends = str(tmp_path / "events")
    for b in range(1, 5):
        write_sink(spark, spark.sql(f"SELECT {b} AS b"), table="t.events", location=appends, job_id="ev",
                   barrier=b, writer="delta", compaction=_compaction(3))
    ops = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{appends}`").orderBy("version").collect()]
    assert "OPTIMIZE" in ops, ops
    assert sorted(r["b"] for r in spark.read.format("delta").load(appends).collect()) == [1, 2, 3, 4]
    assert [b for _, b in barrier_commits(appends)] == [1, 2, 3, 4]  # OPTIMIZE carries no tag


def _compaction(min_files: int) -> object:
    from airflow_provider_tsb.delta.compaction import Compaction

    return Compaction(min_files=min_files)


def _run_job(plan: str, kill_at: str | None, remote: str | None, job: str = "wordcount_words"
             ) -> subprocess.CompletedProcess:
    """The app as its own process (a Spark Connect client of ``remote``) with Delta's writer."""
    env = {k: v for k, v in os.environ.items() if k not in ("TSB_KILL_AT", *CONNECT_MARKERS)}
    env.update(PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
               SPARK_REMOTE=remote or "", **{WRITER_VARIABLE: "delta"})
    if kill_at:
        env["TSB_KILL_AT"] = kill_at
    cmd = [sys.executable, str(APPS / f"wordcount/{job}.py"), "--plan", plan, "--report", plan + ".report"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def test_sigkill_at_every_point_then_rerun_is_exactly_once_with_the_delta_writer(
    spark, spark_remote, clean_wordcount, tmp_path: Path
) -> None:
    """Killed while Delta writes barrier 1, after Delta's commit of 2 (before WRITTEN), after
    the commit of 3: each rerun commits every barrier exactly once, equal to a clean run."""
    plan, tables = make_wordcount_plan(tmp_path, 4)
    location = tables[WORD_COUNT]
    for point, barrier in (("while_writing", 1), ("after_files", 2), ("after_commit", 3)):
        killed = _run_job(plan, f"{point}:wordcount_words:{barrier}", spark_remote)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-3000:])
        assert barrier not in {w["barrier"] for w in read_report(plan + ".report")["written"]}, point
        if point == "while_writing":  # killed as Delta's first files appeared: the Connect server may
            # still finish the write the dead client started (then the rerun finds it committed)
            committed = barrier_commits(location) if list(Path(location).glob("_delta_log/*.json")) else []
            assert [b for _, b in committed] in ([], [1]), point
        else:  # Delta committed; WRITTEN was not reported
            assert [b for _, b in barrier_commits(location)] == list(range(1, barrier + 1)), point
    done = _run_job(plan, None, spark_remote)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [b for _, b in barrier_commits(location)] == [1, 2, 3, 4]
    assert {w["barrier"] for w in read_report(plan + ".report")["written"]} >= {1, 2, 3, 4}
    assert {b: rows_at_barrier(spark, location, b) for b in range(1, 5)} == clean_wordcount[WORD_COUNT]
    assert not Path(location, "tsb_staging").exists()  # the job ran Delta's writer, nothing was staged


def test_a_fenced_attempt_writes_nothing_with_the_delta_writer(spark, tmp_path: Path, metastore_url: str) -> None:
    """A zombie attempt (a newer attempt took the job's fencing token) is refused before Delta
    writes anything, naming the fencing."""
    from airflow_provider_tsb.spark.metastore_catalog import MetastoreCatalog

    store = MetaStore(metastore_url)
    store.migrate()
    topology = wordcount_topology(str(tmp_path / "warehouse"))
    store.registry.register_topology(topology)
    from airflow_provider_tsb.delta.roots import append_words

    append_words(topology.location(WORDS), words_for(1))
    store.barriers.create(topology.name, read_root_versions(topology))
    zombie = MetastoreCatalog(metastore_url)
    zombie.begin_attempt("wordcount_counts")
    MetastoreCatalog(metastore_url).begin_attempt("wordcount_counts")  # the retry: a newer attempt
    location = topology.location(COUNT_OF_COUNTS)
    with pytest.raises(FencedError):
        write_sink(spark, spark.sql("SELECT 1L AS cnt, 1L AS cnt2"), table=f"tsb.{COUNT_OF_COUNTS}",
                   location=location, job_id="wordcount_counts", barrier=1, catalog=zombie, mode="overwrite",
                   writer="delta")
    assert not Path(location, "_delta_log").exists()


def test_the_metastore_path_with_the_delta_writer(spark, tmp_path: Path, monkeypatch) -> None:
    """The operator's command line on the metastore catalog with ``$TSB_SINK_WRITER=delta``:
    every barrier COMMIT, the FLIP-276 invariants at REPEATABLE_READ and READ_COMMITTED, the
    figures recorded with WRITTEN verified by the readers (an edited log is refused), and a
    rebuilt metastore equal to the original."""
    monkeypatch.setenv(WRITER_VARIABLE, "delta")
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    topology = wordcount_topology(str(tmp_path / "warehouse"))
    store.registry.register_topology(topology)
    from airflow_provider_tsb.delta.roots import append_words

    words: list[str] = []
    for b in range(1, 4):
        words += words_for(b)
        append_words(topology.location(WORDS), words_for(b))
        store.barriers.create(topology.name, read_root_versions(topology))
    from dev.dataplane import load_app_module

    for job in ("wordcount_words", "wordcount_counts"):
        app = load_app_module(f"wordcount/{job}.py").APP
        app = dataclasses.replace(app, sinks={n: dataclasses.replace(s) for n, s in app.sinks.items()})
        argv = ["--metastore-url", url, "--until-barrier", "3",
                *(f"--table={name}={topology.location(name)}" for name in (*app.sources, *app.sinks))]
        assert run_app(app, argv, spark=spark) == 0, job
        assert all(s.options.writer == "delta" for s in app.sinks.values())
    names = [f"tsb.{WORD_COUNT}", f"tsb.{COUNT_OF_COUNTS}"]
    assert committed_head(store, names) == 3
    for level in ("repeatable-read", "read-committed"):
        cut = read_tables_pandas(names, level, store=store)
        counts, coc = cut[names[0]], cut[names[1]]
        assert counts["cnt"].sum() == len(words) and coc["cnt2"].sum() == len(counts), level
        assert Counter(dict(zip(counts["word"], counts["cnt"], strict=True))) == Counter(words), level
    state = store.table_states.get(names[0], 3)
    assert state is not None and state.file_count, state  # the figures, read from the log at WRITTEN

    # an edit of the log that drops the merge's remove actions serves old rows twice: refused
    location = topology.location(WORD_COUNT)
    newest = Path(location, "_delta_log", f"{version_of_barrier(location, 3):020d}.json")
    kept = [line for line in newest.read_text().splitlines() if '"remove"' not in line]
    assert len(kept) < len(newest.read_text().splitlines())
    newest.write_text("\n".join(kept) + "\n")
    from airflow_provider_tsb.caches import CACHES

    CACHES.clear("delta.integrity.verified")
    with pytest.raises(DeltaLogIntegrityError, match="wordcount.word_count"):
        read_tables_pandas(names, "repeatable-read", store=store)


def test_partitioned_sinks_and_new_columns_through_the_delta_writer(spark, tmp_path: Path) -> None:
    """A partitioned ``append`` and ``merge`` sink on Delta's writer: the table's
    ``partitionColumns`` are the sink's, each barrier's rows land in their partitions, a new
    column is added (nullable), and a change of partition columns is refused before writing."""
    events, current = str(tmp_path / "events"), str(tmp_path / "current")
    rows = {1: "SELECT * FROM VALUES (1L, 'eu', 10), (2L, 'us', 20) AS v(id, region, value)",
            2: "SELECT * FROM VALUES (2L, 'us', 21, 'x'), (3L, 'eu', 30, 'y') AS v(id, region, value, note)"}
    for b, sql in rows.items():
        write_sink(spark, spark.sql(sql), table="t.events", location=events, job_id="ev", barrier=b,
                   partition_by=("region",), writer="delta")
        write_sink(spark, spark.sql(sql), table="t.current", location=current, job_id="cur", barrier=b,
                   mode="merge", keys=("id",), partition_by=("region",), writer="delta")
    assert DeltaTable(events).metadata().partition_columns == ["region"]
    assert DeltaTable(current).metadata().partition_columns == ["region"]
    assert sorted(p.name for p in Path(events).glob("region=*")) == ["region=eu", "region=us"]
    got = sorted(tuple(r) for r in spark.read.format("delta").load(current).select("id", "region", "value", "note")
                 .collect())
    assert got == [(1, "eu", 10, None), (2, "us", 21, "x"), (3, "eu", 30, "y")]
    assert spark.read.format("delta").load(events).count() == 4
    before = latest_version(events)
    with pytest.raises(Exception, match="partition_by"):
        write_sink(spark, spark.sql(rows[1]), table="t.events", location=events, job_id="ev", barrier=3,
                   partition_by=("id",), writer="delta")
    assert latest_version(events) == before
