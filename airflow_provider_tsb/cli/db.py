"""``tsb db migrate | check | rebuild``: the metastore's schema, and restoring a lost metastore.

    tsb db migrate                       create or upgrade the schema (idempotent)
    tsb db check                         exit 0 if the schema is up to date, 2 otherwise
    tsb db rebuild --dags PATH...        restore a lost metastore from the DAG files and Delta logs
"""

from __future__ import annotations

import argparse
from typing import Any

from airflow_provider_tsb.cli.common import add_store_options, store_of


def cmd_db_migrate(args: argparse.Namespace) -> int:
    store = store_of(args)
    revision = store.migrate()
    print(f"tsb metastore at {store.engine.url.render_as_string(hide_password=True)} is at revision {revision}")
    return 0


def cmd_db_check(args: argparse.Namespace) -> int:
    store = store_of(args)
    revision = store.check()
    print(f"tsb metastore at {store.engine.url.render_as_string(hide_password=True)} is up to date ({revision})")
    return 0


def cmd_db_rebuild(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.maintenance.rebuild import cmd_db_rebuild as rebuild

    return rebuild(args, store_of(args))


def register(sub: Any) -> None:
    """Add ``tsb db`` to the ``tsb`` parser."""
    db = sub.add_parser("db", help="manage the metastore schema").add_subparsers(dest="db_command", required=True)
    p = db.add_parser("migrate", help="create or upgrade the metastore schema (idempotent)")
    add_store_options(p)
    p.set_defaults(func=cmd_db_migrate)
    p = db.add_parser("check", help="exit 0 if the metastore schema is up to date, 2 otherwise")
    add_store_options(p)
    p.set_defaults(func=cmd_db_check)
    p = db.add_parser("rebuild", help="restore a lost metastore from the DAG files, the barrier logs and the "
                      "tables' Delta logs (JSON report)")
    p.add_argument("--dags", nargs="+", metavar="PATH", required=True,
                   help="DAG files or folders declaring the topologies to restore")
    p.add_argument("--force", action="store_true",
                   help="replace the barriers the metastore holds for these topologies (else it must hold none)")
    add_store_options(p)
    p.set_defaults(func=cmd_db_rebuild)
