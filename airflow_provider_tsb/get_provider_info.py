"""Provider metadata read by Airflow's ProvidersManager (``apache_airflow_provider`` entry point)."""

from __future__ import annotations

from typing import Any

from airflow_provider_tsb import __version__

#: the ``tsb`` connection's extra fields (the connection form, Airflow 3: ``conn-fields`` of
#: the provider info, a JSON schema per field; stored under the same keys in the extra)
TSB_CONN_FIELDS: dict[str, Any] = {
    "sqlalchemy_url": {
        "label": "SQLAlchemy URL",
        "description": "The whole metastore URL, e.g. postgresql+psycopg2://user:pw@host:5432/tsb; "
        "when set, the host/login/port/database fields are not used.",
        "schema": {"type": ["string", "null"]},
    },
    "dialect": {
        "label": "Dialect",
        "description": "postgresql (default: Host, Port, Login, Password, Database) or sqlite (Host is the "
        "database file path).",
        "schema": {"type": ["string", "null"], "enum": ["postgresql", "sqlite", None], "default": None},
    },
}

#: the ``tsb`` connection form's standard fields (``ui-field-behaviour``, kebab-case keys)
TSB_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": [],
    "relabeling": {"schema": "Database", "host": "Host (or SQLite file)"},
    "placeholders": {
        "host": "PostgreSQL host, or the SQLite file with dialect sqlite; empty: $AIRFLOW_HOME/tsb.db",
        "schema": "tsb",
        "port": "5432",
        "extra": '{"sqlalchemy_url": "postgresql+psycopg2://user:pw@host:5432/tsb"}',
    },
}


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
                "hook-name": "TSB Metastore",
                "connection-type": "tsb",
                "conn-fields": TSB_CONN_FIELDS,
                "ui-field-behaviour": TSB_UI_FIELD_BEHAVIOUR,
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
