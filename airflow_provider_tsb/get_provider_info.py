"""Provider metadata read by Airflow's ProvidersManager (``apache_airflow_provider`` entry point)."""

from __future__ import annotations

from typing import Any

from airflow_provider_tsb import __version__


def get_provider_info() -> dict[str, Any]:
    """Return the provider-info dict (schema: Airflow's ``provider_info.schema.json``)."""
    return {
        "package-name": "airflow-provider-tsb",
        "name": "Timestamp Barriers (tsb)",
        "description": "Consistent Spark ETL over Delta Lake with FLIP-276 timestamp barriers.",
        "versions": [__version__],
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_tsb.hooks.metastore.TsbMetastoreHook",
                "connection-type": "tsb",
            }
        ],
        "hooks": [
            {
                "integration-name": "Timestamp Barriers",
                "python-modules": [
                    "airflow_provider_tsb.hooks.metastore",
                    "airflow_provider_tsb.hooks.barrier",
                    "airflow_provider_tsb.hooks.spark_job",
                    "airflow_provider_tsb.hooks.maintenance",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": "Timestamp Barriers",
                "python-modules": [
                    "airflow_provider_tsb.operators.barrier",
                    "airflow_provider_tsb.operators.spark_job",
                    "airflow_provider_tsb.operators.maintenance",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "Timestamp Barriers",
                "python-modules": [
                    "airflow_provider_tsb.sensors.barrier_committed",
                    "airflow_provider_tsb.sensors.freshness",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "Timestamp Barriers",
                "python-modules": ["airflow_provider_tsb.triggers.barrier_committed"],
            }
        ],
        "integrations": [
            {
                "integration-name": "Timestamp Barriers",
                "external-doc-url": "https://cwiki.apache.org/confluence/display/FLINK/FLIP-276",
                "tags": ["software"],
            }
        ],
    }
