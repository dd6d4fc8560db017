"""A Connect client job's watch over its Spark Connect server: a dead server ends the job in
seconds, with a message, instead of leaving it silent for pyspark's ten minutes of retries.

A job on the ``connect`` engine holds its barrier protocol in this process, but every query runs
on the server. When the server dies (a SIGKILL, a heap exhausted by another job) pyspark's
default retry policy retries each request for about ten minutes (Spark docs, "Spark Connect
Overview": ``DefaultPolicy``), and a job that is idle, waiting for its input or inside a
micro-batch says nothing meanwhile. :class:`ServerWatch` is a daemon thread that opens one TCP
connection to the server every :attr:`ServerWatchOptions.interval_s` seconds (a local check,
no session, no query). When the server has refused or ignored connections for
:attr:`ServerWatchOptions.budget_s` seconds, or a local server's record shows another process
(it was restarted: this job's session is gone with the old one), the watch logs one line
naming the server URL and its log, and ends the process with exit code
:data:`SERVER_LOST_EXIT`. Airflow's retry of the task then resumes the job from its checkpoint
and the barriers it committed (the txn of each commit discards a replay), once the server's
owner has restarted it (``tsb spark start --supervise``, :mod:`~airflow_provider_tsb.spark.supervisor`).

The process ends with ``os._exit``: its main thread may be blocked inside a gRPC call whose
retries no exception would reach. Nothing is lost by that: a barrier is committed or not, and
the next attempt fences this one (FLIP-276 "Timestamp Barrier": a failed epoch is replayed).

Example::

    watch = ServerWatch("sc://127.0.0.1:15002", job_id="flights_daily")
    watch.start()
    ...
    watch.stop()
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_tsb.spark.session import connect_address

log = logging.getLogger("airflow_provider_tsb.spark")

#: bytes of the end of a local server's log searched for an OutOfMemoryError
OOM_TAIL_BYTES = 256 * 1024

#: exit status of a job whose Spark Connect server was lost (``EX_TEMPFAIL``: retry it)
SERVER_LOST_EXIT = 75
#: ``$TSB_SPARK_WATCH_SECONDS``: the budget of :class:`ServerWatchOptions` (``0`` turns the watch off)
WATCH_ENV = "TSB_SPARK_WATCH_SECONDS"


@dataclass(frozen=True)
class ServerWatchOptions:
    """How :class:`ServerWatch` checks its server.

    Attributes:
        interval_s: seconds between two checks.
        budget_s: seconds the server may be unreachable before the job ends (a GC pause or a
            restart of the network stays under it).
        connect_timeout_s: seconds one check waits for the TCP connection.
    """

    interval_s: float = 3.0
    budget_s: float = 20.0
    connect_timeout_s: float = 2.0

    @classmethod
    def from_env(cls) -> ServerWatchOptions | None:
        """Options with ``$TSB_SPARK_WATCH_SECONDS`` as the budget; ``None`` when it is ``0``.

        Raises:
            OutOfRangeError: the variable is not a number of seconds >= 0.
        """
        from airflow_provider_tsb.spark.session import env_seconds

        budget = env_seconds(WATCH_ENV, cls.budget_s, "the seconds a Spark Connect server may be unreachable "
                             "before the job stops (e.g. 20), or 0 to turn the watch off")
        return None if budget == 0 else cls(interval_s=min(3.0, budget / 3), budget_s=budget)


def local_server_record(url: str, home: Path | None = None) -> dict | None:
    """The ``server.json`` of the local server at ``url`` (``tsb spark start``'s, in ``home`` or
    the default state folder), or ``None`` when it is not a local one recorded there."""
    from airflow_provider_tsb.spark.connect_server import default_home

    path = (home or default_home()) / "server.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if connect_address(str(record.get("url", ""))) != connect_address(url):
        return None
    return record


class ServerWatch:
    """The daemon thread of the module doc, for the job ``job_id`` on the server at ``url``.

    Args:
        url: the Spark Connect URL (``sc://host:port``).
        job_id: the job, for the message.
        options: how to check (default :class:`ServerWatchOptions`).
        on_lost: what to do with the message once the server is lost (default: log it and end
            the process with :data:`SERVER_LOST_EXIT`).
        home: the state folder of a local server (default ``tsb spark start``'s).
    """

    def __init__(
        self, url: str, job_id: str, options: ServerWatchOptions | None = None, *,
        on_lost: Callable[[str], None] | None = None, home: Path | None = None,
    ) -> None:
        self.url, self.job_id = url, job_id
        self.options = options or ServerWatchOptions()
        self.address = connect_address(url)
        self._home = home
        self._record = local_server_record(url, home)
        self._log_start = _size(self._record.get("log")) if self._record else 0  # this job's part of it
        self._on_lost = on_lost or _end_process
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tsb-server-watch-{job_id}", daemon=True)

    @property
    def server_log(self) -> str:
        """The server's log file when it is a local one, else where to look."""
        if self._record is not None and self._record.get("log"):
            return str(self._record["log"])
        return "the Spark Connect server's own log (its endpoint's owner has it)"

    def start(self) -> ServerWatch:
        """Start watching; returns ``self``."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the job ends normally)."""
        self._stop.set()

    def check(self) -> str | None:
        """One check: ``None`` when the server answers as the one this job started on, else why not."""
        if self._record is not None:
            now = local_server_record(self.url, self._home)
            if now is not None and now.get("pid") != self._record.get("pid"):
                return (f"was restarted (pid {self._record.get('pid')} -> {now.get('pid')}): this job's Spark "
                        "Connect session ended with the old server")
        try:
            with socket.create_connection(self.address, timeout=self.options.connect_timeout_s):
                return None
        except OSError as exc:
            return f"refuses connections ({exc})"

    def _run(self) -> None:
        failing_since: float | None = None
        while not self._stop.wait(self.options.interval_s):
            problem = self.check()
            if problem is None:
                failing_since = None
                continue
            if problem.startswith("was restarted"):
                self._lost(problem)
                return
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since >= self.options.budget_s:
                self._lost(f"{problem} for {time.monotonic() - failing_since:.0f} s")
                return

    def out_of_memory(self) -> str:
        """`` : it ran out of memory (...)`` when the local server logged an OutOfMemoryError since
        this watch started (the server exits on one: ``-XX:+ExitOnOutOfMemoryError``), else ``""``."""
        path = self._record.get("log") if self._record else None
        if not path:
            return ""
        try:
            with open(path, "rb") as handle:
                handle.seek(max(self._log_start, _size(path) - OOM_TAIL_BYTES))
                tail = handle.read().decode(errors="replace")
        except OSError:
            return ""
        found = re.findall(r"java\.lang\.OutOfMemoryError: [^\n\r]*", tail)
        if not found:
            return ""
        heap = (self._record or {}).get("driver_memory") or "its spark.driver.memory"
        return (f": it ran out of memory ({found[-1].strip()}, heap {heap}) while a query ran; a job that needs more "
                "memory gets a server of its own or a bigger heap (`tsb spark start --driver-memory`), see "
                "docs/engines.md \"One job's memory\"")

    def diagnose(self) -> str | None:
        """The message of a lost server, checked now (a job's query failed: was it the server?),
        or ``None`` while the server answers and logged no OutOfMemoryError."""
        problem, oom = self.check(), self.out_of_memory()
        if problem is None and not oom:
            return None
        return self._message(problem or "stopped serving this job's query")

    def _message(self, problem: str) -> str:
        return (
            f"job {self.job_id}: the Spark Connect server {self.url} {problem}{self.out_of_memory()}; "
            f"its log: {self.server_log}. "
            f"The job stops (exit {SERVER_LOST_EXIT}) so that its retry resumes it from its checkpoint once the "
            "server is back: restart it (`tsb spark start`; `tsb spark start --supervise` restarts it by itself)"
        )

    def _lost(self, problem: str) -> None:
        if not self._stop.is_set():
            self._on_lost(self._message(problem))


def _size(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def _end_process(message: str) -> None:
    """Log ``message`` and end the process now (see the module doc)."""
    log.error("%s", message)
    print(message, file=sys.stderr, flush=True)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(SERVER_LOST_EXIT)
