"""A local S3-compatible server for the object-storage tests: moto's server mode.

moto (``moto[server]`` from PyPI) runs in a virtualenv of its own (cached by
:func:`dev.venvs.cached_venv`): it pins ``python-dateutil<3``, which the project's
environment (Airflow) does not share. The server speaks the S3 REST API on 127.0.0.1 with any
credentials, conditional writes (``If-None-Match``) included; :meth:`S3Server.stop` ends it
by its process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from dev.spark_cluster import free_port
from dev.venvs import cached_venv

MOTO = "moto[server]>=5.1,<6"


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def start_s3_server(log_dir: Path, timeout_s: float = 60.0) -> S3Server:
    """Start moto's server (``python -m moto.server``) on a free port; returns when it answers.

    Raises:
        RuntimeError: it did not answer within ``timeout_s`` (names its log).
    """
    venv = cached_venv("moto-server", [MOTO])
    port = free_port()
    log = (log_dir / "moto.log").open("ab")
    argv = [str(venv / "bin" / "python"), "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = S3Server(f"http://127.0.0.1:{port}", proc)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(server.endpoint + "/moto-api/", timeout=2):
                return server
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"moto S3 server did not start; see {log_dir / 'moto.log'}") from None
            time.sleep(0.2)
