"""The UI tests' topology and Airflow: the flights topology in a SQLite metastore, a failed job.

:func:`populate` writes the flights topology with ``N_BARRIERS`` barriers through the real
:class:`MetaStore` API; the package fixture (``conftest.py``) starts a real Airflow (api-server,
scheduler, dag-processor) reading it, and runs :data:`FAILING_DAG`: the task of job
``carrier_daily_delay`` (its outlet is the job's sink table asset, as in ``TsbTopologyTaskGroup``)
fails with :data:`FAILURE_TEXT`, which the job's record in the metastore also holds, as the job
hook records it (``hooks/spark_job.py``).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from playwright.sync_api import Page

from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology
from dev.browser import DEFAULT_TIMEOUT_MS

REPO_ROOT = Path(__file__).resolve().parents[2]

ROOTS = ["tsb.raw.flights", "tsb.raw.weather"]
JOBS = {
    "enrich_flights": (ROOTS, "tsb.flights.flights_enriched"),
    "carrier_daily_delay": (["tsb.flights.flights_enriched"], "tsb.flights.carrier_daily_delay"),
    "carrier_ranking": (["tsb.flights.carrier_daily_delay"], "tsb.flights.carrier_ranking"),
}
SINKS = [sink for _, sink in JOBS.values()]
N_BARRIERS = 6
FAILED_JOB = "carrier_daily_delay"
#: a real Spark error's shape: long, with a stack trace, a column name nobody can guess
FAILURE_TEXT = (
    "pyspark.errors.exceptions.captured.AnalysisException: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, "
    "variable, or function parameter with name `dep_delayy` cannot be resolved. Did you mean one of the "
    "following? [`dep_delay`, `arr_delay`, `carrier`, `origin`, `time_hour`]. SQLSTATE: 42703;\n"
    "'Aggregate [carrier#12, day#40], [carrier#12, day#40, avg('dep_delayy) AS avg_dep_delay#77]\n"
    "+- Relation tsb.flights.flights_enriched[carrier#12,origin#13,dep_delay#14,arr_delay#15] parquet"
)
FAILING_DAG_ID = "flights_ui_jobs"
FAILING_DAG = f"""
from airflow.sdk import DAG, task

from airflow_provider_tsb.assets import table_asset
from airflow_provider_tsb.topology import Topology

topology = Topology("flights", warehouse="/tmp/tsb-ui-warehouse")
topology.table("tsb.flights.carrier_daily_delay")

with DAG(dag_id="{FAILING_DAG_ID}", schedule=None, catchup=False):

    @task(task_id="{FAILED_JOB}", retries=0,
          outlets=[table_asset(topology, "tsb.flights.carrier_daily_delay")])
    def carrier_daily_delay():
        raise RuntimeError({FAILURE_TEXT!r})

    carrier_daily_delay()
"""


def populate(url: str, warehouse: Path) -> MetaStore:
    """The flights topology with ``N_BARRIERS`` barriers: all WRITTEN but the last (PROCESSED in the
    sink of carrier_ranking, which is still running); per-job timings vary so bottlenecks differ."""
    store = MetaStore(url)
    store.migrate()
    topo = Topology("flights", warehouse=str(warehouse), freshness=timedelta(hours=1))
    topo.root_table("raw.flights")
    topo.root_table("raw.weather")
    topo.table("tsb.flights.carrier_ranking", freshness=1)  # misses it: barrier 6 is not WRITTEN there
    for job_id, (sources, sink) in JOBS.items():
        topo.job(job_id, f"{job_id}.py", sources=sources, sinks=[sink])
    store.registry.register_topology(topo)
    for n in range(1, N_BARRIERS + 1):
        barrier = store.barriers.create("flights", {ROOTS[0]: n, ROOTS[1]: n}, ts_kind="event",
                                                run_key=f"run-{n}")
        t = barrier.created_at_ms
        # per-job processing delays (ms); the bottleneck moves between jobs
        delays = {"enrich_flights": 4000 + 900 * (n % 3), "carrier_daily_delay": 2500 + 1500 * (n % 2),
                  "carrier_ranking": 1500 + 1100 * n}
        for job_id, (_, sink) in JOBS.items():
            t += delays[job_id]
            if n == N_BARRIERS and job_id == "carrier_ranking":
                store.table_states.record_processed(sink, n, job_id, {"mode": "overwrite",
                                                                      "files": [f"part-{n}.parquet"]})
                store.job_runs.record_job_barrier(job_id, n, status="running", started_at_ms=t - delays[job_id])
                continue
            store.table_states.record_written(sink, n, n, job_id, written_at_ms=t)
            store.job_runs.record_job_barrier(job_id, n, status="succeeded", finished_at_ms=t)
    store.job_runs.heartbeat("enrich_flights", status="succeeded", barrier=N_BARRIERS)
    store.job_runs.heartbeat("carrier_daily_delay", status="failed", barrier=N_BARRIERS - 1, message=FAILURE_TEXT)
    store.job_runs.heartbeat("carrier_ranking", status="running", barrier=N_BARRIERS)
    populate_births(store, warehouse)
    return store


#: a new user's topology (issue 56): 2 roots, 3 jobs, 5 sinks, long sink names of one prefix
BIRTHS_JOBS = {
    "join_births": (["raw.births", "raw.states"], ["births.state_daily"]),
    "monthly_windows": (["births.state_daily"],
                        ["births.monthly_totals", "births.monthly_open_windows", "births.monthly_late_rows"]),
    "state_merge": (["births.state_daily"], ["births.state_totals"]),
}


def populate_births(store: MetaStore, warehouse: Path, barriers: int = 3) -> None:
    """The births topology with ``barriers`` barriers WRITTEN everywhere."""
    topo = Topology("us_births", warehouse=str(warehouse))  # sorts after flights: the default page stays flights
    topo.root_table("raw.births")
    topo.root_table("raw.states")
    for job_id, (sources, sinks) in BIRTHS_JOBS.items():
        topo.job(job_id, f"{job_id}.py", sources=sources, sinks=sinks)
    store.registry.register_topology(topo)
    for n in range(1, barriers + 1):
        store.barriers.create("us_births", {"tsb.raw.births": n, "tsb.raw.states": n}, run_key=f"births-{n}")
        for job_id, (_, sinks) in BIRTHS_JOBS.items():
            for sink in sinks:
                store.table_states.record_written(sink, n, n, job_id)
            store.job_runs.record_job_barrier(job_id, n, status="succeeded")
    store.job_runs.heartbeat("state_merge", status="failed", barrier=barriers, message=TRACEBACK_TEXT)


#: a Python traceback as a job records it: the exception line comes last
TRACEBACK_TEXT = (
    "Traceback (most recent call last):\n"
    '  File "/apps/state_merge.py", line 41, in process\n'
    "    merged = merge_states(ctx)\n"
    '  File "/apps/state_merge.py", line 22, in merge_states\n'
    "    raise KeyError(column)\n"
    "KeyError: 'state' (births.state_daily has no column 'state' at barrier 3)"
)


def open_page(page: Page, url: str, ready: str) -> None:
    page.goto(url)
    page.wait_for_selector(ready, timeout=DEFAULT_TIMEOUT_MS)
    page.wait_for_selector("body[data-loaded=true]", timeout=DEFAULT_TIMEOUT_MS)


