"""The metastore hook: a ``tsb`` Airflow connection to a SQLAlchemy URL, and its connection form."""

from __future__ import annotations

import pytest


def test_tsb_connection_urls_and_a_sqlite_dialect_without_file(monkeypatch) -> None:
    from airflow.sdk import Connection

    from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook, connection_to_url

    pg = Connection(conn_id="tsb_pg", conn_type="tsb", host="db", port=5432, login="u", password="p w", schema="m")
    assert connection_to_url(pg) == "postgresql+psycopg2://u:p+w@db:5432/m"
    lite = Connection(conn_id="tsb_lite", conn_type="tsb", host="/data/tsb.db", extra='{"dialect": "sqlite"}')
    assert connection_to_url(lite) == "sqlite:////data/tsb.db"
    nofile = Connection(conn_id="tsb_nofile", conn_type="tsb", extra='{"dialect": "sqlite"}')
    with pytest.raises(ValueError, match="connection 'tsb_nofile': dialect sqlite needs Host, the SQLite database"):
        connection_to_url(nofile)
    behaviour = TsbMetastoreHook.get_ui_field_behaviour()
    assert behaviour["relabeling"]["schema"] == "Database" and behaviour["hidden_fields"] == []
