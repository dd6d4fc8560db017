"""Run a real Apache Airflow 3 deployment in the background (``make demo`` and the Airflow tests).

Development and test material, not part of the provider: its users have throwaway passwords.

The harness starts the four Airflow 3 components as separate processes, exactly as a
deployment does: ``scheduler`` (LocalExecutor), ``dag-processor``, ``triggerer`` and
``api-server``. Every component gets its own process group, so :meth:`AirflowHandle.stop`
takes down workers and supervisors too. The handle's REST calls (DAGs, runs, task logs,
assets) are in :mod:`dev.airflow_api`.

Defaults: a temporary ``AIRFLOW_HOME``, a SQLite metadata DB (Airflow 3's LocalExecutor works
on SQLite; any SQLAlchemy URL, e.g. PostgreSQL from ``dev/pg.py``, can be given instead), the
SimpleAuthManager with the users ``admin``/``admin`` (role ADMIN) and ``viewer``/``viewer``
(role VIEWER), free ports on 127.0.0.1, fast DAG-folder rescans, and no example DAGs.

Usage::

    from dev.local_airflow import start_airflow

    af = start_airflow(dags_folder=Path("dags"))
    try:
        af.wait_for_dag("my_dag")
        run = af.run_dag("my_dag", conf={"x": 1}, expect="success", timeout=120)
        print(af.task_instances("my_dag", run["dag_run_id"]))
    finally:
        af.stop()

The migrated SQLite database is cached (keyed by Airflow version) in ``TSB_AIRFLOW_CACHE``
(default ``/tmp/tsb-airflow-cache``), so only the first start pays for ``airflow db migrate``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from airflow_provider_tsb.spark.process_group import ProcessGroup
from dev.airflow_api import TERMINAL_RUN_STATES, AirflowApi, AirflowHarnessError  # noqa: F401 (re-exported)

REPO_ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
AIRFLOW_BIN = str(VENV_BIN / "airflow")

ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin"  # throwaway test credential
VIEWER_USER = "viewer"
VIEWER_PASSWORD = "viewer"  # throwaway test credential

COMPONENTS: tuple[str, ...] = ("scheduler", "dag-processor", "triggerer", "api-server")

PLUGIN_SHIM_NAME = "tsb_plugin_shim.py"
PLUGIN_SHIM_SOURCE = '''"""Load the TSB plugin from the source tree (test harness shim; the real
installation registers it through the ``airflow.plugins`` entry point)."""

from airflow_provider_tsb.plugins.tsb_plugin import TsbPlugin

__all__ = ["TsbPlugin"]
'''


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _airflow_version() -> str:
    from importlib.metadata import version

    return version("apache-airflow-core")


def _cache_dir() -> Path:
    path = Path(os.environ.get("TSB_AIRFLOW_CACHE", "/tmp/tsb-airflow-cache"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _project_installed() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("airflow-provider-tsb")
    except PackageNotFoundError:
        return False
    return True


def _tsb_plugin_entry_point_installed() -> bool:
    """True when the ``airflow.plugins`` entry point of this project is installed."""
    from importlib.metadata import entry_points

    return any(ep.value.startswith("airflow_provider_tsb.") for ep in entry_points(group="airflow.plugins"))


@dataclass
class AirflowHandle(AirflowApi):
    """A running Airflow deployment. Create it with :func:`start_airflow`.

    Lifecycle, HTTP basics and DAG files here; DAGs, runs, logs and assets through the REST API
    come from :class:`~dev.airflow_api.AirflowApi`.
    """

    home: Path
    dags_folder: Path
    plugins_folder: Path
    base_url: str
    env: dict[str, str]
    username: str = ADMIN_USER
    password: str = ADMIN_PASSWORD
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    #: each component's process group, with its leader's start time (never signal a reused pid)
    groups: dict[str, ProcessGroup] = field(default_factory=dict)
    startup_seconds: float = 0.0
    owns_home: bool = False
    _token: str | None = None
    _client: httpx.Client | None = None

    # ------------------------------------------------------------------ lifecycle
    def stop(self, timeout: float = 5.0) -> None:
        """Stop every component: SIGTERM to each process group, then SIGKILL to what is left after
        ``timeout`` seconds (an idle component exits within about 3 s; a scheduler waiting for
        running tasks would take 20 s or more, and the tasks are killed anyway)."""
        try:
            for group in self.groups.values():
                group.signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for proc in self.processes.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(0.1, deadline - time.monotonic()))
        finally:
            # Also on Ctrl-C: kill leftovers in each group (task supervisors, LocalExecutor workers).
            for name, proc in self.processes.items():
                self.groups[name].signal(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
            self.processes.clear()
            self.groups.clear()
            if self._client is not None:
                self._client.close()
                self._client = None
            if self.owns_home:
                shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> AirflowHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check_alive(self) -> None:
        """Raise if a component process has exited."""
        dead = {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}
        if dead:
            details = "\n".join(f"--- {n} (exit {rc})\n{self.component_log(n)}" for n, rc in dead.items())
            raise AirflowHarnessError(f"Airflow component(s) died: {dead}\n{details}")

    def component_log(self, component: str, lines: int = 60) -> str:
        """Last ``lines`` lines of a component's stdout/stderr."""
        path = self.home / "component-logs" / f"{component}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------------ HTTP
    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(base_url=self.base_url, timeout=60.0)
        return self._client

    def get_token(self, username: str | None = None, password: str | None = None) -> str:
        """JWT from ``POST /auth/token`` (SimpleAuthManager). The admin token is cached."""
        user = username or self.username
        pwd = password or self.password
        if user == self.username and self._token is not None:
            return self._token
        resp = self.client.post("/auth/token", json={"username": user, "password": pwd})
        if resp.status_code != 201:
            raise AirflowHarnessError(f"POST /auth/token for {user!r}: {resp.status_code} {resp.text}")
        token = str(resp.json()["access_token"])
        if user == self.username:
            self._token = token
        return token

    def auth_headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.get_token()}"}

    def request(self, method: str, path: str, *, token: str | None = None, **kwargs: Any) -> httpx.Response:
        """An authenticated request (admin token unless ``token`` is given)."""
        headers = {**self.auth_headers(token), **kwargs.pop("headers", {})}
        return self.client.request(method, path, headers=headers, **kwargs)

    def api(self, method: str, path: str, *, expect: int | Sequence[int] = (200,), **kwargs: Any) -> Any:
        """Authenticated call to ``/api/v2`` + path; returns the decoded JSON (or None)."""
        expected = (expect,) if isinstance(expect, int) else tuple(expect)
        resp = self.request(method, f"/api/v2{path}", **kwargs)
        if resp.status_code not in expected:
            raise AirflowHarnessError(f"{method} /api/v2{path} -> {resp.status_code}: {resp.text[:2000]}")
        if not resp.content:
            return None
        return resp.json()

    # ------------------------------------------------------------------ DAG files
    def add_dag_file(self, name: str, source: str | Path) -> Path:
        """Write (or copy) a DAG file into the deployment's dags folder; returns its path."""
        dest = self.dags_folder / name
        text = Path(source).read_text() if isinstance(source, Path) else source
        tmp = dest.with_suffix(dest.suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, dest)  # atomic: the dag-processor never sees a half-written file
        return dest


