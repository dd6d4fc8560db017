"""The command line of every app script: ``run_app(app)`` parses ``sys.argv`` and runs the app.

``--mode batch`` runs :func:`airflow_provider_tsb.spark.runner.run_batch`; ``--mode streaming``
runs :func:`airflow_provider_tsb.spark.streaming.run_streaming`. Under ``spark-submit`` the app
is its own Spark driver; with ``--remote sc://HOST:PORT`` (or ``$SPARK_REMOTE``) started as a
plain Python process it is a Spark Connect client (:mod:`airflow_provider_tsb.spark.session`).
The barriers come from a plan file (``--plan``) or the metastore (``--metastore-url``, e.g.
``env:TSB_METASTORE_URL`` as :class:`~airflow_provider_tsb.hooks.spark_job.TsbSparkJobHook` passes it).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence

from pyspark.sql import SparkSession

from airflow_provider_tsb.metastore.records import JobStatus
from airflow_provider_tsb.spark.app_run import AppRun, StreamOptions
from airflow_provider_tsb.spark.catalog import BarrierCatalog, PlanFileCatalog, open_catalog
from airflow_provider_tsb.spark.model import TsbApp
from airflow_provider_tsb.spark.plans import DEFAULT_MAX_BARRIERS_PER_TRIGGER
from airflow_provider_tsb.spark.runner import run_batch
from airflow_provider_tsb.spark.streaming import run_streaming

log = logging.getLogger("airflow_provider_tsb.spark")


def build_arg_parser(app: TsbApp) -> argparse.ArgumentParser:
    """The CLI of every app script (see :func:`run_app`)."""
    p = argparse.ArgumentParser(prog=app.job_id, description=app.description or f"tsb job {app.job_id}")
    p.add_argument("--mode", choices=("batch", "streaming"), default="batch")
    p.add_argument("--plan", help="plan file (PlanFileCatalog)")
    p.add_argument("--report", help="report file the states are recorded into")
    p.add_argument("--metastore-url", help="metastore catalog (needs the 'metastore' catalog kind)")
    p.add_argument("--until-barrier", type=int, help="process barriers up to this one, then stop")
    p.add_argument("--max-barriers", type=int, help="stop after this many barriers")
    p.add_argument("--idle-timeout", type=float, default=None, help="streaming: stop after S seconds idle")
    p.add_argument(
        "--trigger-interval", type=float, default=1.0,
        help="streaming: longest wait (seconds) for a barrier in one offset poll (long poll)",
    )
    p.add_argument(
        "--poll-interval", type=float, default=0.05,
        help="streaming: seconds between catalog look-ups while waiting for a barrier",
    )
    p.add_argument(
        "--max-barriers-per-trigger", type=_positive_int, default=DEFAULT_MAX_BARRIERS_PER_TRIGGER, metavar="N",
        help="streaming: ready barriers one micro-batch takes at most (a Spark job per append sink "
        "for all of them, a Delta commit per barrier)",
    )
    p.add_argument("--checkpoint", help="streaming checkpoint dir (default: <first sink>/_tsb_checkpoints/<job>)")
    p.add_argument(
        "--final-since", type=int, default=None, metavar="EPOCH_MS",
        help="streaming: stop after a final barrier (end of input) generated at or after this time",
    )
    p.add_argument("--table", action="append", default=[], metavar="NAME=LOCATION", help="table location")
    p.add_argument("--warehouse", help="default location root: <warehouse>/<catalog>/<database>/<table> (as Topology)")
    p.add_argument("--master", help="Spark master when not launched by spark-submit")
    p.add_argument(
        "--remote", default=None, metavar="sc://HOST:PORT",
        help="run as a Spark Connect client of this server (default: $SPARK_REMOTE; neither: a Spark driver)",
    )
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE",
        help="Spark Connect: a Spark setting of this job's session (spark-submit takes its own --conf)",
    )
    return p


def _positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return value


def _catalog_from_args(args: argparse.Namespace) -> BarrierCatalog:
    if args.metastore_url:
        import airflow_provider_tsb.spark.metastore_catalog  # noqa: F401  (registers the "metastore" kind)

        return open_catalog({"kind": "metastore", "url": args.metastore_url, "report": args.report or ""})
    if not args.plan:
        raise SystemExit("one of --plan or --metastore-url is required")
    return PlanFileCatalog(args.plan, args.report)


def run_app(app: TsbApp, argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    """Command-line entry of an app script: parse ``argv`` and run batch or streaming mode.

    Returns the process exit code (0 on success). Options: see :func:`build_arg_parser`.
    With ``--metastore-url``, the app is checked against the job registered by its topology
    before Spark starts, and the job's status is set when the app ends (``succeeded`` /
    ``failed`` with the error).

    Raises:
        UnknownJobError, UnknownTableError: the app's job id, a source or a sink is not the
            registered topology's (see :func:`~airflow_provider_tsb.spark.app_check.check_app_registration`).
        ValueError: a table has no location.
        TableLocationConflictError: a table's location is not its registered one
            (:func:`~airflow_provider_tsb.spark.app_check.check_app_locations`).
    """
    args = build_arg_parser(app).parse_args(argv)
    logging.basicConfig(level=os.environ.get("TSB_LOG_LEVEL", "INFO"), format="%(asctime)s %(name)s %(message)s")
    catalog = _catalog_from_args(args)
    store = getattr(catalog, "store", None)  # the metastore catalog's: the registered topology is known
    if store is not None:  # an app that disagrees with its topology fails here, before Spark starts
        from airflow_provider_tsb.spark.app_check import check_app_registration

        check_app_registration(app, store)
    overrides = dict(t.split("=", 1) for t in args.table)
    plan_tables = catalog.tables() if isinstance(catalog, PlanFileCatalog) else None
    locations = app.resolve_locations(plan_tables, overrides, args.warehouse)
    if store is not None:  # the run's tables are the registered ones, or it fails before Spark starts
        from airflow_provider_tsb.spark.app_check import check_app_locations

        check_app_locations(app, store, locations)
    try:
        _run(app, args, catalog, locations, spark)
    except BaseException as exc:
        _record_end(catalog, app.job_id, JobStatus.FAILED, f"{type(exc).__name__}: {exc}")
        raise
    _record_end(catalog, app.job_id, JobStatus.SUCCEEDED)
    return 0


def _parse_conf(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` options -> ``{key: value}``.

    Raises:
        SystemExit: an option without ``=`` (argparse's usage error exit code, 2).
    """
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--conf takes KEY=VALUE (a Spark setting), got {pair!r}")
        conf[key.strip()] = value
    return conf


