"""The ``tsb spark`` commands: the local Spark Connect server every job of a topology shares::

    tsb spark start [--port 15002] [--master local[*]] [--conf KEY=VALUE ...]   # prints its URL
    tsb spark start --supervise            # stays in the foreground, restarting the server if it dies
    tsb spark status [--format json]      # exit 0 running, 1 stopped or stale
    tsb spark stop
    tsb spark archive [--delete]           # the class-data archive of local spark-submit drivers
    tsb spark jars [--fetch]               # Delta's jars (Maven), on every Spark tsb starts

The server's state (pid, port, log) is in ``--home`` (default ``$TSB_SPARK_HOME``, else
``$AIRFLOW_HOME/tsb-spark``). Point a Spark connection of type ``spark_connect`` at the printed
URL (``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark_connect", "host": "sc://127.0.0.1",
"port": 15002}'``) and every job of the topology runs on it
(:class:`~airflow_provider_tsb.spark.connect_server.ConnectServer`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from airflow_provider_tsb.exceptions import SparkCommandError


def _server(args: argparse.Namespace) -> Any:
    from airflow_provider_tsb.exceptions import SparkServerError
    from airflow_provider_tsb.spark.connect_server import ConnectServer, ConnectServerOptions

    try:
        options = ConnectServerOptions(
            **{k: v for k, v in {
                "port": getattr(args, "port", None), "bind_address": getattr(args, "bind_address", None),
                "master": getattr(args, "master", None), "driver_memory": getattr(args, "driver_memory", None),
                "driver_java_options": getattr(args, "driver_java_options", None),
                "startup_timeout_s": getattr(args, "timeout", None),
            }.items() if v is not None},
            conf=_conf(getattr(args, "conf", None) or []),
        )
    except SparkServerError as exc:
        raise SparkCommandError(str(exc)) from exc
    return ConnectServer(args.home, options)


def _conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("spark."):
            raise SparkCommandError(
                f"--conf takes a Spark property as KEY=VALUE (KEY starts with 'spark.'), got {pair!r}"
            )
        conf[key] = value
    return conf


def cmd_spark_start(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.exceptions import SparkServerError

    server = _server(args)
    try:
        status = server.start()
    except SparkServerError as exc:
        raise SparkCommandError(str(exc)) from exc
    print(f"{status.message}")
    print(f"url  {status.url}\npid  {status.pid}\nlog  {status.log}", flush=True)
    if args.supervise:
        _supervise(server)
    return 0


def _supervise(server: Any) -> None:
    """Own ``server`` in the foreground until SIGTERM or SIGINT, restarting it when it dies
    (:class:`~airflow_provider_tsb.spark.supervisor.Supervisor`), then stop it."""
    import logging
    import signal

    from airflow_provider_tsb.spark.supervisor import Supervisor

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    supervisor = Supervisor(server)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: supervisor.stop())
    print("supervising: the server is restarted if it dies; SIGTERM or Ctrl-C stops both", flush=True)
    supervisor.run()


def cmd_spark_stop(args: argparse.Namespace) -> int:
    server = _server(args)
    stopped = server.stop()
    print("stopped the Spark Connect server" if stopped else f"no Spark Connect server was running ({server.home})")
    return 0


def cmd_spark_status(args: argparse.Namespace) -> int:
    status = _server(args).status()
    if args.format == "json":
        print(json.dumps(dataclasses.asdict(status), indent=2, sort_keys=True))
    else:
        print(f"{status.state}: {status.message}" + (f" (pid {status.pid}, log {status.log})" if status.pid else ""))
    return 0 if status.state == "running" else 1


def cmd_spark_archive(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.exceptions import ClassDataError, SparkServerError
    from airflow_provider_tsb.spark.class_data import ClassDataArchive
    from airflow_provider_tsb.spark.connect_server import check_java

    try:
        check_java()
        archive = ClassDataArchive(args.directory)
    except SparkServerError as exc:
        raise SparkCommandError(str(exc)) from exc
    if args.delete:
        print(f"deleted {archive.path}" if archive.delete() else f"no class-data archive at {archive.path}")
        return 0
    try:
        seconds = archive.create()
    except ClassDataError as exc:
        raise SparkCommandError(str(exc)) from exc
    size_mb = archive.path.stat().st_size / 2**20
    print(f"{'wrote' if seconds else 'already there:'} {archive.path} ({size_mb:.0f} MB"
          + (f", {seconds:.1f} s)" if seconds else ")"))
    return 0


def cmd_spark_jars(args: argparse.Namespace) -> int:
    from airflow_provider_tsb.exceptions import DeltaJarsError
    from airflow_provider_tsb.spark.delta_jars import delta_jars, fetch, jars_dir

    try:
        jars = fetch() if args.fetch else delta_jars()
    except DeltaJarsError as exc:
        raise SparkCommandError(str(exc)) from exc
    print(f"{'fetched' if args.fetch else 'found'} {len(jars)} jars in {jars_dir()}")
    for jar in jars:
        print(f"  {jar.name}")
    return 0


def register(sub: Any) -> None:
    """Add ``tsb spark start | stop | status`` to the ``tsb`` command line."""
    spark = sub.add_parser("spark", help="the local Spark Connect server the jobs share").add_subparsers(
        dest="spark_command", required=True
    )

    def home(p: argparse.ArgumentParser) -> None:
        p.add_argument("--home", default=None,
                       help="the server's state folder (default $TSB_SPARK_HOME, else $AIRFLOW_HOME/tsb-spark)")

    p = spark.add_parser("start", help="start the server (or show the one running) and print its URL")
    home(p)
    p.add_argument("--port", type=int, default=None, help="gRPC port (default 15002)")
    p.add_argument("--bind-address", default=None, help="address to listen on (default 127.0.0.1)")
    p.add_argument("--master", default=None, help="Spark master of the server (default local[*])")
    p.add_argument("--driver-memory", default=None, help="driver heap, e.g. 2g (default)")
    p.add_argument("--driver-java-options", default=None, metavar="OPTIONS",
                   help="Java options of the server's JVM (default: the serial collector and a heap that follows "
                        "the live data on a machine of at most 2 processors with a local master, else none; '' for "
                        "none). Give one option with '=': "
                        "--driver-java-options=-XX:+UseG1GC")
    p.add_argument("--conf", action="append", metavar="KEY=VALUE", help="a Spark property of the server")
    p.add_argument("--timeout", type=float, default=None, help="seconds to wait for it to answer (default 120)")
    p.add_argument("--supervise", action="store_true",
                   help="stay in the foreground and restart the server whenever it dies (its owner: the jobs' "
                        "retries resume once it answers); SIGTERM or Ctrl-C stops it")
    p.set_defaults(func=cmd_spark_start)
    p = spark.add_parser("stop", help="stop the server and every process it started")
    home(p)
    p.set_defaults(func=cmd_spark_stop)
    p = spark.add_parser("status", help="running, stopped or stale (exit 0 only when running)")
    home(p)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_spark_status)
    p = spark.add_parser("archive", help="write the class-data archive that starts local spark-submit drivers "
                                         "faster (once per Java and Spark installation)")
    p.add_argument("--directory", default=None,
                   help="where archives are kept (default $TSB_CLASS_DATA_DIR, else ~/.cache/airflow-provider-tsb)")
    p.add_argument("--delete", action="store_true", help="delete the archive instead")
    p.set_defaults(func=cmd_spark_archive)
    p = spark.add_parser("jars", help="Delta's jars that every tsb Spark puts on its classpath: check them, "
                                      "or fetch them with Maven (--fetch)")
    p.add_argument("--fetch", action="store_true", help="fetch them again (mvn dependency:copy-dependencies)")
    p.set_defaults(func=cmd_spark_jars)