def build_env(
    home: Path,
    dags_folder: Path,
    plugins_folder: Path,
    port: int,
    sql_alchemy_conn: str,
    env_extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment every Airflow component (and every task) runs with."""
    from cryptography.fernet import Fernet

    base = f"http://127.0.0.1:{port}"
    # The repo root goes on PYTHONPATH only when the project is not installed: with an editable
    # install, the repo's *.egg-info on sys.path makes importlib.metadata see the distribution
    # twice, and Airflow then loads the ``airflow.plugins`` entry point twice ("already registered").
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _project_installed():
        paths = [p for p in inherited if Path(p).resolve() != REPO_ROOT]
    else:
        paths = [str(REPO_ROOT), *inherited]
    pythonpath = os.pathsep.join(paths)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "PYTHONPATH": pythonpath,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin,{VIEWER_USER}:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "simple_auth_passwords.json"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_alchemy_conn,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"{base}/",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API__EXPOSE_STACKTRACE": "True",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "1",
            "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "1",
            # a changed file is parsed again at once (file_parsing_sort_mode modified_time); the
            # others every 30 s: re-parsing the examples every 5 s cost an idle deployment 11 % of a core
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "600",
            # a loaded machine (2 cores, Spark running) must not turn a slow parse into an
            # import error, which marks the file's DAGs stale ("0 Dags", "Deactivated"):
            # docs/airflow.md, "DAG parsing under load"
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
            "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
            "AIRFLOW__DAG_PROCESSOR__STALE_DAG_THRESHOLD": "600",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
            "NO_COLOR": "1",
        }
    )
    if env_extra:
        env.update(env_extra)
    return env


def _prepare_sqlite_db(db_path: Path, env: Mapping[str, str]) -> None:
    """Copy a cached migrated DB (or migrate once and cache it)."""
    template = _cache_dir() / f"airflow-{_airflow_version()}.sqlite"
    if not template.exists():
        scratch = Path(tempfile.mkdtemp(prefix="tsb-af-migrate-"))
        try:
            scratch_db = scratch / "airflow.db"
            migrate_env = {
                **env,
                "AIRFLOW_HOME": str(scratch),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{scratch_db}",
            }
            _run_migrate(migrate_env, scratch / "migrate.log")
            tmp = template.with_suffix(f".{os.getpid()}.tmp")
            shutil.copyfile(scratch_db, tmp)
            os.replace(tmp, template)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    shutil.copyfile(template, db_path)


def _run_migrate(env: Mapping[str, str], log_path: Path) -> None:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        proc = subprocess.run(
            [AIRFLOW_BIN, "db", "migrate"], env=dict(env), stdout=log, stderr=subprocess.STDOUT, check=False
        )
    if proc.returncode != 0:
        raise AirflowHarnessError(f"airflow db migrate failed:\n{log_path.read_text()[-4000:]}")


def start_airflow(
    dags_folder: Path | None = None,
    *,
    home: Path | None = None,
    env_extra: Mapping[str, str] | None = None,
    sql_alchemy_conn: str | None = None,
    plugins_folder: Path | None = None,
    install_plugin_shim: bool | None = None,
    extra_plugins: Iterable[Path] = (),
    components: Sequence[str] = COMPONENTS,
    port: int | None = None,
    timeout: float = 180.0,
) -> AirflowHandle:
    """Start Airflow in the background and wait until every component is healthy.

    :param dags_folder: DAG files to serve; default ``<home>/dags`` (empty; add files with
        :meth:`AirflowHandle.add_dag_file`).
    :param home: AIRFLOW_HOME; default a new temp dir, removed by ``stop()``.
    :param env_extra: extra environment (e.g. ``AIRFLOW_CONN_TSB_DEFAULT``) for all components,
        which also reaches task processes.
    :param sql_alchemy_conn: metadata DB URL; default SQLite in ``home`` (from a cached template).
        For PostgreSQL pass e.g. ``pg.start_postgres().create_database("airflow")``; it is
        migrated here (``airflow db migrate``, not cached).
    :param install_plugin_shim: put a shim importing ``TsbPlugin`` into ``plugins/``; default:
        only when the project's ``airflow.plugins`` entry point is not installed.
    :param extra_plugins: plugin files copied into the plugins folder (e.g. test-only apps).
    """
    t0 = time.monotonic()
    owns_home = home is None
    home = Path(tempfile.mkdtemp(prefix="tsb-airflow-")) if home is None else home
    home.mkdir(parents=True, exist_ok=True)
    dags = dags_folder if dags_folder is not None else home / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    plugins = plugins_folder if plugins_folder is not None else home / "plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    if install_plugin_shim is None:
        install_plugin_shim = not _tsb_plugin_entry_point_installed()
    if install_plugin_shim:
        (plugins / PLUGIN_SHIM_NAME).write_text(PLUGIN_SHIM_SOURCE)
    for plugin_file in extra_plugins:
        shutil.copyfile(plugin_file, plugins / plugin_file.name)
    (home / "simple_auth_passwords.json").write_text(
        json.dumps({ADMIN_USER: ADMIN_PASSWORD, VIEWER_USER: VIEWER_PASSWORD})
    )
    port = port or free_port()
    conn = sql_alchemy_conn or f"sqlite:///{home / 'airflow.db'}"
    env = build_env(home, dags, plugins, port, conn, env_extra)
    logs_dir = home / "component-logs"
    logs_dir.mkdir(exist_ok=True)

    try:
        if sql_alchemy_conn is None:
            _prepare_sqlite_db(home / "airflow.db", env)
        else:
            _run_migrate(env, logs_dir / "migrate.log")
    except BaseException:
        if owns_home:
            shutil.rmtree(home, ignore_errors=True)
        raise

    handle = AirflowHandle(
        home=home,
        dags_folder=dags,
        plugins_folder=plugins,
        base_url=f"http://127.0.0.1:{port}",
        env=env,
        owns_home=owns_home,
    )
    commands: dict[str, list[str]] = {
        "scheduler": [AIRFLOW_BIN, "scheduler", "--skip-serve-logs"],
        "dag-processor": [AIRFLOW_BIN, "dag-processor"],
        "triggerer": [AIRFLOW_BIN, "triggerer", "--skip-serve-logs"],
        "api-server": [AIRFLOW_BIN, "api-server", "--host", "127.0.0.1", "--port", str(port)],
    }
    try:
        for name in components:
            log = (logs_dir / f"{name}.log").open("wb")
            handle.processes[name] = subprocess.Popen(
                commands[name],
                env=env,
                cwd=home,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # own process group: stop() kills workers too
            )
            handle.groups[name] = ProcessGroup.of(handle.processes[name].pid)
            log.close()
        _wait_healthy(handle, components, t0 + timeout)
    except BaseException:
        handle.stop()
        raise
    handle.startup_seconds = time.monotonic() - t0
    return handle


def _wait_healthy(handle: AirflowHandle, components: Sequence[str], deadline: float) -> None:
    want = {"scheduler", "triggerer", "dag-processor"} & set(components)
    last: Any = None
    while True:
        handle.check_alive()
        try:
            resp = handle.client.get("/api/v2/monitor/health", timeout=5.0)
            if resp.status_code == 200:
                last = resp.json()
                healthy = {
                    name
                    for key, name in (
                        ("scheduler", "scheduler"),
                        ("triggerer", "triggerer"),
                        ("dag_processor", "dag-processor"),
                    )
                    if (last.get(key) or {}).get("status") == "healthy"
                }
                if want <= healthy and last["metadatabase"]["status"] == "healthy":
                    return
        except httpx.HTTPError as exc:
            last = repr(exc)
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {n}\n{handle.component_log(n)}" for n in components)
            raise AirflowHarnessError(f"Airflow not healthy in time; last health: {last}\n{logs}")
        time.sleep(0.3)



def port_is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:``port``."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def running_airflow(dags_folder: Path | None = None, **kwargs: Any) -> Iterator[AirflowHandle]:
    """Context manager form of :func:`start_airflow`."""
    handle = start_airflow(dags_folder, **kwargs)
    try:
        yield handle
    finally:
        handle.stop()
