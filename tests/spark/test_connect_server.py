"""The local Spark Connect server: ``tsb spark start | status | stop`` on real processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_tsb.exceptions import SparkServerError
from airflow_provider_tsb.spark.connect_server import (
    ConnectServer,
    ConnectServerOptions,
    default_java_options,
    server_conf,
)
from airflow_provider_tsb.spark.process_group import ProcessGroup, start_ticks
from dev.local_airflow import free_port


def tsb(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_provider_tsb", "spark", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def _group_alive(pgid: int) -> bool:
    """A live (not zombie) process of group ``pgid``, within 10 s (pid 1 reaps orphans in its time)."""
    deadline = time.monotonic() + 10
    while True:
        live = []
        for entry in Path("/proc").iterdir():
            try:
                stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[-1].split() if stat else []
            if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
                live.append(entry.name)
        if not live or time.monotonic() > deadline:
            return bool(live)
        time.sleep(0.2)


@pytest.mark.spark
def test_start_status_health_idempotence_and_stop(tmp_path: Path) -> None:
    """One real server: the CLI starts it, a client runs a query, a second start finds it,
    status agrees, stop leaves no process of its group."""
    from pyspark.sql import SparkSession

    home, port = tmp_path / "spark", free_port()
    started = tsb("start", "--home", str(home), "--port", str(port), "--master", "local[1]")
    assert started.returncode == 0, started.stderr[-2000:]
    assert f"sc://127.0.0.1:{port}" in started.stdout
    status = json.loads(tsb("status", "--home", str(home), "--format", "json").stdout)
    assert status["state"] == "running" and status["port"] == port and status["master"] == "local[1]"
    pid = status["pid"]
    jvm_args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    chosen = default_java_options("local[1]").split()  # the serial collector on this machine of <= 2 CPUs
    assert all(option in jvm_args for option in chosen), (chosen, jvm_args)
    assert ("-XX:+UseSerialGC" in jvm_args) == ((os.cpu_count() or 1) <= 2)

    client = SparkSession.builder.remote(status["url"]).create()
    assert client.range(10).count() == 10
    client.stop()
    again = ConnectServer(home, ConnectServerOptions(port=free_port())).start()  # another port asked: same server
    assert again.pid == pid and again.port == port and again.message.startswith("already running")

    stopped = tsb("stop", "--home", str(home))
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert not _group_alive(pid)
    after = tsb("status", "--home", str(home))
    assert after.returncode == 1 and after.stdout.startswith("stopped")


def test_a_taken_port_is_named(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = tsb("start", "--home", str(tmp_path), "--port", str(port))
    assert out.returncode == 2
    assert f"port {port} on 127.0.0.1 is in use by another process" in out.stderr and "--port" in out.stderr
    assert not (tmp_path / "server.json").exists()


def test_missing_java_is_named(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv's tools, no java
    out = tsb("start", "--home", str(tmp_path), "--port", str(free_port()), env=env)
    assert out.returncode == 2, out.stderr
    assert "Spark needs Java 17+" in out.stderr and "openjdk-17-jre-headless" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_stale_state_file_is_reported_and_replaced(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "server.json").write_text(json.dumps({"pid": dead.pid, "port": free_port(), "url": "sc://x:1",
                                                       "master": "local[1]", "log": "l"}))
    server = ConnectServer(tmp_path)
    assert server.status().state == "stale"
    with pytest.raises(SparkServerError, match="is in use by another process"):
        with socket.socket() as busy:  # start forgets the stale file, then refuses the taken port
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            ConnectServer(tmp_path, ConnectServerOptions(port=busy.getsockname()[1])).start()
    assert server.status().state == "stopped"


def test_stop_leaves_alone_another_program_that_got_the_recorded_pid(tmp_path: Path) -> None:
    """The server died and its pid went to another group leader (a PostgreSQL postmaster, say):
    ``tsb spark stop`` must not signal it. Simulated by a record of a running session leader with
    another start time than its own, as the number's reuse leaves it."""
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        ticks = start_ticks(other.pid)
        assert ticks is not None
        (tmp_path / "server.json").write_text(json.dumps({
            "pid": other.pid, "start_ticks": ticks - 1, "port": free_port(), "url": "sc://x:1", "master": "local[1]",
            "log": "l"}))
        server = ConnectServer(tmp_path)
        status = server.status()
        assert status.state == "stale" and "now belongs to another process" in status.message
        assert server.stop(timeout_s=1) is False
        time.sleep(0.5)
        assert other.poll() is None  # still running: not signalled
        assert server.status().state == "stopped"  # the record is forgotten
        # the same record with the true start time is the server's own group: stopped
        ProcessGroup(other.pid, ticks).stop(timeout_s=5)
        assert other.wait(timeout=5) in (-15, 0)  # SIGTERM ended it (0: stop reaped it first)
    finally:
        other.kill()
        other.wait()


