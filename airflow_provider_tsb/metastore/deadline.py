"""A deadline on every PostgreSQL round trip of the metastore, kept by the client.

A database that stops answering without closing its sockets (a frozen server, ``SIGSTOP``; a
VM paused; a network partition behind a NAT that still ACKs) leaves a libpq call blocked in
``recv`` for as long as the kernel keeps the connection, which is hours. PostgreSQL's own
``statement_timeout`` cannot help, since the server is the part that stopped, and TCP
keepalives or ``tcp_user_timeout`` see nothing wrong while the peer's kernel ACKs. So the
client keeps the deadline itself: each statement, commit, rollback and ping is armed with a
:class:`CallDeadline` before it is sent, and a watchdog thread that finds it still running past
its deadline shuts the connection's socket down (``shutdown(SHUT_RDWR)``: the blocked ``recv``
returns at once, nothing is closed under the driver). The driver then fails the call with
"server closed the connection unexpectedly", SQLAlchemy invalidates the connection, and
:mod:`.retry` retries it as any dropped connection, within its budget.

The deadline (``$TSB_METASTORE_CALL_SECONDS``, default :data:`DEFAULT_CALL_SECONDS`) is
PostgreSQL's ``statement_timeout`` plus :data:`GRACE_S`: a live server cancels a slow statement
itself, with its own message, before the client gives up on it.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, event

from airflow_provider_tsb.exceptions import OutOfRangeError

log = logging.getLogger("airflow_provider_tsb.metastore")

#: environment variable: seconds one metastore statement may take (PostgreSQL ``statement_timeout``)
CALL_SECONDS_ENV = "TSB_METASTORE_CALL_SECONDS"
#: default statement budget, seconds (a metastore statement takes milliseconds)
DEFAULT_CALL_SECONDS = 30.0
#: seconds the client waits past the server's own statement timeout before cutting the socket
GRACE_S = 5.0
#: seconds between two looks of the watchdog
TICK_S = 0.5


def call_seconds() -> float:
    """``$TSB_METASTORE_CALL_SECONDS``, else :data:`DEFAULT_CALL_SECONDS`.

    Raises:
        OutOfRangeError: the variable is not a number of seconds from 1 to 3600 (names it).
    """
    raw = os.environ.get(CALL_SECONDS_ENV, "")
    if raw == "":
        return DEFAULT_CALL_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 1 <= seconds <= 3600:
        raise OutOfRangeError(
            f"{CALL_SECONDS_ENV}={raw!r}: give one metastore statement's budget in seconds, 1 to 3600"
        )
    return seconds


class CallDeadline:
    """The watchdog of one engine's connections: :meth:`arm` before a round trip, :meth:`disarm`
    after it; a round trip still running ``seconds`` after it was armed has its socket shut down.

    Args:
        seconds: the deadline of one round trip.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._armed: dict[int, tuple[float, int, str]] = {}  # token: (deadline, socket fd, what)
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: round trips cut so far (for tests and logs)
        self.cut = 0

    def arm(self, fileno: int, what: str) -> int:
        """Start the deadline of a round trip on the socket ``fileno``; the token to disarm it."""
        token = next(self._tokens)
        with self._lock:
            self._armed[token] = (time.monotonic() + self.seconds, fileno, what)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="tsb-metastore-deadline", daemon=True)
                self._thread.start()
        return token

    def disarm(self, token: int | None) -> None:
        """End the deadline of ``token`` (``None``: nothing was armed)."""
        if token is not None:
            with self._lock:
                self._armed.pop(token, None)

    def _watch(self) -> None:
        while True:
            time.sleep(TICK_S)
            now = time.monotonic()
            with self._lock:
                due = [(t, fd, what) for t, (end, fd, what) in self._armed.items() if end <= now]
                for token, _fd, _what in due:
                    self._armed.pop(token)
            for _token, fd, what in due:
                self._cut(fd, what)

    def _cut(self, fileno: int, what: str) -> None:
        log.warning("metastore %s got no answer in %.0f s: closing its connection (%s)", what, self.seconds,
                    CALL_SECONDS_ENV)
        try:
            with socket.socket(fileno=os.dup(fileno)) as sock:  # a duplicate: the driver's fd stays its own
                sock.shutdown(socket.SHUT_RDWR)
            self.cut += 1
        except OSError:  # already closed: the call ended meanwhile
            pass


def _fileno(dbapi_connection: Any) -> int | None:
    try:
        return int(dbapi_connection.fileno())
    except Exception:  # closed, or a driver without one
        return None


def install_call_deadline(engine: Engine, deadline: CallDeadline) -> None:
    """Arm ``deadline`` around every statement, commit, rollback and ping of ``engine``'s
    PostgreSQL connections (module doc)."""

    @event.listens_for(engine, "before_cursor_execute")
    def _before(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        fd = _fileno(conn.connection.dbapi_connection)
        if fd is not None:
            conn.info["tsb_deadline"] = deadline.arm(fd, "statement")

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn: Any, *_args: Any) -> None:
        deadline.disarm(conn.info.pop("tsb_deadline", None))

    @event.listens_for(engine, "handle_error")
    def _error(context: Any) -> None:
        if context.connection is not None:
            deadline.disarm(context.connection.info.pop("tsb_deadline", None))

    dialect = engine.dialect
    for name in ("do_commit", "do_rollback", "do_ping"):
        setattr(dialect, name, _armed(getattr(dialect, name), deadline, name[3:]))


def _armed(call: Callable[[Any], Any], deadline: CallDeadline, what: str) -> Callable[[Any], Any]:
    def run(dbapi_connection: Any) -> Any:
        fd = _fileno(dbapi_connection)
        token = deadline.arm(fd, what) if fd is not None else None
        try:
            return call(dbapi_connection)
        finally:
            deadline.disarm(token)

    return run
