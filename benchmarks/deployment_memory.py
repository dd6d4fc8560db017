"""The memory of a whole tsb deployment while a topology streams: every process, sized by PSS.

A new user's deployment (issue 56) is PostgreSQL for Airflow and the metastore, Airflow's four
components with the LocalExecutor's workers, the Spark Connect server, and one client process per
streaming job. This starts exactly that on this machine:

* PostgreSQL (``dev.pg``), with a database for Airflow and one for the tsb metastore;
* a Spark Connect server (``tsb spark start``'s :class:`ConnectServer`, Delta's jars);
* Airflow (api-server, scheduler, dag-processor, triggerer) serving the repository's ``dags/``
  with ``AIRFLOW__CORE__PARALLELISM=--parallelism`` (the executor's worker pool);

then triggers ``flights_streaming`` (3 streaming jobs, the emitter and the ingest task), or with
``--topology chain`` a DAG of its own streaming a chain of ``--jobs`` jobs
(``benchmarks/apps/scale_stage.py``: root -> t1 -> ... -> tN, 1,000 rows a round) and,
once ``--barriers`` barriers are COMMIT, samples every process of the deployment
``--samples`` times, ``--every`` seconds apart: its PSS (``/proc/<pid>/smaps_rollup``, shared
pages divided among the processes that map them, so the sum is the deployment's real share of
memory) and RSS. A process belongs to a part by its process tree: PostgreSQL (the postmaster and
its children), each Airflow component's process tree (the scheduler's holds the executor
workers and the tasks they supervise, whose job clients are counted apart by their command
line), the Connect server's tree. The figures are the sample with the largest PSS.

Last line ``jobs= pss_gb= rss_gb= processes= parallelism= load=``; the lines above give each
part's PSS, RSS and process count::

    .venv/bin/python -m benchmarks.deployment_memory [--parallelism 8] [--days 6] [--barriers 3]
        [--topology flights|chain --jobs 12]
        [--server-java-options "-XX:+UseSerialGC ..."] [--no-class-data] [--per-process]
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from airflow_provider_tsb.spark.connect_server import ConnectServer, ConnectServerOptions
from benchmarks.harness import REPO, parser, report
from dev.airflow_harness import start_airflow
from dev.e2e import examples_deployment
from dev.local_airflow import free_port
from dev.pg import start_postgres

DAG_ID = "flights_streaming"
SINKS = ["tsb.flights.flights_enriched", "tsb.flights.carrier_daily_delay", "tsb.flights.carrier_ranking"]
#: folders of the jobs' applications: a process running one is a job client
JOB_APPS = ("spark_apps/", "benchmarks/apps/")
CHAIN_DAG_ID = "scale_streaming"
#: ``--topology chain``: a streaming chain of ``JOBS`` stages, fed by an ingest task
CHAIN_DAG = """
import datetime as dt
import os
import time

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task

from airflow_provider_tsb.task_group import TsbTopologyTaskGroup
from airflow_provider_tsb.topology import Topology

JOBS, APP = {jobs}, {app!r}
topology = Topology("scale", warehouse=os.environ["TSB_WAREHOUSE"])
topology.root_table("scale.root")
SOURCE = {{k: "scale.root" if k == 1 else f"scale.t{{k - 1}}" for k in range(1, JOBS + 1)}}
for k in range(1, JOBS + 1):
    topology.job(f"stage_{{k}}", APP, sources=[SOURCE[k]], sinks=[f"scale.t{{k}}"])

