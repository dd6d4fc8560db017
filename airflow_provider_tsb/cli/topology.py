"""``tsb topology validate | show``: topologies declared in DAG files or registered.

    tsb topology validate PATH...        validate the union of the topologies in DAG files
    tsb topology show NAME [--dags PATH] print a topology's graph
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from airflow_provider_tsb.cli.common import add_store_options, store_of
from airflow_provider_tsb.exceptions import TopologyError, UnknownTopologyError


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
        raise TopologyError(f"no topology declared in {', '.join(args.paths)}")
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
        store = store_of(args)
        if args.name in store.registry.topologies():
            graph = store.registry.graph(args.name)
    if graph is None:
        where = ", ".join(args.dags) if args.dags else "the metastore"
        raise UnknownTopologyError(f"topology {args.name!r} is not declared in {where}")
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


def register(sub: Any) -> None:
    """Add ``tsb topology`` to the ``tsb`` parser."""
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
