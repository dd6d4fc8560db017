"""The ``tsb`` command line (also ``python -m airflow_provider_tsb``).

Commands::

    tsb db migrate | check               create/upgrade or check the metastore schema
    tsb db rebuild --dags PATH...        restore a lost metastore from the DAG files and Delta logs
    tsb topology validate PATH...        validate the union of the topologies in DAG files
    tsb topology show NAME [--dags PATH] print a topology's graph
    tsb versions [--level L] TABLE...    consistent Delta versions of tables, as JSON
                 [--max-staleness S [--wait S]]  bounded staleness
    tsb rollback TABLE --to-barrier K | --reprocess | --resume --dags PATH   a revision (JSON)
    tsb expire TABLE... | --topology NAME [--keep-last N --hourly H --daily D] [--dry-run]
                                         snapshot expiry with a retention policy (JSON)
    tsb freshness TOPOLOGY [--format json]  lag per table vs its freshness target, bottleneck job
    tsb spark start | stop | status      the local Spark Connect server the jobs share
    tsb root append | barrier create | job run   a topology by hand (JSON)
    tsb check                            the example topologies under concurrent readers
    tsb share profile SHARE --api-url URL      a Delta Sharing recipient and its profile (list, revoke)

One module of this package per command group (``db``, ``topology``, ``versions``, ``check``,
``runs``, ``rollback``, ``expire``, ``freshness``, ``spark``, ``share``), each adding its commands with its
``register(sub)``; what they share (the metastore of a command, argument types) is in
:mod:`.common`.

Exit codes: 0 success, 1 validation or consistency errors, 2 usage or configuration errors.

Start-up cost: a command imports only what it uses (``tsb --help`` loads neither SQLAlchemy nor
Airflow; a metastore given by ``--url`` or ``$TSB_METASTORE_URL`` is opened without Airflow,
whose import alone takes seconds). ``benchmarks/cli_startup.py`` measures it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from airflow_provider_tsb.exceptions import TsbError


def build_parser() -> argparse.ArgumentParser:
    """The ``tsb`` argument parser (every command has ``--help``): one command group per module
    of this package, each adding itself with its ``register(sub)``."""
    from airflow_provider_tsb.cli import (
        check,
        db,
        expire,
        freshness,
        rollback,
        runs,
        share,
        spark,
        topology,
        versions,
    )

    parser = argparse.ArgumentParser(
        prog="tsb",
        description="airflow-provider-tsb: timestamp barriers (FLIP-276) for Spark ETL on Delta Lake",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (db, topology, versions, check, runs, rollback, expire, freshness, spark, share):
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tsb`` command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TsbError as exc:
        print(f"tsb: error: {exc}", file=sys.stderr)
        code = getattr(exc, "exit_code", None)  # a command's own (e.g. 2: configuration)
        return code if isinstance(code, int) else 1 if not exc.__class__.__name__.startswith("Metastore") else 2
    except (FileNotFoundError, ValueError) as exc:
        print(f"tsb: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        # SQLAlchemy is imported only by the commands that open the metastore
        sa_exc = sys.modules.get("sqlalchemy.exc")
        if sa_exc is None or not isinstance(exc, sa_exc.ArgumentError):
            raise
        # NoSuchModuleError: an unknown URL scheme or driver
        print(f"tsb: error: cannot open the metastore: {exc}; use a sqlite:/// or postgresql:// URL",
              file=sys.stderr)
        return 2


def run() -> None:
    """The ``tsb`` console script: :func:`main`, then end the process at once.

    The exit skips the interpreter's teardown, where delta-rs's native threads can abort the
    process with "terminate called without an active exception" (SIGABRT) after a command has
    done its work (delta-io/delta-rs#2184): a successful command must exit 0. Output streams are
    flushed first.
    """
    try:
        code = main()
    except SystemExit as exc:  # argparse: --help, usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
