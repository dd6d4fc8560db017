"""The tsb metastore: SQLAlchemy models, Alembic migrations and the :class:`MetaStore` API."""

from airflow_provider_tsb.metastore.store import MetaStore

__all__ = ["MetaStore"]
