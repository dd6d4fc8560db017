"""TEST FACILITY: named crash points for the exactly-once tests. Off unless ``TSB_KILL_AT`` is set.

This module is not part of the commit protocol. :mod:`airflow_provider_tsb.spark.barrier_commit`
and :mod:`airflow_provider_tsb.spark.outputs` call it at three places so that tests
(``tests/spark/test_crash.py``, ``tests/e2e/test_flights_streaming.py``) can SIGKILL a
real Spark driver at the worst moments and check that a rerun commits every barrier exactly
once. Without ``TSB_KILL_AT`` in the driver's environment every call returns at once and does
nothing; never set it in production.

Switch: ``TSB_KILL_AT=<point>[:<job>:<barrier>]`` makes the process SIGKILL itself (no cleanup,
no ``atexit``: like a lost machine) when it reaches ``point``, for any job and barrier or only
the given ones. Points (:data:`KILL_POINTS`):

* ``while_writing``: the Spark write of a sink has started and some files may exist, the
  staged-file manifest has not been built (files are orphans of a failed attempt);
* ``after_files``: all files written and PROCESSED reported, before the Delta commit;
* ``after_commit``: the Delta commit is done, before WRITTEN is reported.

With ``TSB_KILL_ONCE_DIR=<dir>`` each (point, job, barrier) kills once: a marker file is made
in ``<dir>`` before dying, so a retried process (e.g. Airflow's retry of the task) goes on.

Entry points for the code under test: :func:`crash_point` (an instant) and
:func:`crash_point_during` (a block, for ``while_writing``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

KILL_POINTS = ("while_writing", "after_files", "after_commit")
ENV_VAR = "TSB_KILL_AT"
ONCE_ENV_VAR = "TSB_KILL_ONCE_DIR"


def kill_requested(point: str, job_id: str, barrier: int) -> bool:
    """Whether ``TSB_KILL_AT`` asks to die at ``point`` for this job and barrier.

    With ``TSB_KILL_ONCE_DIR``, a ``True`` answer leaves the marker that makes later calls for
    the same (point, job, barrier) answer ``False``.
    """
    spec = os.environ.get(ENV_VAR, "")
    if not spec:
        return False
    parts = spec.split(":")
    if parts[0] != point:
        return False
    if len(parts) >= 2 and parts[1] and parts[1] != job_id:
        return False
    if len(parts) >= 3 and parts[2] and int(parts[2]) != barrier:
        return False
    once_dir = os.environ.get(ONCE_ENV_VAR)
    if once_dir:
        marker = os.path.join(once_dir, f"{point}-{job_id}-{barrier}")
        if os.path.exists(marker):
            return False
        os.makedirs(once_dir, exist_ok=True)
        with open(marker, "w") as handle:
            handle.write(str(os.getpid()))
    return True


def die() -> None:
    """SIGKILL this process (no cleanup, no atexit, like a lost machine)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def crash_point(point: str, job_id: str, barrier: int) -> None:
    """SIGKILL this process now if ``TSB_KILL_AT`` selects ``point`` for ``job_id``/``barrier``."""
    if kill_requested(point, job_id, barrier):
        die()


@contextmanager
def crash_point_during(point: str, job_id: str, barrier: int, started: Callable[[], bool]) -> Iterator[None]:
    """A crash point inside a block: when ``TSB_KILL_AT`` selects ``point``, SIGKILL this process
    as soon as ``started()`` is true while the block runs (polled every 5 ms by a daemon
    thread), else when the block ends (:func:`crash_point`)."""
    if not kill_requested(point, job_id, barrier):
        yield
        return
    _kill_when(started)
    yield
    crash_point(point, job_id, barrier)


def _kill_when(condition: Callable[[], bool], interval_s: float = 0.005) -> threading.Event:
    """Start a daemon thread that SIGKILLs the process as soon as ``condition()`` is true;
    setting the returned event stops it."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                if condition():
                    die()
            except OSError:
                pass
            stop.wait(interval_s)

    threading.Thread(target=watch, name="tsb-kill-watch", daemon=True).start()
    return stop