with DAG(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):

    @task
    def ingest(**context) -> None:
        from airflow_provider_tsb.root_tables import append_to_root

        conf = context["dag_run"].conf or {{}}
        rounds, pace_s, rows = int(conf.get("rounds", 10)), float(conf.get("pace_s", 4.0)), 1000
        ts = dt.datetime(2013, 1, 1, tzinfo=dt.UTC)
        for i in range(rounds):
            ids = list(range(i * rows, (i + 1) * rows))
            table = pa.table({{"id": pa.array(ids, pa.int64()), "v": pa.array([x * 0.5 for x in ids], pa.float64()),
                               "hop": pa.array([0] * rows, pa.int32()),
                               "ts": pa.array([ts] * rows, pa.timestamp("us", tz="UTC"))}})
            append_to_root(topology.location("scale.root"), table, run_key=f"{{context['run_id']}}/{{i}}",
                           end_of_input=i == rounds - 1)
            time.sleep(pace_s)

    ingest() >> TsbTopologyTaskGroup(
        topology, mode="streaming", spark_conn_id="spark_local",
        emitter_kwargs={{"interval_s": 1.5, "duration_s": 3600}},
        job_kwargs={{f"stage_{{k}}": {{"env_vars": {{"TSB_SCALE_SOURCES": SOURCE[k],
                                                "TSB_SCALE_SINK": f"scale.t{{k}}"}}}} for k in range(1, JOBS + 1)}},
        default_job_kwargs={{"retries": 2, "retry_delay": dt.timedelta(seconds=1)}},
    )
"""


def memory_kb(pid: int) -> tuple[int, int] | None:
    """``(pss, rss)`` of ``pid`` in KiB, or ``None`` when it is gone or unreadable."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    fields = {line.split(":")[0]: int(line.split()[1]) for line in text.splitlines()[1:] if line.split()[1].isdigit()}
    return fields.get("Pss", 0), fields.get("Rss", 0)


def processes() -> dict[int, tuple[int, int, str]]:
    """``{pid: (ppid, pgid, command line)}`` of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        rest = stat.rsplit(")", 1)[1].split()
        out[int(entry.name)] = (int(rest[1]), int(rest[2]), cmd)
    return out


def descendants(root: int, table: dict[int, tuple[int, int, str]]) -> set[int]:
    """``root`` and every process below it."""
    found, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _, _) in table.items() if ppid == parent and pid not in found]
        found.update(children)
        frontier.extend(children)
    return found


def parts(groups: dict[str, int], postmaster: int, server: int) -> dict[str, set[int]]:
    """``{part: pids}`` of the deployment now: each root's process tree (see the module doc)."""
    table = processes()
    out: dict[str, set[int]] = defaultdict(set)
    out["postgresql"] = descendants(postmaster, table) if postmaster in table else set()
    out["spark connect server"] = descendants(server, table) if server in table else set()
    for name, leader in groups.items():
        if leader not in table:
            continue
        for pid in descendants(leader, table):
            cmd = table[pid][2]
            if any(folder in cmd for folder in JOB_APPS) and "python" in cmd:
                out["job clients"].add(pid)
            elif pid == leader:
                out[f"airflow {name}"].add(pid)
            else:
                out[f"airflow {name}: workers and tasks"].add(pid)
    return out


def sample(
    found: dict[str, set[int]], each: list[tuple[int, str, str]] | None = None
) -> dict[str, tuple[int, int, int]]:
    """``{part: (pss KiB, rss KiB, processes)}``; with ``each``, also appends ``(pss KiB, part,
    command line)`` of every process to it."""
    out = {}
    table = processes() if each is not None else {}
    for part, pids in found.items():
        sizes = {pid: m for pid, m in ((pid, memory_kb(pid)) for pid in pids) if m is not None}
        out[part] = (sum(p for p, _ in sizes.values()), sum(r for _, r in sizes.values()), len(sizes))
        if each is not None:
            each.extend((p, part, table.get(pid, (0, 0, "?"))[2]) for pid, (p, _) in sizes.items())
    return out


