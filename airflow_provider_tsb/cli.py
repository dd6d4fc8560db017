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

Exit codes: 0 success, 1 validation or consistency errors, 2 usage or configuration errors.

Start-up cost: a command imports only what it uses (``tsb --help`` loads neither SQLAlchemy nor
Airflow; a metastore given by ``--url`` or ``$TSB_METASTORE_URL`` is opened without Airflow,
whose import alone takes seconds). ``benchmarks/cli_startup.py`` measures it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from airflow_provider_tsb.consistency import MAX_LEASE_SECONDS
from airflow_provider_tsb.exceptions import TsbError


def _store(args: argparse.Namespace) -> Any:
    """The metastore of ``--url``, else ``$TSB_METASTORE_URL``, else the Airflow connection.

    The first two need no Airflow (the connection lookup imports it: seconds).
    """
    from airflow_provider_tsb.metastore.engine import METASTORE_URL_ENV
    from airflow_provider_tsb.metastore.store import MetaStore

    url = getattr(args, "url", None) or os.environ.get(METASTORE_URL_ENV)
    if url:
        return MetaStore(url)
    from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook

    return TsbMetastoreHook(tsb_conn_id=getattr(args, "conn_id", None) or "tsb_default").get_conn()


def cmd_db_migrate(args: argparse.Namespace) -> int:
    store = _store(args)
    revision = store.migrate()
    print(f"tsb metastore at {store.engine.url.render_as_string(hide_password=True)} is at revision {revision}")
    return 0


def cmd_db_check(args: argparse.Namespace) -> int:
    store = _store(args)
    revision = store.check()
    print(f"tsb metastore at {store.engine.url.render_as_string(hide_password=True)} is up to date ({revision})")
    return 0


