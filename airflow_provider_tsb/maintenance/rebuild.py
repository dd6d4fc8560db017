"""``tsb db rebuild``: restore a lost metastore from the DAG files and the Delta logs.

The metastore indexes facts that are durable elsewhere (docs/design.md "Durability"):
registrations come from the topologies declared in the DAG files, barriers from each
topology's barrier log, WRITTEN states and versions from the tables' Delta logs
(:mod:`airflow_provider_tsb.metastore.rebuild`). After a rebuild every consistency level
answers as before for every barrier, and barrier generation continues after the newest one.

Example::

    tsb db rebuild --dags dags/ --url postgresql://tsb@db/tsb

    from airflow_provider_tsb.maintenance.rebuild import rebuild_from_dags
    reports = rebuild_from_dags(MetaStore(url), ["dags/"])

Run it with the topologies stopped (no barrier generation, no job running): it restores into a
metastore that holds no barrier of the topologies (an empty, migrated or not, database);
``force=True`` (``--force``) first drops what the metastore holds for them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from airflow_provider_tsb.delta.barrier_log import barrier_log_location
from airflow_provider_tsb.exceptions import RebuildRefusedError
from airflow_provider_tsb.metastore.rebuild import TopologyRebuild, restore_history, topologies_with_barriers
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology


def rebuild_metastore(
    store: MetaStore, topologies: Sequence[Topology], *, force: bool = False
) -> list[TopologyRebuild]:
    """Migrate ``store``, register ``topologies`` and restore their barrier history from Delta.

    Args:
        store: the metastore to fill (migrated here if needed).
        topologies: the topologies declared in the DAG files (several parts of one topology,
            from several DAG files, are all registered).
        force: replace the barriers, table states and job timings the metastore holds for them.

    Returns:
        One report per topology name, sorted by name.

    Raises:
        RebuildRefusedError: the metastore holds barriers of these topologies and not ``force``.
        TopologyError: a declaration conflicts with the registered ones.
        DeltaLogError: a barrier log cannot be read.
    """
    store.migrate()
    parts: dict[str, list[Topology]] = {}
    for topo in topologies:
        if all(topo is not p for p in parts.get(topo.name, [])):
            parts.setdefault(topo.name, []).append(topo)
    names = sorted(parts)
    busy = topologies_with_barriers(store.core, names)
    if busy and not force:
        held = ", ".join(f"{name!r} (newest barrier {newest})" for name, newest in sorted(busy.items()))
        raise RebuildRefusedError(
            f"the metastore at {store.core.shown_url()} already holds barriers of topology {held}: rebuild restores "
            "into a metastore without them. Point it at an empty database, or pass --force (force=True) to "
            "replace what the metastore holds for these topologies with what the Delta logs hold"
        )
    for name in names:
        for part in parts[name]:
            store.registry.register_topology(part)
    return [
        restore_history(store.core, name, barrier_log_location(parts[name][0].warehouse, name), replace=force)
        for name in names
    ]


def rebuild_from_dags(store: MetaStore, paths: Sequence[str], *, force: bool = False) -> list[TopologyRebuild]:
    """:func:`rebuild_metastore` with the topologies declared in the DAG files under ``paths``.

    Raises:
        TopologyError: a DAG file fails to import or declares no topology (names the files).
        RebuildRefusedError, DeltaLogError: see :func:`rebuild_metastore`.
    """
    from airflow_provider_tsb.dag_loading import load_dag_files
    from airflow_provider_tsb.exceptions import TopologyError

    loaded = load_dag_files(list(paths))
    errors = [f.error for f in loaded if f.error]
    if errors:
        raise TopologyError("cannot read the topologies to rebuild: " + "; ".join(str(e) for e in errors))
    topologies = [t for f in loaded for t in f.topologies]
    if not topologies:
        raise TopologyError(f"no topology is declared in {' '.join(paths)}: give the DAG files or folders "
                            "that declare the topologies to rebuild")
    return rebuild_metastore(store, topologies, force=force)


def cmd_db_rebuild(args: argparse.Namespace, store: Any) -> int:
    """``tsb db rebuild --dags PATH... [--force]``: prints one JSON report per topology."""
    with contextlib.redirect_stdout(sys.stderr):  # Airflow (DAG files) and Alembic log to stdout: it is the JSON answer
        reports = rebuild_from_dags(store, args.dags, force=args.force)
    print(json.dumps([r.to_json() for r in reports], indent=2, sort_keys=True))
    return 0