def committed(store: object, barrier: int, sinks: list[str]) -> bool:
    """Whether ``barrier`` is WRITTEN in every sink (``False`` before the topology registers)."""
    from airflow_provider_tsb.exceptions import UnknownTableError

    try:
        states = [store.table_states.get(t, barrier) for t in sinks]  # type: ignore[attr-defined]
    except UnknownTableError:
        return False
    return all(s is not None and s.state == "WRITTEN" for s in states)


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--parallelism", type=int, default=8, help="AIRFLOW__CORE__PARALLELISM (executor slots)")
    options.add_argument("--days", type=int, default=6, help="days of flights the run streams")
    options.add_argument("--barriers", type=int, default=3, help="COMMIT barriers before sampling")
    options.add_argument("--samples", type=int, default=3)
    options.add_argument("--every", type=float, default=5.0)
    options.add_argument("--topology", choices=("flights", "chain"), default="flights",
                         help="flights_streaming, or a chain of --jobs streaming jobs")
    options.add_argument("--jobs", type=int, default=12, help="jobs of --topology chain")
    options.add_argument("--server-java-options", default=None,
                         help="the Connect server's Java options (tsb spark start --driver-java-options)")
    options.add_argument("--no-class-data", action="store_true",
                         help="start the Connect server without the class-data archive")
    options.add_argument("--per-process", action="store_true", help="also print every process's PSS and command")
    args = options.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tsb-deployment-memory-"))
    pg = start_postgres()
    server = ConnectServer(root / "spark", ConnectServerOptions(
        port=free_port(), master="local[2]", driver_java_options=args.server_java_options,
        class_data=not args.no_class_data))
    af = None
    try:
        airflow_db = pg.create_database("airflow")
        remote = server.start().url
        store, env = examples_deployment(root, remote)
        env["TSB_METASTORE_URL"] = pg.create_database("tsb")
        from airflow_provider_tsb.metastore.store import MetaStore

        store = MetaStore(env["TSB_METASTORE_URL"])
        store.migrate()
        env["AIRFLOW__CORE__PARALLELISM"] = str(args.parallelism)
        dags = shutil.copytree(REPO / "dags", root / "dags")
        if args.topology == "chain":
            dag_id, sinks = CHAIN_DAG_ID, [f"tsb.scale.t{k}" for k in range(1, args.jobs + 1)]
            (dags / "scale_streaming.py").write_text(CHAIN_DAG.format(
                jobs=args.jobs, app=str(REPO / "benchmarks" / "apps" / "scale_stage.py"), dag_id=dag_id))
            conf = {"rounds": args.days, "pace_s": 4.0}
        else:
            dag_id, sinks, conf = DAG_ID, SINKS, {"days": args.days, "pace_s": 4.0, "interval_s": 1.5}
        af = start_airflow(dags, home=root / "airflow", env_extra=env, sql_alchemy_conn=airflow_db)
        af.wait_for_dag(dag_id, timeout=300)
        run = af.trigger_dag(dag_id, conf=conf)
        deadline = time.monotonic() + 900
        while not committed(store, args.barriers, sinks):
            if time.monotonic() > deadline:
                raise SystemExit(f"no COMMIT barrier {args.barriers} after 900 s:\n"
                                 f"{af.describe_run(dag_id, run['dag_run_id'])}")
            time.sleep(2)
        postmaster = int(Path(pg.data_dir, "postmaster.pid").read_text().split()[0])
        server_pid = int(server.status().pid or 0)
        groups = {name: group.pgid for name, group in af.groups.items()}
        expected = args.jobs if args.topology == "chain" else len(SINKS)
        deadline = time.monotonic() + 300  # every job's client up (a slow start, a retry)
        while len(parts(groups, postmaster, server_pid)["job clients"]) < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"fewer than {expected} job clients after 300 s:\n"
                                 f"{af.describe_run(dag_id, run['dag_run_id'])}")
            time.sleep(1)
        best: dict[str, tuple[int, int, int]] = {}
        best_each: list[tuple[int, str, str]] = []
        for _ in range(args.samples):
            each: list[tuple[int, str, str]] = []
            now = sample(parts(groups, postmaster, server_pid), each)
            if sum(p for p, _, _ in now.values()) > sum(p for p, _, _ in best.values()):
                best, best_each = now, each
            time.sleep(args.every)
    finally:
        if af is not None:
            af.stop()
        server.stop()
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.per_process:
        for pss, part, cmd in sorted(best_each, reverse=True):
            print(f"  {pss / 1024:7.1f} MB  {part:32s} {cmd[:150]}")
    for part, (pss, rss, n) in sorted(best.items(), key=lambda kv: -kv[1][0]):
        print(f"{part:32s} pss {pss / 2**20:6.2f} GB  rss {rss / 2**20:6.2f} GB  processes {n}")
    pss, rss, n = (sum(v[i] for v in best.values()) for i in range(3))
    jobs = best.get("job clients", (0, 0, 0))[2]
    report("deployment_memory", jobs=jobs, pss_gb=round(pss / 2**20, 2), rss_gb=round(rss / 2**20, 2), processes=n,
           parallelism=args.parallelism)


if __name__ == "__main__":
    main()
