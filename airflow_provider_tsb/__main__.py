"""``python -m airflow_provider_tsb`` runs the ``tsb`` command line."""

from airflow_provider_tsb.cli import run

run()
