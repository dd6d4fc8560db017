"""Run a topology's steps by hand, outside a DAG run: the ``tsb root``, ``tsb barrier`` and
``tsb job`` commands.

While developing a job you append to a root table, generate a barrier and run one job for that
barrier, with the same registration, checks and engine as the operators
(:class:`~airflow_provider_tsb.hooks.barrier.TsbBarrierHook`,
:class:`~airflow_provider_tsb.hooks.spark_job.TsbSparkJobHook`), reading the topology from the
DAG files that declare it::

    tsb root append raw.penguins penguins-day1.csv --dags dags/ --run-key day1
    tsb barrier create penguins --dags dags/
    tsb job run clean_penguins --barrier 1 --dags dags/

The metastore is ``--url``, else ``$TSB_METASTORE_URL``, else the ``tsb_default`` connection;
the job runs on the engine of the Airflow connection ``--spark-conn-id`` (default
``spark_default``): a Spark Connect client of a running server
(``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": 15002}'``,
a local server from ``tsb spark start``) or ``spark-submit``
(``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from typing import Any

from airflow_provider_tsb.exceptions import TopologyError
from airflow_provider_tsb.topology import Topology


def find_topology(paths: list[str], *, name: str | None = None, job: str | None = None,
                  table: str | None = None) -> Topology:
    """The topology declared in the DAG files under ``paths`` that has this name, job or table.

    Raises:
        TopologyError: a DAG file fails to import, or no (or more than one) topology matches;
            the message lists what the files declare.
        FileNotFoundError: a path does not exist.
    """
    from airflow_provider_tsb.dag_loading import load_dag_files
    from airflow_provider_tsb.names import normalize_table_name

    loaded = load_dag_files(paths)
    errors = [f.error for f in loaded if f.error]
    if errors:
        raise TopologyError("cannot read the topology: " + "; ".join(str(e) for e in errors))
    found: dict[str, Topology] = {}
    for topo in (t for f in loaded for t in f.topologies):
        found.setdefault(topo.name, topo)
    if name is not None:
        matches = [t for n, t in found.items() if n == name]
        what = f"topology {name!r}"
    elif job is not None:
        matches = [t for t in found.values() if job in t.jobs]
        what = f"job {job!r}"
    else:
        canonical = normalize_table_name(str(table))
        matches = [t for t in found.values() if canonical in t.tables]
        what = f"table {canonical!r}"
    if len(matches) != 1:
        declared = "; ".join(
            f"{t.name}: jobs {sorted(t.jobs)}, tables {sorted(t.tables)}" for t in found.values()
        ) or "none"
        problem = "is declared by no topology" if not matches else "is declared by several topologies"
        raise TopologyError(f"{what} {problem} in {' '.join(paths)} (declared: {declared})")
    return matches[0]


def _use_metastore(args: argparse.Namespace) -> None:
    from airflow_provider_tsb.metastore.engine import METASTORE_URL_ENV  # SQLAlchemy: not for ``tsb --help``

    if getattr(args, "url", None):
        os.environ[METASTORE_URL_ENV] = args.url


def cmd_root_append(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.root_tables import append_to_root

    topology = find_topology(args.dags, table=args.table)
    if topology.tables[_canonical(args.table)].kind != "root":
        raise TopologyError(
            f"table {_canonical(args.table)!r} is not a root table of topology {topology.name!r}: it is written "
            f"by job {topology.writer_of(args.table)!r}; append only to root tables "
            f"({', '.join(t.name for t in topology.root_tables)})"
        )
    result = append_to_root(topology.location(args.table), args.file, run_key=args.run_key,
                            end_of_input=args.end_of_input, file_format=args.format)
    print(json.dumps({"table": _canonical(args.table), "location": result.location, "version": result.version,
                      "rows": result.rows, "appended": result.appended, "run_key": result.run_key}))
    return 0


def _topology_ts_kind(store: Any, topology: str) -> str:
    """The barrier time kind of ``topology``: its newest barrier's, ``system`` before the first."""
    last = store.barriers.latest(topology)
    return str(last.ts_kind) if last is not None else "system"


