"""Named crash points for exactly-once tests.

``TSB_KILL_AT=<point>[:<job>:<barrier>]`` makes the process SIGKILL itself when it reaches
``point`` (for any job/barrier, or only the given ones). Points:

* ``while_writing``: the Spark write of a sink has started and some files may exist, the
  staged-file manifest has not been built (files are orphans of a failed attempt);
* ``after_files``: all files written and PROCESSED reported, before the Delta commit;
* ``after_commit``: the Delta commit is done, before WRITTEN is reported.

With ``TSB_KILL_ONCE_DIR=<dir>`` each (point, job, barrier) kills once: a marker file is made
in ``<dir>`` before dying, so a retried process (e.g. Airflow's retry of the task) goes on.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

KILL_POINTS = ("while_writing", "after_files", "after_commit")
ENV_VAR = "TSB_KILL_AT"
ONCE_ENV_VAR = "TSB_KILL_ONCE_DIR"


def kill_requested(point: str, job_id: str, barrier: int) -> bool:
    """Whether ``TSB_KILL_AT`` asks to die at ``point`` for this job and barrier."""
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


def maybe_kill(point: str, job_id: str, barrier: int) -> None:
    """SIGKILL this process if ``TSB_KILL_AT`` selects ``point`` for ``job_id``/``barrier``."""
    if kill_requested(point, job_id, barrier):
        die()


def kill_when(condition: Callable[[], bool], interval_s: float = 0.005) -> threading.Event:
    """Start a daemon thread that SIGKILLs the process as soon as ``condition()`` is true.

    Returns an event; setting it stops the watcher. Used for ``while_writing``: the condition
    is "a data file has appeared in the attempt directory".
    """
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
