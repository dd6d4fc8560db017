"""Helpers of the end-to-end tests (``tests/e2e``): a metastore and the environment the example
DAGs (``dags/``) need under a real Airflow."""

from __future__ import annotations

import sys
from pathlib import Path

from airflow_provider_tsb.metastore.store import MetaStore

REPO = Path(__file__).resolve().parents[1]


def spark_connection(remote: str | None) -> str:
    """A Spark connection as JSON: ``spark_connect`` to ``remote`` (``sc://host:port``), or
    ``spark`` with master ``local[2]`` (spark-submit) when ``remote`` is ``None``."""
    if remote:
        host, port = remote[len("sc://"):].split("/", 1)[0].rsplit(":", 1)
        return f'{{"conn_type": "spark_connect", "host": "sc://{host}", "port": {int(port)}}}'
    return '{"conn_type": "spark", "host": "local[2]"}'


def examples_deployment(root: Path, remote: str | None = None, **env_extra: str) -> tuple[MetaStore, dict[str, str]]:
    """A migrated SQLite metastore under ``root`` and the environment of an Airflow serving the
    repository's ``dags/`` with their tables under ``root/warehouse``.

    Args:
        remote: the Spark Connect server the jobs are clients of (the ``connect`` engine);
            ``None``: spark-submit with ``local[2]``.

    Returns:
        ``(store, env)``: ``env`` holds ``TSB_METASTORE_URL``, ``TSB_WAREHOUSE``,
        ``TSB_SPARK_APPS``, the ``spark_local`` connection (:func:`spark_connection`),
        ``PYSPARK_PYTHON`` and a DAG-import timeout of 120 s, updated with ``env_extra``.
    """
    url = f"sqlite:///{root / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    env = {
        "TSB_METASTORE_URL": url,
        "TSB_WAREHOUSE": str(root / "warehouse"),
        "TSB_SPARK_APPS": str(REPO / "spark_apps"),
        "AIRFLOW_CONN_SPARK_LOCAL": spark_connection(remote),
        "PYSPARK_PYTHON": sys.executable,
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        **env_extra,
    }
    return store, env
