"""Start a throwaway PostgreSQL server for the tests (a real server, not a mock).

Uses the Debian ``postgresql`` package's ``initdb`` and ``pg_ctl`` (installed by ``.ci/run``).
When running as root the cluster runs as the ``postgres`` system user, since PostgreSQL refuses
to run as root. Set ``TSB_TEST_PG_URL`` to use an existing server instead.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class PostgresServer:
    """A running throwaway PostgreSQL cluster."""

    data_dir: str
    port: int
    bin_dir: str
    user: str | None
    #: ``pg_ctl -o`` options the server was started with (a restart reuses them)
    options: str = ""

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg2://tsb@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg2://tsb@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="tsb", dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()
        return self.url(name)

    def outage(self, seconds: float) -> None:
        """Stop the server (fast shutdown: every connection is cut), wait ``seconds``, and start
        it again on the same port with the same data: a metastore outage."""
        pg_ctl = os.path.join(self.bin_dir, "pg_ctl")
        _run([pg_ctl, "-D", self.data_dir, "stop", "-m", "fast", "-w"], self.user)
        time.sleep(seconds)
        log = os.path.join(os.path.dirname(self.data_dir), "log")
        _run([pg_ctl, "-D", self.data_dir, "-o", self.options, "-l", log, "-w", "start"], self.user)

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """The server stopped (fast shutdown: every connection cut, new ones refused) for the
        body, then started again on the same port with the same data."""
        _run([os.path.join(self.bin_dir, "pg_ctl"), "-D", self.data_dir, "stop", "-m", "fast", "-w"], self.user)
        try:
            yield
        finally:
            log = os.path.join(os.path.dirname(self.data_dir), "log")
            _run([os.path.join(self.bin_dir, "pg_ctl"), "-D", self.data_dir, "-o", self.options, "-l", log, "-w",
                  "start"], self.user)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Every process of the server stopped with ``SIGSTOP`` for the body, then continued: the
        kernel still accepts connections and ACKs what is sent, and nothing answers."""
        with open(os.path.join(self.data_dir, "postmaster.pid")) as fh:
            postmaster = int(fh.readline())
        pids = [postmaster, *_children(postmaster)]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        _run([os.path.join(self.bin_dir, "pg_ctl"), "-D", self.data_dir, "stop", "-m", "fast"], self.user, check=False)
        shutil.rmtree(os.path.dirname(self.data_dir), ignore_errors=True)


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from ``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def find_bin_dir() -> str:
    """Folder of ``initdb``/``pg_ctl``.

    Raises:
        RuntimeError: PostgreSQL is not installed (says how to install it).
    """
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for folder in candidates:
        if os.path.exists(os.path.join(folder, "initdb")):
            return folder
    initdb = shutil.which("initdb")
    if initdb:
        return os.path.dirname(initdb)
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install them with "
        "'apt-get install -y postgresql' (.ci/run does), or set TSB_TEST_PG_URL to an existing server"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(cmd: list[str], user: str | None, check: bool = True) -> subprocess.CompletedProcess[str]:
    if user:
        cmd = ["runuser", "-u", user, "--", *cmd]
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def start_postgres() -> PostgresServer:
    """initdb + pg_ctl start a cluster on a free loopback port, with user ``tsb`` (trust auth)."""
    bin_dir = find_bin_dir()
    root = tempfile.mkdtemp(prefix="tsb-pg-")
    data_dir = os.path.join(root, "data")
    user = "postgres" if os.geteuid() == 0 else None
    if user:
        shutil.chown(root, user=user)
        os.chmod(root, 0o755)
    port = _free_port()
    try:
        _run([os.path.join(bin_dir, "initdb"), "-D", data_dir, "-A", "trust", "-U", "tsb", "-E", "UTF8"], user)
        opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off " \
               "-c full_page_writes=off -c max_connections=200"
        _run([os.path.join(bin_dir, "pg_ctl"), "-D", data_dir, "-o", opts, "-l", os.path.join(root, "log"), "-w",
              "start"], user)
    except subprocess.CalledProcessError as exc:
        log = ""
        if os.path.exists(os.path.join(root, "log")):
            with open(os.path.join(root, "log")) as fh:
                log = fh.read()[-2000:]
        raise RuntimeError(f"starting PostgreSQL failed: {exc.stderr or exc.stdout}\n{log}") from exc
    return PostgresServer(data_dir, port, bin_dir, user, opts)
