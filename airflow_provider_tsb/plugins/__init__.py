"""Airflow plugins of airflow-provider-tsb (loaded through the ``airflow.plugins`` entry point)."""
