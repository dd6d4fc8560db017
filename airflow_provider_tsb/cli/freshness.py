"""The ``tsb freshness`` command: which tables miss their freshness target, and why::

    tsb freshness wordcount                 # a table per non-root table; exit 1 if any misses
    tsb freshness wordcount --format json   # the FreshnessReport as JSON

Columns: table, target (s), lag (s) behind the newest generated barrier, MISSED or ok, the
table's newest COMMIT barrier and the bottleneck job (the upstream job furthest behind; see
:mod:`airflow_provider_tsb.metastore.freshness`). Exit 0 when no table misses its target, 1
when one does (so a cron job or a CI check can alert), 2 on usage errors. The metastore is
``--url``, else ``$TSB_METASTORE_URL``, else the ``tsb_default`` connection.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from airflow_provider_tsb.exceptions import TsbError


def cmd_freshness(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.cli.common import store_of

    store = store_of(args)
    if args.topology not in store.registry.topologies():
        raise TsbError(f"topology {args.topology!r} is not registered; known: {store.registry.topologies()}")
    report = store.freshness.report(args.topology)
    if args.format == "json":
        print(json.dumps({**dataclasses.asdict(report), "missed": report.missed}, indent=2, sort_keys=True))
        return 1 if report.missed else 0
    age = "-" if report.newest_barrier_age_s is None else f"{report.newest_barrier_age_s:.1f} s ago"
    print(f"topology {report.topology}: newest barrier {report.newest_barrier} (generated {age})")
    rows = [("TABLE", "TARGET_S", "LAG_S", "STATUS", "COMMITTED", "BOTTLENECK")]
    for t in report.tables.values():
        rows.append((
            t.table, "-" if t.target_s is None else f"{t.target_s:g}", f"{t.lag_s:.1f}",
            "MISSED" if t.missed else "ok" if t.target_s is not None else "-",
            str(t.committed_barrier), t.bottleneck or "-",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 1 if report.missed else 0


def register(sub: Any) -> None:
    """Add ``tsb freshness`` to the ``tsb`` command line."""
    from airflow_provider_tsb.cli.common import metastore_url_arg

    p = sub.add_parser("freshness", help="lag of each table against its freshness target and the bottleneck job; "
                       "exit 1 if a table misses its target")
    p.add_argument("topology", help="topology name")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--url", "--metastore-url", dest="url", type=metastore_url_arg,
                   help="metastore SQLAlchemy URL (default: $TSB_METASTORE_URL or the tsb_default connection)")
    p.add_argument("--conn-id", default="tsb_default", help="Airflow connection id of the metastore")
    p.set_defaults(func=cmd_freshness)
