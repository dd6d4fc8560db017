"""``tsb versions``: the Delta versions to read for tables at a consistency level, as JSON.

    tsb versions [--level L] TABLE...            (FLIP-276 "Data Consistency Type")
                 [--as-of N] [--min-barrier N] [--lease-seconds S]
                 [--max-staleness S [--wait S]]  bounded staleness
                 [--api-url URL]                 through the REST API instead of the metastore
                 [--token T | --user U [--password P]]   Airflow JWT, or a login for one
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from airflow_provider_tsb.cli.common import (
    add_store_options,
    barrier_id_arg,
    lease_seconds_arg,
    seconds_arg,
    store_of,
)


def cmd_versions(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.read.versions import resolve_versions

    if (args.token or args.user or args.password) and not args.api_url:
        raise ValueError("--token, --user and --password are for the REST API: add --api-url (Airflow's base URL) "
                         "or leave them out to read the metastore")
    result = resolve_versions(
        args.tables, level=args.level, as_of=args.as_of, min_barrier=args.min_barrier,
        lease_seconds=args.lease_seconds, max_staleness_s=args.max_staleness, wait_s=args.wait,
        api_url=args.api_url, token=args.token, username=args.user, password=args.password,
        store=None if args.api_url else store_of(args),
    )
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


def register(sub: Any) -> None:
    """Add ``tsb versions`` to the ``tsb`` parser."""
    p = sub.add_parser("versions", help="Delta versions to read for tables at a consistency level (JSON)")
    p.add_argument("tables", nargs="+", metavar="TABLE", help="catalog.database.table names")
    p.add_argument("--level", default="repeatable-read",
                   help="read-uncommitted | read-committed | repeatable-read (default)")
    p.add_argument("--as-of", type=barrier_id_arg, help="time travel to this COMMIT barrier")
    p.add_argument("--min-barrier", type=barrier_id_arg, help="last seen barrier: never return an older one")
    p.add_argument("--lease-seconds", type=lease_seconds_arg, help="pin the versions for this many seconds")
    p.add_argument("--max-staleness", type=seconds_arg, metavar="SECONDS",
                   help="bounded staleness: the newest COMMIT barrier only if at most SECONDS old, else exit 1 "
                   "naming the lagging tables and their writer jobs")
    p.add_argument("--wait", type=seconds_arg, metavar="SECONDS",
                   help="with --max-staleness: wait up to SECONDS for a fresh enough barrier")
    p.add_argument("--api-url", default=os.environ.get("TSB_API_URL"),
                   help="ask the REST API instead of the metastore: Airflow's base URL (http://host:8080) or "
                   "the API URL ending in /tsb/api/v1 (default $TSB_API_URL)")
    p.add_argument("--token", help="Airflow JWT for --api-url (default $TSB_API_TOKEN)")
    p.add_argument("--user", help="with --api-url and no token: log in to Airflow as this user (default $TSB_API_USER)")
    p.add_argument("--password", help="the --user's password (default $TSB_API_PASSWORD, which keeps it off "
                   "the command line)")
    add_store_options(p)
    p.set_defaults(func=cmd_versions)
