"""The embedded Spark Connect server: one warm Spark per machine for every job of a topology.

:class:`ConnectServer` starts, checks and stops a local Spark Connect server from pyspark's own
jars (``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer
spark-internal``; Spark docs "Spark Connect Overview", "Deploying"), with its state in a folder:
``server.json`` (pid, port, URL, master, log) and ``server.log``. ``tsb spark start | stop |
status`` is its command line (:mod:`airflow_provider_tsb.cli.spark`). Jobs whose Spark
connection has type ``spark_connect`` are its clients (:mod:`airflow_provider_tsb.hooks.spark_engine`).

A Connect server authenticates nobody unless given a token: it binds to the loopback address by
default. Beyond one machine, point the Spark connection at a cluster's Connect endpoint instead.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from airflow_provider_tsb.exceptions import SparkInstallationError, SparkServerError
from airflow_provider_tsb.spark.class_data import DRIVER_JAVA_OPTIONS
from airflow_provider_tsb.spark.installation import CONNECT_MARKERS, check_java, driver_env, spark_submit
from airflow_provider_tsb.spark.process_group import ProcessGroup, start_ticks

__all__ = ["CONNECT_MARKERS", "ConnectServer", "ConnectServerOptions", "ServerStatus",
           "check_java", "default_java_options", "server_conf", "spark_submit"]


SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: the line Spark logs once the gRPC service listens
READY_LINE = "Spark Connect server started"
#: a line of a failed start's log that names the cause: an exception with its message, a JVM
#: option it refused, or spark-submit's own ``Error:`` lines
START_ERROR = re.compile(r"^(Exception in thread|Error:|[\w.$]+(Exception|Error): |Invalid |Unrecognized )")
#: state folder of the local server, unless given: ``$TSB_SPARK_HOME``
HOME_ENV = "TSB_SPARK_HOME"
DEFAULT_PORT = 15002
#: seconds :meth:`ConnectServer.stop` waits, after the server's processes are gone, for its port
#: to stop accepting connections
PORT_RELEASE_S = 10.0

#: Spark properties of the embedded server (``ConnectServerOptions.conf`` wins over them)
SERVER_CONF: dict[str, str] = {
    # no web UI: one less port and thread pool on a small machine
    "spark.ui.enabled": "false",
    # Delta rebuilds a version's state with a Spark job of this many tasks (default 50); a
    # topology's tables have small logs, so one task does the work and 50 only add their scheduling
    "spark.databricks.delta.snapshotPartitions": "1",
    # tsb's session defaults, also set by every client session (spark/session.py)
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.enable.summary-metadata": "false",
    # a Python worker that connects back slowly on a busy machine still authenticates (default 15 s)
    "spark.python.authenticate.socketTimeout": "120s",
    "spark.python.worker.reuse": "true",
    # an operation whose client is gone (its RPC detached) is abandoned after 60 s (default 5 min)
    "spark.connect.execute.manager.detachedTimeout": "60s",
    # sessions of clients that died are released after 30 idle minutes (default 60)
    "spark.connect.session.manager.defaultSessionTimeout": "30min",
}


#: the server JVM's options when none are given, on a machine of at most
#: :data:`SMALL_MACHINE_CPUS` processors with a local master: the serial collector, which keeps
#: no G1 remembered sets, with a heap that follows the live data. The JVM's own defaults start
#: the heap at 1/64 of the machine's memory and give a generation back only when more than 70 %
#: of it is free after a collection, so a streaming server's heap only grows;
#: ``-Xms64m -XX:MinHeapFreeRatio=20 -XX:MaxHeapFreeRatio=40`` start it small and keep 20-40 %
#: free after each collection (HotSpot's heap sizing: the JVM's ``java`` manual, "Advanced
#: Garbage Collection Options"). The price is more collections: a somewhat longer end-to-end
#: delay for a server that holds a fraction of the memory (docs/engines.md, "The server's heap").
SMALL_MACHINE_JAVA_OPTIONS = "-XX:+UseSerialGC -Xms64m -XX:MinHeapFreeRatio=20 -XX:MaxHeapFreeRatio=40"
SMALL_MACHINE_CPUS = 2
#: a Java option that chooses the garbage collector (``-XX:+UseG1GC``, ``-XX:+UseZGC``, ...)
GC_OPTION = re.compile(r"-XX:\+Use\w+GC\b")
#: the option every server JVM gets unless its own options handle an OutOfMemoryError: a JVM past
#: one serves on in an undefined state (one job's query that exhausted the heap left the server
#: stopping its SparkContext for two minutes while every job hung); exiting at once lets the
#: server's owner start it again in seconds, and every job's watch ends it for its retry
#: (:mod:`~airflow_provider_tsb.spark.server_watch` names the memory)
EXIT_ON_OOM = "-XX:+ExitOnOutOfMemoryError"
#: a JVM memory size as ``spark.driver.memory`` takes it (Spark's ``JavaUtils.byteStringAs``)
JVM_MEMORY = re.compile(r"[1-9][0-9]*([kmgtp]b?)?", re.IGNORECASE)


@dataclass(frozen=True)
class ConnectServerOptions:
    """How to start the local server.

    Attributes:
        port: gRPC port (``spark.connect.grpc.binding.port``).
        bind_address: address to listen on (``spark.connect.grpc.binding.address``); loopback by
            default, since the server has no authentication without a token.
        master: Spark master of the server (``local[*]``, or a cluster's ``spark://host:7077``).
        driver_memory: the server driver's heap (``spark.driver.memory``), e.g. ``2g``.
        driver_java_options: Java options of the server's JVM (spark-submit's
            ``--driver-java-options``), before any ``spark.driver.extraJavaOptions`` of ``conf``.
            ``None``: :func:`default_java_options` (the serial collector on a small machine);
            ``""``: none, the JVM's own defaults.
        conf: more Spark properties; they win over :data:`SERVER_CONF`.
        startup_timeout_s: seconds to wait for the server to answer.
        class_data: map the class-data archive of Spark's driver classes
            (:mod:`airflow_provider_tsb.spark.class_data`; started in the background when missing).
    """

    port: int = DEFAULT_PORT
    bind_address: str = "127.0.0.1"
    master: str = "local[*]"
    driver_memory: str = "2g"
    driver_java_options: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 120.0
    class_data: bool = True

    def __post_init__(self) -> None:
        """Refuse options the JVM or gRPC would refuse later with a stack trace in the log.

        Raises:
            SparkServerError: a port outside 1-65535, a heap size that is not a JVM memory size
                (``768m``, ``2g``; Spark's ``spark.driver.memory`` syntax), Java options that are
                not options (each word starts with ``-``), or a startup timeout that is not a
                positive number of seconds.
        """
        if not (isinstance(self.port, int) and 0 < self.port < 65536):
            raise SparkServerError(f"--port {self.port!r}: a TCP port is a number from 1 to 65535")
        if not JVM_MEMORY.fullmatch(str(self.driver_memory)):
            raise SparkServerError(
                f"--driver-memory {self.driver_memory!r}: the server's heap is a JVM memory size, a number "
                "with an optional unit k, m, g or t (e.g. 768m or 2g; a bare number is MiB)"
            )
        if self.driver_java_options and not all(w.startswith("-") for w in self.driver_java_options.split()):
            raise SparkServerError(
                f"--driver-java-options {self.driver_java_options!r}: Java options are words that start "
                "with '-', e.g. '-XX:+UseG1GC' (a Spark property goes in --conf KEY=VALUE)"
            )
        if not 0 < self.startup_timeout_s < float("inf"):
            raise SparkServerError(f"--timeout {self.startup_timeout_s!r}: a number of seconds > 0")


@dataclass(frozen=True)
class ServerStatus:
    """What :meth:`ConnectServer.status` found.

    Attributes:
        state: ``running`` (its process lives and the port answers), ``stopped`` (no state
            file) or ``stale`` (a state file whose process is gone or does not answer).
        pid, port, url, master, log: the recorded server (``None`` when stopped).
        message: a sentence for people.
    """

    state: Literal["running", "stopped", "stale"]
    pid: int | None = None
    port: int | None = None
    url: str | None = None
    master: str | None = None
    log: str | None = None
    message: str = ""


def default_java_options(master: str, cpus: int | None = None) -> str:
    """The server JVM's Java options when none are given: :data:`SMALL_MACHINE_JAVA_OPTIONS`
    (the serial collector, a heap that follows the live data) when ``master`` runs its executors
    inside the server (``local``, ``local[N]``, ``local[*]``) on a machine of at most
    :data:`SMALL_MACHINE_CPUS` processors (``cpus``, default ``os.cpu_count()``), else ``""`` (the
    JVM chooses: G1 on a larger machine, whose collections then run on several cores).

    Example:
        >>> default_java_options("local[*]", cpus=2)
        '-XX:+UseSerialGC -Xms64m -XX:MinHeapFreeRatio=20 -XX:MaxHeapFreeRatio=40'
        >>> default_java_options("local[*]", cpus=16)
        ''
    """
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    local = master == "local" or master.startswith("local[")
    return SMALL_MACHINE_JAVA_OPTIONS if local and cpus <= SMALL_MACHINE_CPUS else ""


def server_conf(options: ConnectServerOptions) -> dict[str, str]:
    """The Spark properties the server starts with: :data:`SERVER_CONF`, its address, then
    ``options.conf``; ``options.driver_java_options`` (or :func:`default_java_options`) go first
    in ``spark.driver.extraJavaOptions``, with :data:`EXIT_ON_OOM` unless they handle an
    OutOfMemoryError themselves. A default collector is left out when the conf's own Java
    options choose one (the JVM refuses two)."""
    conf = {**SERVER_CONF, "spark.connect.grpc.binding.port": str(options.port),
            "spark.connect.grpc.binding.address": options.bind_address, **dict(options.conf)}
    own = conf.get(DRIVER_JAVA_OPTIONS, "").strip()
    java = options.driver_java_options
    if java is None:
        java = "" if GC_OPTION.search(own) else default_java_options(options.master)
    if "OnOutOfMemoryError" not in f"{java} {own}":
        java = f"{java} {EXIT_ON_OOM}"
    conf[DRIVER_JAVA_OPTIONS] = f"{java.strip()} {own}".strip()
    return conf


def default_home() -> Path:
    """``$TSB_SPARK_HOME``, else ``$AIRFLOW_HOME/tsb-spark``, else ``~/airflow/tsb-spark``."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV])
    airflow_home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return Path(airflow_home) / "tsb-spark"


class ConnectServer:
    """The local Spark Connect server whose state lives in ``home`` (see module doc).

    Args:
        home: state folder (created on start).
        options: how to start it (:class:`ConnectServerOptions`).
    """

    def __init__(self, home: Path | str | None = None, options: ConnectServerOptions | None = None) -> None:
        self.home = Path(home) if home is not None else default_home()
        self.options = options or ConnectServerOptions()
        self._log_start = 0  # byte offset in the log where the last start's lines begin

    @property
    def state_file(self) -> Path:
        """``server.json`` in :attr:`home`."""
        return self.home / "server.json"

    @property
    def log_file(self) -> Path:
        """``server.log`` in :attr:`home`."""
        return self.home / "server.log"

    # ------------------------------------------------------------------ status
    def status(self) -> ServerStatus:
        """The recorded server's state: its process alive and its port accepting connections."""
        state = self._read_state()
        if state is None:
            return ServerStatus("stopped", message=f"no Spark Connect server recorded in {self.home}")
        pid, port = int(state["pid"]), int(state["port"])
        fields = {k: state.get(k) for k in ("url", "master", "log")}
        group = _group(state)
        if group.reused():
            return ServerStatus("stale", pid, port, **fields,
                                message=f"server pid {pid} is gone (the number now belongs to another process)")
        if not group.leader_alive():
            return ServerStatus("stale", pid, port, **fields, message=f"server pid {pid} is gone")
        if not port_open(state.get("bind_address") or "127.0.0.1", port):
            return ServerStatus("stale", pid, port, **fields, message=f"server pid {pid} does not answer on {port}")
        return ServerStatus("running", pid, port, **fields, message=f"Spark Connect server at {state['url']}")

    # ------------------------------------------------------------------ start
    def start(self) -> ServerStatus:
        """Start the server, or return the one already running in :attr:`home`.

        Returns the running server's status; its ``message`` says when it was already running
        (with the port it has, which may differ from :attr:`options`).

        Raises:
            SparkServerError: Java 17+ is missing, pyspark's ``spark-submit`` is missing (see
                :mod:`airflow_provider_tsb.spark.installation`), the
                port is taken by another process, or the server exited or did not answer within
                ``startup_timeout_s`` (the message holds the end of its log and the log's path).
        """
        current = self.status()
        if current.state == "running":
            return ServerStatus(**{**asdict(current), "message": f"already running: {current.message}"})
        if current.state == "stale":
            self._forget()
        opts = self.options
        try:
            check_java()
            command = self.command()
        except SparkInstallationError as exc:
            raise SparkServerError(str(exc)) from exc
        if port_open(opts.bind_address, opts.port):
            raise SparkServerError(
                f"port {opts.port} on {opts.bind_address} is in use by another process; choose another with "
                "--port, or stop that process"
            )
        self.home.mkdir(parents=True, exist_ok=True)
        # the server is a Spark driver, never a client (pyspark marks a client's environment)
        env = driver_env()
        with self.log_file.open("ab") as log:
            self._log_start = log.tell()  # this start's lines begin here (the log is appended to)
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True, cwd=self.home)
        url = f"sc://{_url_host(opts.bind_address)}:{opts.port}"
        self._write_state({"pid": process.pid, "start_ticks": start_ticks(process.pid), "port": opts.port,
                           "bind_address": opts.bind_address, "url": url,
                           "master": opts.master, "log": str(self.log_file), "started_at": time.time(),
                           "driver_memory": opts.driver_memory})
        self._wait_ready(process, url)
        return self.status()

    def command(self) -> list[str]:
        """The ``spark-submit`` command line of the server."""
        from airflow_provider_tsb.spark.delta_jars import delta_conf

        opts = self.options
        conf = delta_conf(server_conf(opts), fetch_missing=True)
        if opts.class_data:
            from airflow_provider_tsb.spark.class_data import ClassDataArchive, with_class_data

            conf = with_class_data(conf, ClassDataArchive(spark_submit=spark_submit()).ensure(), opts.master)
        args = [spark_submit(), "--class", SERVER_CLASS, "--name", "tsb-spark-connect", "--master", opts.master,
                "--driver-memory", opts.driver_memory]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        return [*args, "spark-internal"]

    def _wait_ready(self, process: subprocess.Popen[bytes], url: str) -> None:
        deadline = time.monotonic() + self.options.startup_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self._forget()
                raise SparkServerError(
                    f"the Spark Connect server exited with code {process.returncode} before it was ready: "
                    f"{self.start_error()}\nThe end of this start's log ({self.log_file}):\n"
                    f"{self.log_tail(since=self._log_start)}"
                )
            if READY_LINE in self._log_text(self._log_start) and port_open(self.options.bind_address,
                                                                            self.options.port):
                if health(url):
                    return
            time.sleep(0.25)
        self.stop()
        raise SparkServerError(
            f"the Spark Connect server did not answer at {url} within {self.options.startup_timeout_s:g} s "
            f"(stopped it); the end of this start's log ({self.log_file}):\n{self.log_tail(since=self._log_start)}"
        )

    # ------------------------------------------------------------------ stop
    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the recorded server and every process of its group; forget it.

        SIGTERM first (Spark stops its context), SIGKILL after ``timeout_s`` seconds. Returns
        whether a server process was running, once its port no longer accepts connections (up
        to :data:`PORT_RELEASE_S` seconds more), so that a ``tsb spark start`` right after it
        finds the port free. A recorded pid that now belongs to another process (the server
        died and the number was reused) is left alone: see :class:`ProcessGroup`.
        """
        state = self._read_state()
        if state is None:
            return False
        group = _group(state)
        was_running = group.leader_alive()
        group.stop(timeout_s)
        self._forget()
        if was_running and isinstance(state.get("port"), int):
            host = str(state.get("bind_address") or "127.0.0.1")
            deadline = time.monotonic() + PORT_RELEASE_S
            while port_open(host, state["port"], timeout_s=0.5) and time.monotonic() < deadline:
                time.sleep(0.2)
        return was_running

    # ------------------------------------------------------------------ helpers
    def log_tail(self, lines: int = 20, *, since: int = 0) -> str:
        """The last ``lines`` lines of the server's log (from byte offset ``since``)."""
        return "\n".join(self._log_text(since).splitlines()[-lines:])

    def start_error(self) -> str:
        """The line of the last start's log that says why the server failed: the JVM's or
        Spark's first error (``Invalid maximum heap size: -Xmx12zz``, ``...SparkException: Could
        not parse Master URL: 'bogus://x'``), else its last line."""
        lines = [line.strip() for line in self._log_text(self._log_start).splitlines() if line.strip()]
        for line in lines:
            if START_ERROR.search(line):
                return line
        return lines[-1] if lines else "(its log is empty)"

    def _log_text(self, since: int = 0) -> str:
        try:
            with self.log_file.open("rb") as handle:
                handle.seek(since)
                return handle.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def _read_state(self) -> dict | None:
        try:
            return json.loads(self.state_file.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _write_state(self, state: dict) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        tmp.replace(self.state_file)

    def _forget(self) -> None:
        self.state_file.unlink(missing_ok=True)


def port_open(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((_connect_host(host), port), timeout=timeout_s):
            return True
    except OSError:
        return False


def health(url: str, timeout_s: float = 60.0) -> bool:
    """True when the server at ``url`` runs a query: ``spark.range(1).count() == 1`` on a new
    session, released afterwards (one gRPC round of requests)."""
    from pyspark.sql import SparkSession

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            session = SparkSession.builder.remote(url).create()
            try:
                return bool(session.range(1).count() == 1)
            finally:
                session.stop()
        except Exception:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)


def _group(state: Mapping[str, object]) -> ProcessGroup:
    ticks = state.get("start_ticks")
    return ProcessGroup(int(str(state["pid"])), int(str(ticks)) if ticks is not None else None)


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)


def _url_host(host: str) -> str:
    host = _connect_host(host)
    return f"[{host}]" if ":" in host else host
