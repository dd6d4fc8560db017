"""TSB REST API and UI pages: a FastAPI app mounted into the Airflow api-server at ``/tsb``."""
