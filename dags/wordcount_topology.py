"""The FLIP-276 example: words -> word_count(word, cnt) -> count_of_counts(cnt, cnt2).

The root table ``tsb.raw.words`` receives the words of the next lines of a real English text
(the Python documentation topics shipped with CPython) on every run; each run is one barrier.
At every barrier, read at REPEATABLE_READ: ``sum(word_count.cnt) == count(words)`` and
``sum(count_of_counts.cnt2) == count(word_count)``.
"""

from __future__ import annotations

import os
from pathlib import Path

# named here so the dag-processor imports it once, before it forks a child per parse
# ([dag_processor] parsing_pre_import_modules; docs/airflow.md "DAG parsing under load")
import airflow.providers.apache.spark.operators.spark_submit  # noqa: F401
import pendulum
from airflow.sdk import DAG, task

from airflow_provider_tsb.task_group import TsbTopologyTaskGroup
from airflow_provider_tsb.topology import Topology
from tsb_examples.spark_conf import LOCAL_SPARK_CONF

APPS = Path(os.environ.get("TSB_SPARK_APPS") or Path(__file__).resolve().parents[1] / "spark_apps")

topology = Topology("wordcount")
topology.root_table("raw.words")
topology.job(
    "wordcount_words",
    str(APPS / "wordcount" / "wordcount_words.py"),
    sources=["raw.words"],
    sinks=["wordcount.word_count"],
    conf=LOCAL_SPARK_CONF,
)
topology.job(
    "wordcount_counts",
    str(APPS / "wordcount" / "wordcount_counts.py"),
    sources=["wordcount.word_count"],
    sinks=["wordcount.count_of_counts"],
    conf=LOCAL_SPARK_CONF,
)

with DAG(
    dag_id="wordcount_topology",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["tsb", "example", "flip-276"],
    doc_md=__doc__,
) as dag:

    @task(retries=2)
    def ingest_words(**context: object) -> dict:
        """Append the words of the next 200 lines of the corpus (idempotent per DAG run)."""
        from tsb_examples.ingest import ingest_next_words

        run = context["dag_run"]
        return ingest_next_words(topology.location("raw.words"), run_key=f"{run.dag_id}/{run.run_id}")

    ingest_words() >> TsbTopologyTaskGroup(topology, spark_conn_id="spark_local")
