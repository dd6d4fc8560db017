"""Modules shared by the example DAG files (listed in ``.airflowignore``: not DAG files)."""
