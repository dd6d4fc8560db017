"""Two teams' DAG files on one root table share barriers (issue 13 item 1), on the real path.

``dags/wordcount_topology.py`` (team A) and ``dags/word_lengths_topology.py`` (team B) both declare
``tsb.raw.words``. Barriers come from each DAG's barrier hook (as the barrier operator generates
them), team B registering only at its first barrier, after team A's barrier 1; the jobs run as the
operator runs them on a ``spark_connect`` connection (``TsbSparkJobHook`` -> ``ConnectClient``, a
Spark Connect client process per job run, on the metastore catalog, PostgreSQL). Read together at
REPEATABLE_READ and AS OF every barrier -- through the store, the readers, the REST API with
``TsbClient`` and ``tsb versions`` -- the invariant that spans both topologies holds:
``sum(length_count.cnt) == sum(word_count.cnt) == count(words)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dev.e2e import spark_connection
from tests.conftest import _pg_database

REPO = Path(__file__).resolve().parents[2]
WORDS, WORD_COUNT, LENGTH_COUNT = "tsb.raw.words", "tsb.wordcount.word_count", "tsb.word_lengths.length_count"
Q = [WORD_COUNT, LENGTH_COUNT]

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def _run(topology: Any, job_id: str, barrier: int) -> list[int]:
    """The job up to ``barrier`` as the operator runs it on a ``spark_connect`` connection: its
    app a Spark Connect client process of the session's server."""
    from airflow_provider_tsb.hooks.spark_engine import ConnectClient, SparkEngine
    from airflow_provider_tsb.hooks.spark_job import TsbSparkJobHook

    job = topology.jobs[job_id]
    client = ConnectClient(job.application, SparkEngine.from_connection("spark_default"), conf=dict(job.conf),
                           job_id=job_id)
    return TsbSparkJobHook(topology, job_id).run(barrier, client).barriers


def _sums(data: dict[str, Any]) -> tuple[int, int, int]:
    return (sum(r["cnt"] for r in data[WORD_COUNT].to_pylist()),
            sum(r["cnt"] for r in data[LENGTH_COUNT].to_pylist()), data[WORDS].num_rows)


def test_two_teams_on_one_root_table_read_together_with_an_invariant_across_both(
    postgres: Any, spark_remote: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fastapi.testclient import TestClient

    from airflow_provider_tsb.api.routes import create_metaservice_app
    from airflow_provider_tsb.cli import main
    from airflow_provider_tsb.dag_loading import load_dag_files
    from airflow_provider_tsb.exceptions import InconsistentReadError
    from airflow_provider_tsb.hooks.barrier import TsbBarrierHook
    from airflow_provider_tsb.metastore.store import MetaStore
    from airflow_provider_tsb.read.client import TsbClient
    from airflow_provider_tsb.read.readers import read_tables_arrow
    from tsb_examples.ingest import ingest_next_words

    url = _pg_database(postgres)
    monkeypatch.setenv("TSB_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("AIRFLOW_CONN_TSB_DEFAULT", json.dumps({"conn_type": "tsb", "extra": {"sqlalchemy_url": url}}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", spark_connection(spark_remote))
    store = MetaStore(url)
    store.migrate()
    found = {t.name: t for f in load_dag_files([str(REPO / "dags")]) for t in f.topologies}
    team_a, team_b = found["wordcount"], found["word_lengths"]
    assert team_a.location(WORDS) == team_b.location(WORDS)

    generated = []
    for n, team in enumerate((team_a, team_b, team_a), start=1):  # team B registers at its first barrier
        ingest_next_words(team_a.location("raw.words"), run_key=f"ingest/{n}", lines=15)
        generated.append(TsbBarrierHook(team).generate(f"{team.name}/{n}").barrier)
    assert generated == [1, 2, 3]  # one barrier sequence across the two DAGs
    domain = store.domains.get("word_lengths")
    assert (domain.name, domain.topologies, list(domain.root_tables)) == (
        "wordcount", ("word_lengths", "wordcount"), [WORDS])
    assert [b.barrier for b in store.barriers.list("word_lengths", ascending=True)] == [2, 3]
    for b in (2, 3):
        assert store.barriers.get("wordcount", b).root_versions == store.barriers.get("word_lengths",
                                                                                              b).root_versions

    assert _run(team_a, "wordcount_words", 3) == [1, 2, 3]
    assert _run(team_b, "word_lengths", 3) == [2, 3]  # its first epoch starts at the table's creation

    resolved = store.resolution.resolve([*Q, WORDS], "REPEATABLE_READ")
    assert resolved.barrier == 3
    counts = _sums(read_tables_arrow([*Q, WORDS], store=store))
    assert counts[0] == counts[1] == counts[2] > 0
    for barrier in (2, 3):
        a, b, words = _sums(read_tables_arrow([*Q, WORDS], store=store, as_of=barrier))
        assert a == b == words > 0
    assert _sums(read_tables_arrow([*Q, WORDS], store=store, as_of=2))[2] < counts[2]
    with pytest.raises(InconsistentReadError, match=r"barrier 1 is not COMMIT over .*length_count"):
        store.resolution.resolve(Q, "REPEATABLE_READ", as_of=1)  # team B joined at barrier 2

    client = TsbClient("/tsb/api/v1", http=TestClient(create_metaservice_app(store, prefix="/tsb/api/v1")))
    answer = client.versions(Q)
    assert answer["barrier"] == 3
    assert {n: t["version"] for n, t in answer["tables"].items()} == {n: resolved.tables[n].version for n in Q}
    assert client.versions(Q, as_of=2)["barrier"] == 2
    for level in ("READ_COMMITTED", "READ_UNCOMMITTED"):
        assert set(client.versions(Q, level=level)["tables"]) == set(Q)
    capsys.readouterr()  # the jobs' and the client's log lines
    assert main(["versions", "--url", url, "--as-of", "2", *Q]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["barrier"] == 2 and set(shown["tables"]) == set(Q)
