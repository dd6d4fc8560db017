"""The owner of a local Spark Connect server: ``tsb spark start --supervise`` keeps it running.

One warm Spark serves every job of a topology (docs/design.md "Scale"), so its death stops them
all: each job's :class:`~airflow_provider_tsb.spark.server_watch.ServerWatch` ends it within its
budget, and Airflow's retry resumes it from its checkpoint once a server answers again. Something
must bring the server back: :class:`Supervisor` checks it every ``poll_s`` seconds
(:meth:`ConnectServer.status <airflow_provider_tsb.spark.connect_server.ConnectServer.status>`:
its process alive and its port open) and, when it is ``stale`` or ``stopped``, stops what is left
of its process group and starts it again on the same port, logging the end of the dead server's
log (where an ``OutOfMemoryError`` shows). A start that fails is retried with a backoff doubling
from 5 s up to 60 s. A service manager (systemd's ``Restart=always``, a Kubernetes Deployment)
is the other owner a deployment can have.

Example::

    supervisor = Supervisor(ConnectServer(home, ConnectServerOptions(port=15002)))
    supervisor.run()          # until supervisor.stop() (SIGTERM or SIGINT on the command line)
"""

from __future__ import annotations

import logging
import threading

from airflow_provider_tsb.exceptions import SparkServerError
from airflow_provider_tsb.spark.connect_server import ConnectServer, ServerStatus

log = logging.getLogger("airflow_provider_tsb.spark")

#: seconds between two failed starts: doubling from the first to the last
RESTART_BACKOFF_S = (5.0, 60.0)


class Supervisor:
    """Keeps :attr:`server` running until :meth:`stop` (see the module doc).

    Args:
        server: the local server to own (its options give the port it restarts on).
        poll_s: seconds between two checks.

    Attributes:
        restarts: how many times the server was started again after it died.
    """

    def __init__(self, server: ConnectServer, poll_s: float = 2.0) -> None:
        self.server = server
        self.poll_s = poll_s
        self.restarts = 0
        self._stop = threading.Event()

    def run(self, *, stop_server: bool = True) -> None:
        """Start the server if needed, then restart it whenever it dies, until :meth:`stop`; then
        stop it too (``stop_server``).

        Raises:
            SparkServerError: the first start failed (Java or pyspark missing, the port taken):
                the supervisor never ran, and says why.
        """
        status = self.server.start()
        log.info("supervising the Spark Connect server at %s (pid %s, log %s)", status.url, status.pid, status.log)
        backoff = RESTART_BACKOFF_S[0]
        try:
            while not self._stop.wait(self.poll_s):
                current = self.server.status()
                if current.state == "running":
                    backoff = RESTART_BACKOFF_S[0]
                    continue
                if not self._restart(current):
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, RESTART_BACKOFF_S[1])
        finally:
            if stop_server:
                self.server.stop()

    def stop(self) -> None:
        """End :meth:`run` at its next check."""
        self._stop.set()

    def _restart(self, dead: ServerStatus) -> bool:
        """Start the server again after ``dead``; whether it answers now."""
        tail = self.server.log_tail(15)
        log.error("the Spark Connect server at %s died (%s); restarting it. The end of its log %s:\n%s",
                  dead.url, dead.message, dead.log, tail)
        self.server.stop(timeout_s=5.0)  # what is left of its process group, and its record
        try:
            status = self.server.start()
        except SparkServerError as exc:
            log.error("the Spark Connect server did not start again: %s", exc)
            return False
        self.restarts += 1
        log.warning("restarted the Spark Connect server at %s (pid %s; restart %d)", status.url, status.pid,
                    self.restarts)
        return True
