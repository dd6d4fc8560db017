"""The SparkSession of a tsb app: a Spark Connect client session, or a classic driver's.

Two engines run the same app code (docs/design.md "Engines"):

* **connect**: the app is a thin Spark Connect client of a long-running Connect server (one
  warm Spark for the whole topology). Chosen when a remote URL is given (``remote=``, or
  pyspark's own ``$SPARK_REMOTE``, e.g. ``sc://127.0.0.1:15002``; Spark docs "Spark Connect
  Overview"). Each job gets a session of its own on the server: its SQL settings, temporary
  views and registered data sources are its own.
* **submit**: the app is its own Spark driver (``spark-submit``, or a local session in this
  process).

:func:`get_spark` builds either; :func:`is_connect` tells which one a session is.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping

# first: it quiets pyspark's pandas warning before pyspark is imported
from airflow_provider_tsb.spark.installation import CONNECT_MARKERS  # isort: skip
from pyspark.sql import SparkSession  # noqa: I001

log = logging.getLogger("airflow_provider_tsb.spark")

#: pyspark's environment variable naming a Spark Connect server (``sc://host:port/;params``)
REMOTE_ENV = "SPARK_REMOTE"

#: SQL confs tsb needs on every session (also applied to an existing one).
REQUIRED_SQL_CONF: dict[str, str] = {
    # delta-rs and other Delta readers expect INT64 timestamps, not Spark's legacy INT96.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
}

#: defaults of a local classic session (not under spark-submit, whose confs win)
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.driver.memory": "2g",
    "spark.sql.sources.partitionOverwriteMode": "static",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.enable.summary-metadata": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Delta's state reconstruction of a version: one task, not 50 (a small log on a small machine)
    "spark.databricks.delta.snapshotPartitions": "1",
}

#: session settings of a Connect client (the server's own settings are the rest of DEFAULT_CONF)
CONNECT_SESSION_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.sources.partitionOverwriteMode": "static",
}


def launched_by_spark_submit() -> bool:
    """True when this Python process was started by ``spark-submit`` (a JVM gateway exists)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def remote_url(remote: str | None = None) -> str | None:
    """The Spark Connect URL this process uses: ``remote``, else ``$SPARK_REMOTE``, else ``None``
    (classic engine). Under ``spark-submit`` always ``None``: the driver is this process."""
    if launched_by_spark_submit():
        return None
    url = remote or os.environ.get(REMOTE_ENV) or None
    if url is not None and not url.startswith("sc://"):
        raise ValueError(
            f"Spark Connect URL {url!r} must start with 'sc://' (e.g. sc://127.0.0.1:15002; Spark docs "
            "'Spark Connect Overview', connection string)"
        )
    return url


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect client session (no JVM in this process, no ``sparkContext``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def get_spark(
    app_name: str = "tsb",
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    remote: str | None = None,
) -> SparkSession:
    """Return a SparkSession configured for tsb.

    Args:
        app_name: the application name (classic) or the session's user context (Connect).
        master: classic, not under ``spark-submit``: the master (default env
            ``TSB_SPARK_MASTER`` or ``local[2]``).
        conf: Spark settings of the job. On Connect only runtime settings (those
            ``spark.conf.isModifiable``) apply to the session; the others are the server's
            and are logged as not applied (set them when starting the server:
            ``tsb spark start --conf KEY=VALUE``).
        remote: a Spark Connect URL (``sc://host:port``); default ``$SPARK_REMOTE``.

    Under ``spark-submit`` the master and confs given there win; a local driver started here
    maps the class-data archive when there is one. ``PYSPARK_PYTHON`` defaults to this
    interpreter so Python workers start. The storage options of this process
    (:mod:`airflow_provider_tsb.delta.storage`) give the session its S3A settings
    (:func:`~airflow_provider_tsb.spark.hadoop_fs.hadoop_settings`; ``conf`` wins). The confs
    of :data:`REQUIRED_SQL_CONF` are always set; the classic log level is ``$TSB_SPARK_LOG_LEVEL`` (default ``WARN``).

    Raises:
        ValueError: the Connect URL does not start with ``sc://``.
        pyspark.errors.PySparkException: the Connect server does not answer (see
            :func:`connect_session`).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = {**_storage_settings(), **(conf or {})}
    url = remote_url(remote)
    if url is not None:
        return connect_session(url, app_name, conf)
    for marker in CONNECT_MARKERS:
        os.environ.pop(marker, None)  # inherited from a Spark Connect client: this process is a driver
    builder = SparkSession.builder.appName(app_name)
    settings = {**REQUIRED_SQL_CONF, **(conf or {})}
    if not launched_by_spark_submit():
        builder = builder.master(master or os.environ.get("TSB_SPARK_MASTER", "local[2]"))
        for key, value in DEFAULT_CONF.items():
            builder = builder.config(key, value)
        settings = _with_class_data(_with_delta(settings))
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for key, value in REQUIRED_SQL_CONF.items():
        spark.conf.set(key, value)
    # Spark's INFO log costs driver CPU on every micro-batch; TSB_SPARK_LOG_LEVEL=INFO brings it back
    spark.sparkContext.setLogLevel(os.environ.get("TSB_SPARK_LOG_LEVEL", "WARN"))
    return spark


def _storage_settings() -> dict[str, str]:
    """Spark's S3A settings of this process's storage options
    (:func:`~airflow_provider_tsb.spark.hadoop_fs.hadoop_settings`; ``{}`` without any)."""
    from airflow_provider_tsb.delta.storage import configured_options
    from airflow_provider_tsb.spark.hadoop_fs import hadoop_settings

    return hadoop_settings(configured_options())


def _with_delta(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` of a driver started here with Delta's jars, extension and catalog
    (:func:`~airflow_provider_tsb.spark.delta_jars.delta_conf`); unchanged when a JVM already
    runs in this process (its classpath is set)."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        return dict(settings)
    from airflow_provider_tsb.spark.delta_jars import delta_conf

    return delta_conf(settings, fetch_missing=True)


def _with_class_data(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` of a session that starts its own driver JVM here, with the class-data archive
    in ``spark.driver.extraJavaOptions`` when it exists and no JVM runs in this process yet
    (:mod:`airflow_provider_tsb.spark.class_data`: a faster start)."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:  # the JVM exists: its options are set
        return dict(settings)
    from airflow_provider_tsb.spark.class_data import ClassDataArchive, with_class_data

    try:
        return with_class_data(settings, ClassDataArchive().java_options())
    except Exception as exc:  # no pyspark jars or Java found: start as before
        log.debug("no class-data archive: %s", exc)
        return dict(settings)


def connect_session(url: str, app_name: str = "tsb", conf: Mapping[str, str] | None = None) -> SparkSession:
    """A new Spark Connect session on the server at ``url`` with the job's settings.

    The session is this client's own (a fresh session id), so two jobs on one server never
    share SQL settings, temporary views or data sources. Settings the server does not let a
    session change, and holds with another value, are logged as not applied. Stop the session
    (``spark.stop()``) when done: it releases it on the server.

    Raises:
        SparkConnectUnavailableError: nothing listened at ``url``'s host and port for
            ``$TSB_SPARK_WAIT_SECONDS`` (default 90: a supervised server restarting after a
            crash answers within it; names the URL and how to start a server). Checked with TCP
            connections first, since pyspark retries an unreachable server for about 10 minutes.
    """
    from airflow_provider_tsb.exceptions import SparkConnectUnavailableError

    host, port = connect_address(url)
    wait_s = _wait_seconds()
    if not _listening(host, port):
        log.warning("job %s: no Spark Connect server answers at sc://%s:%s yet; waiting up to %.0f s for it "
                    "(a supervised server restarts by itself)", app_name, host, port, wait_s)
        deadline = time.monotonic() + wait_s
        while not _listening(host, port):
            if time.monotonic() >= deadline:
                raise SparkConnectUnavailableError(
                    f"no Spark Connect server listens at sc://{host}:{port} (waited {wait_s:.0f} s); start one with "
                    f"`tsb spark start --port {port} --supervise` (a local server on this machine) or point the "
                    "job's Spark connection at a running server"
                )
            time.sleep(1.0)
    spark = SparkSession.builder.remote(url).appName(app_name).create()
    static = apply_session_conf(spark, {**CONNECT_SESSION_CONF, **REQUIRED_SQL_CONF, **(conf or {})})
    if static:
        log.warning(
            "job %s: Spark settings %s are the Spark Connect server's own, not a session's: not applied "
            "(set them where the server starts, e.g. `tsb spark start --conf KEY=VALUE`)", app_name, static,
        )
    return spark


def env_seconds(name: str, default: float, meaning: str) -> float:
    """``$name`` as seconds >= 0 (``default`` when unset or empty).

    Raises:
        OutOfRangeError: not a number of seconds >= 0 (names the variable, its value and
            ``meaning``: what the seconds are for).
    """
    from airflow_provider_tsb.exceptions import OutOfRangeError

    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise OutOfRangeError(f"${name}={raw!r}: give {meaning}")
    return value


def _wait_seconds() -> float:
    """``$TSB_SPARK_WAIT_SECONDS`` (default 90); see :func:`env_seconds`."""
    return env_seconds("TSB_SPARK_WAIT_SECONDS", 90.0,
                       "the seconds a job waits for its Spark Connect server to answer (e.g. 90), or 0 not to wait")


def connect_address(url: str) -> tuple[str, int]:
    """``(host, port)`` of a Spark Connect URL ``sc://host[:port][/;params]`` (default port 15002,
    Spark docs "Spark Connect Overview", connection string)."""
    netloc = url[len("sc://"):].split("/", 1)[0].split(";", 1)[0]
    host, sep, port = netloc.rpartition(":")
    if not sep or not port.isdigit():
        return netloc.strip("[]") or "localhost", 15002
    return host.strip("[]") or "localhost", int(port)


def _listening(host: str, port: int, timeout_s: float = 5.0) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def apply_session_conf(spark: SparkSession, settings: Mapping[str, str]) -> list[str]:
    """Set each setting on the Connect session; return ``KEY=VALUE (server: V)`` for each one the
    server refused as its own (static and Spark core settings: error class
    ``CANNOT_MODIFY_CONFIG``) and holds with another value. One request per setting."""
    from pyspark.errors import AnalysisException

    static = []
    for key, value in settings.items():
        try:
            spark.conf.set(key, value)
        except AnalysisException as exc:
            if "CANNOT_MODIFY_CONFIG" not in str(exc) and "CANNOT_MODIFY_STATIC_CONFIG" not in str(exc):
                raise
            server = spark.conf.get(key, None)
            if server != value:
                static.append(f"{key}={value} (server: {server if server is not None else 'unset'})")
    return static


def interrupt_session(url: str, session_id: str) -> list[str]:
    """Interrupt every operation of session ``session_id`` on the Connect server at ``url`` and
    release the session; return the ids of the operations interrupted.

    A Spark Connect client that dies (SIGKILL, a lost worker) leaves its running operations on
    the server, which finishes them: a killed job's write would still land files after its
    retry started. The retry calls this on the dead attempt's session first (Spark docs,
    ``SparkSession.interruptAll``; ``release_session``). A session already released or expired
    is nothing to interrupt (``[]``).
    """
    from pyspark.errors import PySparkException

    zombie = SparkSession.builder.remote(_with_param(url, "session_id", session_id)).create()
    try:
        interrupted = list(zombie.interruptAll())
    except PySparkException as exc:
        if "SESSION_CLOSED" in str(exc) or "SESSION_NOT_FOUND" in str(exc):
            interrupted = []
        else:
            raise
    finally:
        try:
            zombie.stop()  # releases the session and its cached data on the server
        except Exception:  # already released: nothing held
            log.debug("session %s: already released", session_id)
    return interrupted


def _with_param(url: str, key: str, value: str) -> str:
    """``url`` with the connection-string parameter ``key=value`` (replacing one it had)."""
    base, _, params = url.partition(";")
    kept = [p for p in params.split(";") if p and not p.startswith(f"{key}=")]
    return base.rstrip("/") + "/;" + ";".join([*kept, f"{key}={value}"])