def cmd_db_rebuild(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.rebuild import cmd_db_rebuild as rebuild

    return rebuild(args, _store(args))


def cmd_topology_validate(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.dag_loading import load_dag_files
    from airflow_provider_tsb.topology import validate_union

    loaded = load_dag_files(args.paths)
    errors = [f.error for f in loaded if f.error]
    topologies = [t for f in loaded for t in f.topologies]
    # a DAG file that validates its topology at parse time fails with the error the union
    # check finds again: report it once, with the file's name
    errors.extend(str(e) for e in validate_union(topologies) if not any(f": {e}" in f for f in errors))
    if errors:
        print(f"{len(errors)} error(s):", file=sys.stderr)
        for error in errors:
            print(f"  - {error}", file=sys.stderr)
        return 1
    if not topologies:
        print(f"no topology declared in {', '.join(args.paths)}", file=sys.stderr)
        return 1
    merged: dict[str, list[Any]] = {}
    for topo in topologies:
        merged.setdefault(topo.name, []).append(topo)
    for name, parts in sorted(merged.items()):
        tables = {t for p in parts for t in p.tables if p.tables[t].kind != "external"}
        roots = {t for p in parts for t in p.tables if p.tables[t].kind == "root"}
        jobs = {j for p in parts for j in p.jobs}
        files = len(parts)
        print(
            f"ok {name}: {len(roots)} root table(s), {len(tables) - len(roots)} intermediate table(s), "
            f"{len(jobs)} job(s)" + (f" across {files} DAG files" if files > 1 else "")
        )
    return 0


def cmd_topology_show(args: argparse.Namespace) -> int:
    import networkx as nx

    from airflow_provider_tsb.topology import node_label

    graph = None
    if args.dags:
        from airflow_provider_tsb.dag_loading import load_dag_files
        from airflow_provider_tsb.topology import build_graph

        parts = [t for f in load_dag_files(args.dags) for t in f.topologies if t.name == args.name]
        if parts:
            tables = {n: t for p in parts for n, t in p.tables.items()}
            jobs = {j.id: j for p in parts for j in p.jobs.values()}
            graph = build_graph(tables.values(), jobs.values())
    else:
        store = _store(args)
        if args.name in store.topologies():
            graph = store.graph(args.name)
    if graph is None:
        where = ", ".join(args.dags) if args.dags else "the metastore"
        print(f"topology {args.name!r} is not declared in {where}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(nx.node_link_data(graph, edges="edges"), indent=2, sort_keys=True))
        return 0
    print(f"topology {args.name}")
    for node in nx.lexicographical_topological_sort(graph):
        data = graph.nodes[node]
        if data.get("kind") == "job":
            ins = ", ".join(node_label(p) for p in sorted(graph.predecessors(node)))
            outs = ", ".join(node_label(s) for s in sorted(graph.successors(node)))
            print(f"  job {data['name']}: {ins} -> {outs}")
        elif data.get("role") == "root":
            print(f"  root table {data['name']}")
    return 0


def cmd_versions(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.versions import resolve_versions

    result = resolve_versions(
        args.tables, level=args.level, as_of=args.as_of, min_barrier=args.min_barrier,
        lease_seconds=args.lease_seconds, max_staleness_s=args.max_staleness, wait_s=args.wait,
        api_url=args.api_url, store=None if args.api_url else _store(args),
    )
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


#: barrier ids are BIGINT in the metastore
MAX_BARRIER = 2**63 - 1
#: longest wait or staleness bound: ten years, in seconds
MAX_SECONDS = 10 * 365 * 86400.0


def barrier_id_arg(value: str) -> int:
    """An ``argparse`` type: a barrier id, an integer 1..2**63-1."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a barrier id (an integer >= 1)") from None
    if not 1 <= number <= MAX_BARRIER:
        raise argparse.ArgumentTypeError(
            f"no such barrier: {value} is not a barrier id (barrier ids run from 1 to {MAX_BARRIER})"
        )
    return number


def lease_seconds_arg(value: str) -> float:
    """An ``argparse`` type: a lease duration, seconds, finite, > 0 and at most
    :data:`~airflow_provider_tsb.consistency.MAX_LEASE_SECONDS` (366 days, as the Python API)."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= MAX_LEASE_SECONDS:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a lease duration: give seconds > 0 and at most {MAX_LEASE_SECONDS} (366 days)"
        )
    return seconds


def seconds_arg(value: str) -> float:
    """An ``argparse`` type: a duration in seconds, finite and >= 0."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds <= MAX_SECONDS:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration: give seconds >= 0")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    """The ``tsb`` argument parser (every command has ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="tsb",
        description="airflow-provider-tsb: timestamp barriers (FLIP-276) for Spark ETL on Delta Lake",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_store_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", "--metastore-url", dest="url",
                       help="metastore SQLAlchemy URL (default: $TSB_METASTORE_URL, "
                       "the tsb_default connection, or SQLite at $AIRFLOW_HOME/tsb.db)")
        p.add_argument("--conn-id", default="tsb_default", help="Airflow connection id of the metastore")

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

    topo = sub.add_parser("topology", help="validate and show topologies").add_subparsers(
        dest="topology_command", required=True
    )
    p = topo.add_parser("validate", help="validate the union of the topologies declared in DAG files")
    p.add_argument("paths", nargs="+", metavar="PATH", help="DAG files or folders of DAG files")
    p.set_defaults(func=cmd_topology_validate)
    p = topo.add_parser("show", help="print a topology's graph")
    p.add_argument("name", help="topology name")
    p.add_argument("--dags", nargs="+", metavar="PATH", help="read it from DAG files instead of the metastore")
    p.add_argument("--format", choices=("text", "json"), default="text")
    add_store_options(p)
    p.set_defaults(func=cmd_topology_show)

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
                   help="REST API base URL (default $TSB_API_URL); without it the metastore is read directly")
    add_store_options(p)
    p.set_defaults(func=cmd_versions)

    _register_extra_commands(sub)
    return parser


def _register_extra_commands(sub: Any) -> None:
    """Commands contributed by other modules (kept optional so the CLI starts fast)."""
    for module_name in ("airflow_provider_tsb.checker", "airflow_provider_tsb.manual_runs",
                        "airflow_provider_tsb.revision_cli", "airflow_provider_tsb.expiry_cli",
                        "airflow_provider_tsb.freshness_cli", "airflow_provider_tsb.spark_cli"):
        try:
            module = __import__(module_name, fromlist=["register_cli"])
        except ImportError:
            continue
        register = getattr(module, "register_cli", None)
        if register is not None:
            register(sub)


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
