"""Helpers of the end-to-end tests (``tests/e2e``): a metastore and the environment the example
DAGs (``dags/``) need under a real Airflow."""

from __future__ import annotations

import sys
from pathlib import Path

from airflow_provider_tsb.metastore.store import MetaStore

REPO = Path(__file__).resolve().parents[2]


def examples_deployment(root: Path, **env_extra: str) -> tuple[MetaStore, dict[str, str]]:
    """A migrated SQLite metastore under ``root`` and the environment of an Airflow serving the
    repository's ``dags/`` with their tables under ``root/warehouse``.

    Returns:
        ``(store, env)``: ``env`` holds ``TSB_METASTORE_URL``, ``TSB_WAREHOUSE``,
        ``TSB_SPARK_APPS``, the ``spark_local`` connection (``local[2]``), ``PYSPARK_PYTHON``
        and a DAG-import timeout of 120 s, updated with ``env_extra``.
    """
    url = f"sqlite:///{root / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    env = {
        "TSB_METASTORE_URL": url,
        "TSB_WAREHOUSE": str(root / "warehouse"),
        "TSB_SPARK_APPS": str(REPO / "spark_apps"),
        "AIRFLOW_CONN_SPARK_LOCAL": '{"conn_type": "spark", "host": "local[2]"}',
        "PYSPARK_PYTHON": sys.executable,
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        **env_extra,
    }
    return store, env
