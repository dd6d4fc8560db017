"""The test suite of airflow-provider-tsb (a package, so helpers import as ``tests.support``)."""
