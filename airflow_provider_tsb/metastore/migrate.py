"""Alembic migrations of the tsb metastore, run programmatically (``tsb db migrate``).

The Alembic version table is ``tsb_alembic_version`` so the metastore can share a database
with Airflow (whose own table is ``alembic_version``) without either touching the other.
"""

from __future__ import annotations

import os

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from airflow_provider_tsb.exceptions import MetastoreError

VERSION_TABLE = "tsb_alembic_version"
MIGRATIONS_DIR = os.path.join(os.path.dirname(__file__), "migrations")


def alembic_config(engine: Engine) -> Config:
    """An Alembic :class:`Config` for the tsb migrations bound to ``engine``."""
    config = Config()
    config.set_main_option("script_location", MIGRATIONS_DIR)
    config.set_main_option("version_table", VERSION_TABLE)
    config.attributes["engine"] = engine
    return config


def head_revision() -> str:
    """The newest migration revision shipped with this package."""
    script = ScriptDirectory(MIGRATIONS_DIR)
    head = script.get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` for an empty database)."""
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Create or upgrade the schema. Idempotent. Returns the revision reached.

    Raises:
        MetastoreError: the database cannot be reached (names the URL).
    """
    try:
        command.upgrade(alembic_config(engine), revision)
        reached = current_revision(engine)
    except MetastoreError:
        raise
    except Exception as exc:
        shown = engine.url.render_as_string(hide_password=True)
        raise MetastoreError(f"migrating the tsb metastore at {shown} failed: {exc}") from exc
    assert reached is not None
    return reached


def check(engine: Engine) -> str:
    """Return the current revision when it is the head revision.

    Raises:
        MetastoreError: the schema is missing or behind; the message says to run ``tsb db migrate``.
    """
    shown = engine.url.render_as_string(hide_password=True)
    try:
        current = current_revision(engine)
    except Exception as exc:
        raise MetastoreError(f"cannot reach the tsb metastore at {shown}: {exc}") from exc
    head = head_revision()
    if current != head:
        raise MetastoreError(
            f"the tsb metastore at {shown} is at revision {current or '(empty)'}, "
            f"expected {head}: run `tsb db migrate`"
        )
    return current
