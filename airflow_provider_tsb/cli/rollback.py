"""The ``tsb rollback`` command: a revision by hand (see :mod:`airflow_provider_tsb.maintenance.revision`)::

    tsb rollback flights.carrier_daily_delay --to-barrier 2 --dags dags/
    tsb rollback flights.carrier_daily_delay --resume --dags dags/
    tsb rollback flights.flights_enriched --reprocess --dags dags/

The topology is the one the DAG files under ``--dags`` declare with that table; the metastore is
``--url``, else ``$TSB_METASTORE_URL``, else the ``tsb_default`` connection. Prints the result as
JSON (``revision``, ``barrier``, ``tables``: {table: Delta version}, ``checkpoints`` deleted,
``resumed``); exit code 1 when a revision is pending or a table does not hold the barrier.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def cmd_rollback(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.cli.common import store_of
    from airflow_provider_tsb.cli.runs import find_topology
    from airflow_provider_tsb.maintenance.revision import resume_revision, revise

    if not (args.resume or args.reprocess or args.to_barrier is not None):
        raise ValueError("say where to go: --to-barrier K, --reprocess (from barrier 1) or --resume")
    topology = find_topology(args.dags, table=args.table)
    store = store_of(args)
    if args.resume:
        result = resume_revision(store, topology, args.table)
    else:
        result = revise(store, topology, args.table, args.to_barrier or 0, reprocess=args.reprocess)
    print(json.dumps(result.to_xcom(), sort_keys=True))
    return 0


def register(sub: Any) -> None:
    """Add ``tsb rollback`` to the ``tsb`` parser."""
    from airflow_provider_tsb.cli.common import barrier_id_arg, metastore_url_arg

    p = sub.add_parser(
        "rollback",
        help="roll a table and its downstream tables back to a barrier, or reprocess them (JSON)",
        description="A revision: the plan is recorded in the metastore before any table is touched; "
        "if it stops, --resume finishes it. Jobs of the tables are refused until it is done.",
    )
    p.add_argument("table", help="intermediate table (catalog.database.table)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--to-barrier", type=barrier_id_arg, help="the barrier to go back to")
    what.add_argument("--reprocess", action="store_true",
                      help="empty the tables: the jobs process every barrier again from barrier 1")
    what.add_argument("--resume", action="store_true", help="finish the pending revision over TABLE")
    p.add_argument("--dags", nargs="+", metavar="PATH", required=True,
                   help="DAG files or folders declaring the topology")
    p.add_argument("--url", "--metastore-url", dest="url", type=metastore_url_arg,
                   help="metastore SQLAlchemy URL (default: $TSB_METASTORE_URL or the connection)")
    p.add_argument("--conn-id", default="tsb_default", help="Airflow connection id of the metastore")
    p.set_defaults(func=cmd_rollback)
