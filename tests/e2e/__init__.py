"""End-to-end tests under the real Airflow scheduler."""
