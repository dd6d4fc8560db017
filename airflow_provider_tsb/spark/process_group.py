"""A process group this code started, signalled without ever reaching another program's.

A recorded pid outlives its process: once the process is gone and reaped, the kernel hands the
number to a new process (``/proc/sys/kernel/pid_max`` is 32768 on many machines), and a
``killpg`` on the old number then stops whatever group leader got it, such as a PostgreSQL
postmaster (``pg_ctl`` starts it in its own session). :class:`ProcessGroup` keeps the leader's
start time (``/proc/<pid>/stat`` field 22, clock ticks since boot; proc(5)) beside its pid, and
signals the group only while the number still means that process or, with the leader gone,
while members of its group live on (Linux does not reuse a number still in use as a process
group id, so such members are the leader's own children).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessGroup", "start_ticks"]


def start_ticks(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (proc(5) ``stat`` field 22), or
    None when the process does not exist or the system has no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _exists(probe: Callable[[int, int], None], number: int) -> bool:
    """Signal 0 through ``probe`` (``os.kill`` or ``os.killpg``): the process or group exists
    (one owned by another user counts)."""
    try:
        probe(number, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class ProcessGroup:
    """The process group led by ``pgid``, whose leader started at ``ticks`` (None: unknown, as in
    a state file written before this was recorded; the pid alone is trusted then)."""

    pgid: int
    ticks: int | None = None

    @classmethod
    def of(cls, pid: int) -> ProcessGroup:
        """The group led by the running process ``pid`` (a child just started in its own session)."""
        return cls(pid, start_ticks(pid))

    def reused(self) -> bool:
        """True when the number now belongs to another process than the recorded leader."""
        if self.ticks is None:
            return False
        now = start_ticks(self.pgid)
        return now is not None and now != self.ticks

    def leader_alive(self) -> bool:
        """True while the recorded leader runs (a zombie counts as gone)."""
        if self.reused() or not _exists(os.kill, self.pgid):
            return False
        try:
            with open(f"/proc/{self.pgid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return True

    def alive(self) -> bool:
        """True while the leader or any member of its group runs."""
        if self.reused() or not _exists(os.killpg, self.pgid):
            return False
        return any(ProcessGroup(pid).leader_alive() for pid in self._members())

    def signal(self, sig: signal.Signals) -> bool:
        """Send ``sig`` to the group; False (nothing sent) when it is gone or the number was reused."""
        if self.reused():
            return False
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:
            if not self.leader_alive():
                return False
            os.kill(self.pgid, sig)
        return True

    def stop(self, timeout_s: float) -> None:
        """SIGTERM the group, SIGKILL it after ``timeout_s`` seconds, and wait (up to 10 s more)
        until no member runs. Reaps the leader when it is a child of this process."""
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
            if not self.signal(sig):
                return
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                try:
                    os.waitpid(self.pgid, os.WNOHANG)
                except ChildProcessError:
                    pass
                if not self.alive():
                    return
                time.sleep(0.2)

    def _members(self) -> list[int]:
        members = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.pgid:
                        members.append(int(entry.name))
                except OSError:
                    continue
        return members
