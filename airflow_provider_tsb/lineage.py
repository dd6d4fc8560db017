"""Tables, jobs and the lineage graph between them (FLIP-276 "MetaService" registration).

The records every layer shares: :class:`Table` and :class:`Job` as declared in a DAG file's
:class:`~airflow_provider_tsb.topology.Topology` and as registered in the metastore, and the
bipartite ``networkx`` graph tables -> jobs -> tables with its cycle check. Pure: no Airflow,
no database, no I/O; the DAG authoring model (``topology.py``) and the persistence layer
(``metastore/``) both build on it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from airflow_provider_tsb.exceptions import CycleError, DoubleWriterError, TopologyError
from airflow_provider_tsb.names import parse_table_name

if TYPE_CHECKING:  # networkx is slow to import: only the functions that build graphs load it
    import networkx as nx

TableKind = Literal["root", "intermediate", "external"]

def freshness_seconds(value: timedelta | float | None, where: str) -> float | None:
    """A freshness target as seconds (``None`` stays ``None``).

    Raises:
        TopologyError: not a timedelta or number, or not finite and > 0 (names ``where``).
    """
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        raise TopologyError(
            f"{where}: freshness must be a timedelta or a number of seconds, finite and > 0, got {value!r}"
        )
    return float(seconds)


def default_warehouse() -> str:
    """Directory under which tables without an explicit location live.

    ``$TSB_WAREHOUSE`` if set, else ``$AIRFLOW_HOME/tsb-warehouse`` (``~/airflow`` when
    ``AIRFLOW_HOME`` is unset). Nothing is created on disk.
    """
    if os.environ.get("TSB_WAREHOUSE"):
        return os.environ["TSB_WAREHOUSE"]
    home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return os.path.join(home, "tsb-warehouse")


@dataclass(frozen=True)
class Table:
    """A Delta table of a topology.

    Attributes:
        name: canonical ``catalog.database.table``.
        kind: ``root`` (written from outside), ``intermediate`` (the sink of one job of this
            topology) or ``external`` (the sink of a job declared in another DAG file).
        location: Delta table URI or path; ``None`` means ``<warehouse>/catalog/database/table``.
        event_time_column: for root tables, the column whose maximum is the event-time
            watermark of a barrier (FLIP-276 "Timestamp Barrier": event-time timestamps).
        freshness_s: freshness target of an intermediate table in seconds (Snowflake
            ``TARGET_LAG``; see :mod:`airflow_provider_tsb.metastore.freshness`), or ``None``.
    """

    name: str
    kind: TableKind
    location: str | None = None
    event_time_column: str | None = None
    freshness_s: float | None = None

    def resolved_location(self, warehouse: str | None = None) -> str:
        """The table's location, defaulting to ``<warehouse>/<catalog>/<database>/<table>``."""
        if self.location:
            return self.location
        parts = parse_table_name(self.name)
        return os.path.join(warehouse or default_warehouse(), *parts)


@dataclass(frozen=True)
class Job:
    """One ETL job: a Spark application reading ``sources`` and writing ``sinks``.

    Attributes:
        id: job id; also the Delta txn appId prefix of its commits.
        application: path of the Spark application (``spark-submit`` argument).
        sources: canonical names of the tables it reads.
        sinks: canonical names of the tables it writes (it is their only writer).
        application_args: extra arguments passed to the application.
        conf: extra Spark configuration for this job.
    """

    id: str
    application: str
    sources: tuple[str, ...]
    sinks: tuple[str, ...]
    application_args: tuple[str, ...] = ()
    conf: Mapping[str, str] = field(default_factory=dict)


def _table_node(name: str) -> str:
    return f"table:{name}"


def _job_node(job_id: str) -> str:
    return f"job:{job_id}"


def node_label(node: str) -> str:
    """Human label of a graph node: ``t1`` for a table, ``job a`` for a job."""
    kind, _, name = node.partition(":")
    return name if kind == "table" else f"job {name}"