def test_bad_conf_is_a_usage_error(tmp_path: Path) -> None:
    out = tsb("start", "--home", str(tmp_path), "--conf", "executor.memory=1g")
    assert out.returncode == 2 and "--conf takes a Spark property" in out.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--port", "99999"), "--port 99999: a TCP port is a number from 1 to 65535"),
    (("--driver-memory", "12zz"), "--driver-memory '12zz': the server's heap is a JVM memory size"),
    (("--timeout", "0"), "--timeout 0.0: a number of seconds > 0"),
    (("--driver-java-options", "UseG1GC"), "--driver-java-options 'UseG1GC': Java options are words that start with"),
])
def test_bad_options_are_named_before_a_jvm_starts(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    out = tsb("start", "--home", str(tmp_path), *args)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "server.log").exists()


@pytest.mark.spark
def test_a_failed_start_names_its_cause_from_its_own_log_lines(tmp_path: Path) -> None:
    (tmp_path / "server.log").write_text("a line of an earlier start\n")
    out = tsb("start", "--home", str(tmp_path), "--port", str(free_port()), "--master", "bogus://x")
    assert out.returncode == 2, out.stderr
    first = out.stderr.splitlines()[0]
    assert "exited with code 1 before it was ready: " in first, out.stderr
    assert "SparkException: Master must either be yarn or start with spark, k8s, or local" in first, out.stderr
    assert "a line of an earlier start" not in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "server.json").exists()


def test_the_server_jvm_gets_the_serial_collector_on_a_small_local_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default Java options follow the machine and the master; given options, and a collector
    chosen in the conf's own Java options, win (the JVM refuses two collectors)."""
    small = "-XX:+UseSerialGC -Xms64m -XX:MinHeapFreeRatio=20 -XX:MaxHeapFreeRatio=40"
    assert default_java_options("local[*]", cpus=2) == small
    assert default_java_options("local", cpus=1) == small
    assert default_java_options("local[*]", cpus=8) == ""
    assert default_java_options("spark://spark-master:7077", cpus=2) == ""  # the work runs on executors

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    java, oom = "spark.driver.extraJavaOptions", "-XX:+ExitOnOutOfMemoryError"  # every server exits on an OOM
    assert server_conf(ConnectServerOptions())[java] == f"{small} {oom}"
    assert server_conf(ConnectServerOptions(conf={java: "-Dx=1"}))[java] == f"{small} {oom} -Dx=1"
    assert server_conf(ConnectServerOptions(conf={java: "-XX:+UseZGC -Dx=1"}))[java] == f"{oom} -XX:+UseZGC -Dx=1"
    assert server_conf(ConnectServerOptions(driver_java_options=""))[java] == oom
    given = ConnectServerOptions(driver_java_options="-XX:+UseG1GC -XX:MaxGCPauseMillis=50", conf={java: "-Dx=1"})
    assert server_conf(given)[java] == f"-XX:+UseG1GC -XX:MaxGCPauseMillis=50 {oom} -Dx=1"
    own = ConnectServerOptions(conf={java: "-XX:OnOutOfMemoryError=/bin/true"})  # handling of its own: kept
    assert server_conf(own)[java] == f"{small} -XX:OnOutOfMemoryError=/bin/true"
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert server_conf(ConnectServerOptions())[java] == oom