def cmd_barrier_create(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.hooks.barrier import TsbBarrierHook

    _use_metastore(args)
    topology = find_topology(args.dags, name=args.topology)
    with contextlib.redirect_stdout(sys.stderr):  # Airflow logs to stdout; stdout is the JSON answer
        hook = TsbBarrierHook(topology, tsb_conn_id=args.conn_id)
        hook.ts_kind = args.ts_kind or _topology_ts_kind(hook.get_conn(), topology.name)
        info = hook.generate(args.run_key)
    print(json.dumps({"topology": info.topology, "barrier": info.barrier, "ts_ms": info.ts_ms,
                      "ts_kind": str(info.ts_kind), "root_versions": info.root_versions,
                      "created": info.created}, sort_keys=True))
    return 0


def cmd_job_run(args: argparse.Namespace) -> int:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_provider_tsb.hooks.spark_engine import ConnectClient, SparkEngine, connect_markers_hidden
    from airflow_provider_tsb.hooks.spark_job import Submit, TsbSparkJobHook
    from airflow_provider_tsb.hooks.submit_conf import configure_submit

    _use_metastore(args)
    topology = find_topology(args.dags, job=args.job)
    hook = TsbSparkJobHook(topology, args.job, tsb_conn_id=args.conn_id)
    job = hook.job
    engine = SparkEngine.from_connection(args.spark_conn_id)

    def submit(application_args: list[str], env: dict[str, str]) -> None:
        hook = SparkSubmitHook(
            conn_id=args.spark_conn_id, conf=dict(job.conf), name=f"tsb-{topology.name}-{job.id}",
            application_args=application_args, env_vars=env,
        )
        with connect_markers_hidden():
            configure_submit(hook, args.spark_conn_id, write_class_data=True).submit(job.application)

    runner: Submit = submit
    if engine.kind == "connect":
        runner = ConnectClient(job.application, engine, conf=job.conf, job_id=job.id, logger=_stderr_logger())
    with contextlib.redirect_stdout(sys.stderr):  # Airflow and spark-submit log to stdout
        run = hook.run(args.barrier, runner)
    print(json.dumps(run.to_xcom(), sort_keys=True))
    return 0


def _stderr_logger() -> logging.Logger:
    """The job's output for people: on stderr, so that stdout holds only the command's JSON."""
    logger = logging.getLogger("airflow_provider_tsb.job_run")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def _canonical(table: str) -> str:
    from airflow_provider_tsb.names import normalize_table_name

    return normalize_table_name(table)


def register(sub: Any) -> None:
    """Add ``tsb root append``, ``tsb barrier create`` and ``tsb job run`` to the ``tsb`` parser."""
    from airflow_provider_tsb.cli.common import barrier_id_arg, metastore_url_arg

    def dags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dags", nargs="+", metavar="PATH", required=True,
                       help="DAG files or folders declaring the topology")

    def store(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", "--metastore-url", dest="url", type=metastore_url_arg,
                       help="metastore SQLAlchemy URL (default: $TSB_METASTORE_URL or the connection)")
        p.add_argument("--conn-id", default="tsb_default", help="Airflow connection id of the metastore")

    root = sub.add_parser("root", help="write root tables").add_subparsers(dest="root_command", required=True)
    p = root.add_parser("append", help="append a Parquet or CSV file to a root table (one Delta commit)")
    p.add_argument("table", help="root table name (catalog.database.table)")
    p.add_argument("file", help="Parquet or CSV file")
    dags(p)
    p.add_argument("--run-key", help="idempotency key: a second append with the same key writes nothing")
    p.add_argument("--end-of-input", action="store_true", help="mark the end of a bounded input (FLIP-147)")
    p.add_argument("--format", choices=("parquet", "csv"), help="file format when the suffix does not say")
    p.set_defaults(func=cmd_root_append)

    barrier = sub.add_parser("barrier", help="generate barriers by hand").add_subparsers(
        dest="barrier_command", required=True
    )
    p = barrier.add_parser("create", help="register a topology and generate its next barrier (JSON)")
    p.add_argument("topology", help="topology name")
    dags(p)
    p.add_argument("--run-key", help="idempotency key: the same key gives the same barrier back")
    p.add_argument("--ts-kind", choices=("system", "event"),
                   help="barrier timestamp: system time or the root tables' event-time watermark (default: the "
                   "kind of the topology's barriers so far, system for its first; the other kind is refused)")
    store(p)
    p.set_defaults(func=cmd_barrier_create)

    job = sub.add_parser("job", help="run jobs by hand").add_subparsers(dest="job_command", required=True)
    p = job.add_parser("run", help="run one job for one barrier on the Spark connection's engine (Spark Connect "
                       "or spark-submit), as the operator does (JSON)")
    p.add_argument("job", help="job id")
    p.add_argument("--barrier", type=barrier_id_arg, required=True, help="the barrier to process")
    dags(p)
    p.add_argument("--spark-conn-id", default="spark_default",
                   help="Airflow Spark connection: type spark_connect runs the job as a Spark Connect client, type "
                        "spark with spark-submit")
    store(p)
    p.set_defaults(func=cmd_job_run)