def _record_end(catalog: BarrierCatalog, job_id: str, status: str, message: str | None = None) -> None:
    """The job's status when the app ends (a job run outside Airflow would stay ``running``)."""
    end = getattr(catalog, "record_job_end", None)
    if end is None:
        return
    try:
        end(job_id, status, message)
    except Exception as exc:  # the app's own outcome matters more than its status line
        log.warning("job %s: could not record its end (%s): %s", job_id, status, exc)


def _run(
    app: TsbApp, args: argparse.Namespace, catalog: BarrierCatalog, locations: dict[str, str],
    spark: SparkSession | None,
) -> None:
    from airflow_provider_tsb.exceptions import SparkConnectUnavailableError
    from airflow_provider_tsb.spark.server_watch import ServerWatch, ServerWatchOptions
    from airflow_provider_tsb.spark.session import get_spark, is_connect, remote_url

    own = spark is None
    watching = ServerWatchOptions.from_env()  # a bad $TSB_SPARK_WATCH_SECONDS fails before Spark starts
    spark = spark or get_spark(app.job_id, master=args.master, remote=args.remote, conf=_parse_conf(args.conf))
    watch = None
    try:
        if own and is_connect(spark):
            url = str(remote_url(args.remote))
            if watching is not None:  # a dead server ends the job in seconds, not after pyspark's retries
                watch = ServerWatch(url, app.job_id, watching).start()
            _take_over_connect_attempt(app, catalog, spark, url)
        try:
            _run_mode(AppRun(spark, app, catalog, locations), args)
        except Exception as exc:
            fenced = _fenced(catalog, app.job_id)
            if fenced is not None:
                raise fenced from exc
            lost = watch.diagnose() if watch is not None else None  # the server, not the job, failed
            if lost is not None:
                raise SparkConnectUnavailableError(lost) from exc
            raise
    finally:
        if watch is not None:
            watch.stop()
        if own and is_connect(spark):
            spark.stop()  # releases the job's session on the Connect server


def _fenced(catalog: BarrierCatalog, job_id: str) -> Exception | None:
    """The :class:`~airflow_provider_tsb.exceptions.FencedError` naming the attempt that won, when
    a newer attempt of the job started: it explains whatever this one died of (on Spark Connect
    the winner closed this attempt's session, ``[INVALID_HANDLE.SESSION_CLOSED]``); else ``None``."""
    from airflow_provider_tsb.exceptions import FencedError

    check = getattr(catalog, "check_fencing_token", None)
    if check is None:
        return None
    try:
        check(job_id)
    except FencedError as fenced:
        return fenced
    except Exception:  # the metastore is unreachable too: the original error is the one to show
        return None
    return None


def _take_over_connect_attempt(app: TsbApp, catalog: BarrierCatalog, spark: SparkSession, url: str) -> None:
    """Start this run's attempt with its Spark Connect session, then interrupt what the previous
    attempt's session still runs on the server (a killed client's work goes on there; see
    :func:`~airflow_provider_tsb.spark.session.interrupt_session`), before any write of ours."""
    from airflow_provider_tsb.spark.session import interrupt_session

    begin = getattr(catalog, "begin_attempt", None)
    if begin is None:
        return  # a plan file: no attempts, no sessions recorded
    begin(app.job_id, spark.session_id, for_next_run=True)
    previous = getattr(catalog, "previous_spark_session", lambda _job: None)(app.job_id)
    if previous and previous != spark.session_id:
        stopped = interrupt_session(url, previous)
        if stopped:
            log.warning("job %s: interrupted %d operation(s) the previous attempt (Spark Connect session %s) "
                        "left running on the server", app.job_id, len(stopped), previous)


def _run_mode(run: AppRun, args: argparse.Namespace) -> None:
    app = run.app
    if args.mode == "batch":
        done = run_batch(run, until_barrier=args.until_barrier, max_barriers=args.max_barriers)
        log.info("job %s: batch mode processed barriers %s", app.job_id, done)
        if not done:
            log.warning(
                "job %s: no barrier was pending for it%s, so nothing was processed. A barrier is pending once "
                "it is generated (the DAG's barrier task, or `tsb barrier create TOPOLOGY --dags PATH`) and "
                "WRITTEN in every source of the job; `tsb job run %s --barrier N --dags PATH` runs one barrier",
                app.job_id, f" up to barrier {args.until_barrier}" if args.until_barrier else "", app.job_id,
            )
        return
    done = run_streaming(run, StreamOptions(
        checkpoint=args.checkpoint, until_barrier=args.until_barrier, max_barriers=args.max_barriers,
        idle_timeout_s=args.idle_timeout, trigger_interval_s=args.trigger_interval,
        poll_interval_s=args.poll_interval, final_since_ms=args.final_since,
        max_barriers_per_trigger=args.max_barriers_per_trigger,
    ))
    log.info("job %s: streaming mode processed barriers %s", app.job_id, done)