def build_graph(tables: Iterable[Table], jobs: Iterable[Job]) -> nx.DiGraph:
    """Build the bipartite DiGraph of tables and jobs (see :attr:`Topology.graph`)."""
    import networkx as nx

    graph = nx.DiGraph()
    for table in tables:
        graph.add_node(_table_node(table.name), kind="table", role=table.kind, name=table.name)
    for job in jobs:
        graph.add_node(_job_node(job.id), kind="job", name=job.id, application=job.application)
        for source in job.sources:
            if not graph.has_node(_table_node(source)):
                graph.add_node(_table_node(source), kind="table", role="unknown", name=source)
            graph.add_edge(_table_node(source), _job_node(job.id))
        for sink in job.sinks:
            if not graph.has_node(_table_node(sink)):
                graph.add_node(_table_node(sink), kind="table", role="intermediate", name=sink)
            graph.add_edge(_job_node(job.id), _table_node(sink))
    return graph


def cycle_error(graph: nx.DiGraph) -> CycleError | None:
    """A :class:`CycleError` describing one cycle of ``graph``, or ``None`` if acyclic."""
    import networkx as nx

    try:
        edges = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return None
    return _cycle_error([edges[0][0], *(v for _, v in edges)])


def _cycle_error(path: list[str]) -> CycleError:
    """The :class:`CycleError` of the cycle ``path`` (nodes along the edges, first == last)."""
    # start the printed cycle at a table so it reads "t1 -> job a -> t2 -> job b -> t1"
    tables = [i for i, n in enumerate(path[:-1]) if n.startswith("table:")]
    if tables:
        start = min(tables, key=lambda i: path[i])
        path = path[start:-1] + path[:start] + [path[start]]
    labels = [node_label(n) for n in path]
    return CycleError(
        f"the topology has a cycle: {' -> '.join(labels)}; a table cannot depend on itself, "
        "remove one of these edges",
        labels,
    )


# The DAG-parse-time checks (Topology.validate, jobs_in_order) use the standard library's
# graphlib, not networkx: importing networkx costs seconds on a loaded dag-processor, in every
# parse of every DAG file (docs/airflow.md, "DAG parsing under load").
def predecessors(tables: Iterable[Table], jobs: Iterable[Job]) -> dict[str, set[str]]:
    """``{node: its predecessor nodes}`` of the table/job graph (node names as :func:`build_graph`)."""
    preds: dict[str, set[str]] = {_table_node(t.name): set() for t in tables}
    for job in jobs:
        preds.setdefault(_job_node(job.id), set()).update(_table_node(s) for s in job.sources)
        for source in job.sources:
            preds.setdefault(_table_node(source), set())
        for sink in job.sinks:
            preds.setdefault(_table_node(sink), set()).add(_job_node(job.id))
    return preds


def find_cycle_error(preds: Mapping[str, set[str]]) -> CycleError | None:
    """A :class:`CycleError` describing one cycle of the graph ``preds``, or ``None`` if acyclic."""
    from graphlib import CycleError as GraphCycle
    from graphlib import TopologicalSorter

    try:
        TopologicalSorter(preds).prepare()
    except GraphCycle as exc:
        return _cycle_error(list(exc.args[1]))
    return None


def lexicographic_order(preds: Mapping[str, set[str]]) -> list[str]:
    """The nodes of the acyclic graph ``preds`` in topological order, the smallest ready node
    first (networkx's ``lexicographical_topological_sort``).

    Raises:
        graphlib.CycleError: the graph has a cycle.
    """
    import heapq
    from graphlib import TopologicalSorter

    sorter = TopologicalSorter(preds)
    sorter.prepare()
    ready = list(sorter.get_ready())
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        node = heapq.heappop(ready)
        order.append(node)
        sorter.done(node)
        for nxt in sorter.get_ready():
            heapq.heappush(ready, nxt)
    return order


def double_writer_error(table: str, writers: tuple[str, str]) -> DoubleWriterError:
    """The error for a table that two jobs want to write (names the table and both jobs)."""
    first, second = sorted(writers)
    return DoubleWriterError(
        f"table {table!r} has two writer jobs, {first!r} and {second!r}; every non-root table has exactly "
        "one writer job",
        table,
        (first, second),
    )

__all__ = [
    "Job", "Table", "TableKind", "build_graph", "cycle_error", "default_warehouse", "double_writer_error",
    "find_cycle_error", "lexicographic_order", "node_label", "predecessors",
]
