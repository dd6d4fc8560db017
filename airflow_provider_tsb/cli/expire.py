"""The ``tsb expire`` command: snapshot expiry by hand (see :mod:`airflow_provider_tsb.maintenance.expiry`)::

    tsb expire --topology flights --keep-last 10 --hourly 24 --daily 7 --dry-run
    tsb expire tsb.flights.daily_delays --keep-last 3

Expires the named tables, or every table the metastore registers for ``--topology``, with the
retention policy of the options (:class:`~airflow_provider_tsb.maintenance.retention.RetentionPolicy`).
``--dry-run`` shows what would go -- the barriers that AS OF would then refuse
(``expired_barriers``), the versions kept and the files vacuum would delete -- and marks and
deletes nothing. Prints one JSON result per table (a list). The metastore is ``--url``, else
``$TSB_METASTORE_URL``, else the ``tsb_default`` connection.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def _count(low: int):  # noqa: ANN202 - an argparse type
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = low - 1
        if not low <= number <= 10**6:
            raise argparse.ArgumentTypeError(f"{value!r}: give an integer from {low} to 1000000")
        return number

    return parse


def cmd_expire(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.cli.common import store_of
    from airflow_provider_tsb.maintenance.expiry import expire_snapshots
    from airflow_provider_tsb.maintenance.retention import RetentionPolicy

    if not args.tables and not args.topology:
        raise ValueError("name the tables to expire, or --topology NAME for all its tables")
    store = store_of(args)
    tables = list(args.tables)
    if args.topology:
        tables += [t.name for t in store.registry.tables(args.topology) if t.kind in ("root", "intermediate")]
        if not tables:
            raise ValueError(f"topology {args.topology!r} has no registered tables; register it first")
    policy = RetentionPolicy(keep_last=args.keep_last, hourly_hours=args.hourly, daily_days=args.daily)
    results = [
        expire_snapshots(store, table, policy, dry_run=args.dry_run, consumers=not args.no_consumers)
        for table in dict.fromkeys(tables)
    ]
    print(json.dumps(results, sort_keys=True))
    return 0


def register(sub: Any) -> None:
    """Add ``tsb expire`` to the ``tsb`` parser."""
    from airflow_provider_tsb.cli.common import metastore_url_arg

    p = sub.add_parser(
        "expire",
        help="snapshot expiry with a retention policy; --dry-run shows what would go (JSON)",
        description="Marks the versions to go as expired in the metastore (leases on them are refused, "
        "AS OF them fails), then vacuums. Never removes a version a live lease pins or a registered "
        "job has still to read.",
    )
    p.add_argument("tables", nargs="*", metavar="TABLE", help="catalog.database.table names")
    p.add_argument("--topology", help="expire every table of this registered topology")
    p.add_argument("--keep-last", type=_count(1), default=10, help="newest WRITTEN barriers kept (default 10)")
    p.add_argument("--hourly", type=_count(0), default=0, metavar="HOURS",
                   help="also keep the newest barrier of each hour of the last HOURS hours")
    p.add_argument("--daily", type=_count(0), default=0, metavar="DAYS",
                   help="also keep the newest barrier of each day of the last DAYS days")
    p.add_argument("--dry-run", action="store_true", help="show what would go; mark and delete nothing")
    p.add_argument("--no-consumers", action="store_true",
                   help="expire what registered jobs have still to read too (they then fail on it)")
    p.add_argument("--url", "--metastore-url", dest="url", type=metastore_url_arg,
                   help="metastore SQLAlchemy URL (default: $TSB_METASTORE_URL or the connection)")
    p.add_argument("--conn-id", default="tsb_default", help="Airflow connection id of the metastore")
    p.set_defaults(func=cmd_expire)
