"""Which engine runs a job's app, and the Spark Connect one: :class:`SparkEngine`, :class:`ConnectClient`.

A job's Spark connection decides (docs/design.md "Engines"):

* ``conn_type`` ``spark_connect`` (Airflow's Spark provider, ``SparkConnectHook``): the app runs
  as a **Spark Connect client**, a plain Python process (this interpreter) talking to a
  long-running Connect server: one warm Spark for the whole topology, no JVM per job. The URL
  is the connection's (``sc://host:port/;user_id=...;token=...;use_ssl=...``, built by
  ``SparkConnectHook.get_connection_url``); it reaches the app in ``$SPARK_REMOTE``, never on a
  command line, since it may carry a token.
* anything else (``spark``, or no connection): **spark-submit**, the app is its own driver
  (``SparkSubmitHook``, every deployment mode Airflow's Spark provider has).

Both run the same app command line (:meth:`TsbSparkJobHook.build_application_args
<airflow_provider_tsb.hooks.spark_job.TsbSparkJobHook.build_application_args>`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_provider_tsb.exceptions import SparkJobFailedError
from airflow_provider_tsb.spark.installation import CONNECT_MARKERS

#: connection types of Airflow's Spark provider
CONNECT_CONN_TYPE = "spark_connect"
#: how many lines of a failed client's output its error repeats
ERROR_TAIL_LINES = 25

EngineKind = Literal["submit", "connect"]


def without_connect_markers(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without :data:`CONNECT_MARKERS`: the environment of a process that must be its own
    Spark driver (``spark-submit``, a Spark server) even when started by a Spark Connect client."""
    return {k: v for k, v in env.items() if k not in CONNECT_MARKERS}


@contextlib.contextmanager
def connect_markers_hidden() -> Iterator[None]:
    """Remove :data:`CONNECT_MARKERS` from ``os.environ`` for the block, then put them back: for
    launchers that copy ``os.environ`` themselves (Airflow's ``SparkSubmitHook``)."""
    saved = {k: os.environ.pop(k) for k in CONNECT_MARKERS if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


@dataclass(frozen=True)
class SparkEngine:
    """How a job's app runs.

    Attributes:
        kind: ``submit`` (spark-submit, a driver per job) or ``connect`` (a Spark Connect client).
        conn_id: the Spark connection it came from.
        remote: ``connect``: the server's URL (``sc://...``; may hold a token: keep it out of logs).
        conf: Spark settings of the connection's extra (``conf``; see
            :func:`~airflow_provider_tsb.hooks.submit_conf.connection_conf`).
    """

    kind: EngineKind
    conn_id: str
    remote: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_connection(cls, conn_id: str) -> SparkEngine:
        """The engine of Airflow connection ``conn_id`` (``submit`` when it does not exist, as
        ``SparkSubmitHook`` runs spark-submit with its defaults then).

        Raises:
            ValueError: the connection's ``conf`` extra is malformed, or a ``spark_connect``
                connection has no host.
        """
        from airflow.providers.common.compat.sdk import AirflowNotFoundException, BaseHook

        from airflow_provider_tsb.hooks.submit_conf import connection_conf

        try:
            conn = BaseHook.get_connection(conn_id)
        except AirflowNotFoundException:
            return cls("submit", conn_id)
        conf = connection_conf(dict(conn.extra_dejson), conn_id)
        if conn.conn_type != CONNECT_CONN_TYPE:
            return cls("submit", conn_id, conf=conf)
        if not conn.host:
            raise ValueError(
                f"Spark Connect connection {conn_id!r} has no host; set it to the server, e.g. "
                "host 'sc://127.0.0.1' and port 15002 (a local server: `tsb spark start`)"
            )
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        return cls("connect", conn_id, remote=SparkConnectHook(conn_id).get_connection_url(), conf=conf)

    @property
    def display_remote(self) -> str | None:
        """The server URL without its parameters (tokens), for logs and errors."""
        return self.remote.split(";", 1)[0].rstrip("/") if self.remote else None


class ConnectClient:
    """Run a job's app as a Spark Connect client process: ``python <application> <args>``.

    Called like the operator's spark-submit (:data:`~airflow_provider_tsb.hooks.spark_job.Submit`):
    ``client(application_args, env)`` returns when the app exited 0 and raises otherwise. The
    process is this interpreter (it has the provider, as spark-submit's driver would), in a
    session of its own so :meth:`kill` stops it whole; its output goes to ``logger`` line by line.

    Args:
        application: the app script.
        engine: a ``connect`` engine (its URL goes to ``$SPARK_REMOTE``).
        conf: the job's Spark settings (the connection's under the job's and the operator's),
            passed as ``--conf KEY=VALUE``: runtime settings apply to the job's session.
        job_id: for messages.
        python: the interpreter (default: this one).
        logger: where the app's output goes.
    """

    def __init__(
        self, application: str, engine: SparkEngine, *, conf: Mapping[str, str] | None = None, job_id: str = "",
        python: str = sys.executable, logger: logging.Logger | Any | None = None,
    ) -> None:
        if engine.kind != "connect" or not engine.remote:
            raise ValueError(f"ConnectClient needs a Spark Connect engine, got {engine.kind!r}")
        self.application = application
        self.engine = engine
        self.conf = {**engine.conf, **dict(conf or {})}
        self.job_id = job_id
        self.python = python
        self.log = logger or logging.getLogger("airflow_provider_tsb.hooks")
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def command(self, application_args: Sequence[str]) -> list[str]:
        """The client's command line (no secret in it)."""
        confs = [a for key, value in sorted(self.conf.items()) for a in ("--conf", f"{key}={value}")]
        return [self.python, self.application, *application_args, *confs]

    def __call__(self, application_args: list[str], env: dict[str, str]) -> None:
        """Run the app to its end.

        Raises:
            SparkJobFailedError: the app exited non-zero (names the job, the code and the last
                lines of its output).
        """
        full_env = {**without_connect_markers(os.environ), **env, "SPARK_REMOTE": str(self.engine.remote),
                    "PYTHONUNBUFFERED": "1"}
        full_env.pop("PYSPARK_GATEWAY_PORT", None)
        command = self.command(application_args)
        self.log.info("job %s: Spark Connect client of %s: %s", self.job_id, self.engine.display_remote,
                      " ".join(command))
        tail: deque[str] = deque(maxlen=ERROR_TAIL_LINES)
        with self._lock:
            self._process = subprocess.Popen(
                command, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True, bufsize=1,
            )
        process = self._process
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            self.log.info("%s", line)
        code = process.wait()
        if code != 0:
            raise SparkJobFailedError(
                f"job {self.job_id}: its Spark Connect client ({os.path.basename(self.application)} on "
                f"{self.engine.display_remote}) exited with code {code}; its last lines:\n" + "\n".join(tail)
            )

    def kill(self, timeout_s: float = 10.0) -> None:
        """Stop the client process and its children (SIGTERM, then SIGKILL after ``timeout_s``)."""
        with self._lock:
            process = self._process
        if process is None or process.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(timeout=timeout_s)
                return
            except subprocess.TimeoutExpired:
                continue
