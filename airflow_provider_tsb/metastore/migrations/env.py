"""Alembic environment of the tsb metastore (see ``airflow_provider_tsb.metastore.migrate``)."""

from __future__ import annotations

from alembic import context

from airflow_provider_tsb.metastore.models import metadata

config = context.config
engine = config.attributes["engine"]
version_table = config.get_main_option("version_table") or "tsb_alembic_version"

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=version_table,
        render_as_batch=engine.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
