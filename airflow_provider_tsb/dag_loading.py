"""Load the topologies declared in DAG files (for ``tsb topology validate`` / ``show``).

A DAG file is imported the way Airflow's DAG processor imports it (as a fresh module), and
every :class:`~airflow_provider_tsb.topology.Topology` created while it runs is collected. An
exception raised by the file (for example a topology that fails validation at parse time) is
reported as that file's error, as Airflow reports an import error. A file whose top level runs
longer than Airflow's ``[core] dagbag_import_timeout`` (default 30 s) is stopped and reported
the same way, as the DAG processor does, instead of blocking the command.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_tsb.exceptions import DagFileTimeoutError
from airflow_provider_tsb.topology import Topology, declared_topologies, forget_declared_topologies

#: the file that excludes paths of a DAG folder from parsing (Airflow's ``[core] dag_ignore_file_syntax``)
AIRFLOWIGNORE = ".airflowignore"


@dataclass
class LoadedFile:
    """Result of importing one DAG file."""

    path: str
    topologies: list[Topology] = field(default_factory=list)
    error: str | None = None


def iter_dag_files(paths: list[str]) -> list[str]:
    """Expand files and folders into the sorted list of ``.py`` DAG files they hold.

    A folder is walked the way Airflow's DAG processor walks its DAG folder: an ``.airflowignore``
    file in a folder excludes the paths its patterns match below that folder (Airflow 3's default
    ``[core] dag_ignore_file_syntax = glob``: gitignore patterns, matched with ``pathspec`` as
    Airflow does). So support packages beside the DAG files (the examples' ``common/`` and
    ``tsb_examples/``) are not imported as DAG files. A file named explicitly is always loaded.

    Raises:
        FileNotFoundError: a path does not exist (names it).
    """
    files: list[str] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"no such DAG file or folder: {raw}")
        files.extend(_walk_dag_folder(path) if path.is_dir() else [str(path)])
    return files


def _walk_dag_folder(root: Path) -> list[str]:
    """The ``.py`` files under ``root`` that no ``.airflowignore`` on their way excludes (sorted)."""
    import pathspec

    found: list[str] = []
    ignores: dict[Path, list[tuple[Path, pathspec.PathSpec]]] = {root: []}
    for folder, subfolders, names in os.walk(root):
        here = Path(folder)
        rules = list(ignores.pop(here))
        ignore_file = here / AIRFLOWIGNORE
        if ignore_file.is_file():
            rules.append((here, pathspec.GitIgnoreSpec.from_lines(ignore_file.read_text().splitlines())))

        def ignored(path: Path, is_dir: bool, rules: list[tuple[Path, pathspec.PathSpec]] = rules) -> bool:
            return any(spec.match_file(path.relative_to(base).as_posix() + ("/" if is_dir else ""))
                       for base, spec in rules)

        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__" and not d.startswith(".")
                               and not ignored(here / d, True))
        for d in subfolders:
            ignores[here / d] = rules
        found.extend(str(here / n) for n in names
                     if n.endswith(".py") and not n.startswith(".") and not ignored(here / n, False))
    return sorted(found)


def import_timeout_s() -> float:
    """Airflow's ``[core] dagbag_import_timeout`` in seconds: ``AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT``,
    else the ``[core]`` section of ``$AIRFLOW_HOME/airflow.cfg``, else Airflow's default 30; 0 or
    less: no timeout. Read without importing Airflow, whose configuration would set up its
    logging (on stdout) in a CLI that prints JSON there."""
    from airflow_provider_tsb.airflow_config import airflow_option

    raw = airflow_option("core", "dagbag_import_timeout")
    try:
        return float(raw) if raw is not None else 30.0
    except ValueError:
        return 30.0


@contextlib.contextmanager
def _time_limit(seconds: float, path: str) -> Iterator[None]:
    """Raise :class:`DagFileTimeoutError` in the block after ``seconds`` (SIGALRM, as Airflow's own
    ``timeout``; only in the main thread, elsewhere no limit)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(_signum: int, _frame: object) -> None:
        raise DagFileTimeoutError(
            f"importing it took more than {seconds:g} s (Airflow's [core] dagbag_import_timeout): a DAG file's top "
            "level must return quickly; move slow work (queries, waits, loops) into tasks"
        )

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _under(module: object, folder: str) -> bool:
    file = getattr(module, "__file__", None)
    return bool(file) and os.path.abspath(str(file)).startswith(folder + os.sep)


@contextlib.contextmanager
def _fresh_modules_under(folder: str) -> Iterator[None]:
    """Run the block as if no module from ``folder`` were imported yet, then put this process's
    modules back: a DAG file's helpers beside it (``common/flights.py``, which declares the
    topology the DAG file imports) run again for every load, as in the DAG processor's fresh
    process, instead of declaring their topologies only the first time."""
    saved = {name: m for name, m in list(sys.modules.items()) if _under(m, folder)}
    for name in saved:
        del sys.modules[name]
    try:
        yield
    finally:
        for name in [n for n, m in list(sys.modules.items()) if _under(m, folder)]:
            del sys.modules[name]
        sys.modules.update(saved)


def load_dag_file(path: str) -> LoadedFile:
    """Import one DAG file and collect the topologies it declares. Never raises for user code:
    an exception, or a top level that runs longer than :func:`import_timeout_s`, is the file's
    ``error``. Modules from the DAG file's folder run afresh for each file (see
    :func:`_fresh_modules_under`)."""
    forget_declared_topologies()
    module_name = f"tsb_dagfile_{abs(hash(os.path.abspath(path)))}"
    result = LoadedFile(path)
    folder = os.path.dirname(os.path.abspath(path))
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            result.error = f"{path}: not a Python file"
            return result
        with _fresh_modules_under(folder), _time_limit(import_timeout_s(), path):
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
    except Exception as exc:  # a user's DAG file may raise anything; report it like Airflow
        result.error = f"{path}: {type(exc).__name__}: {exc}"
        if os.environ.get("TSB_DEBUG"):
            result.error += "\n" + traceback.format_exc()
    finally:
        sys.modules.pop(module_name, None)
        if added:
            sys.path.remove(folder)
    result.topologies = declared_topologies()
    forget_declared_topologies()
    return result


def load_dag_files(paths: list[str]) -> list[LoadedFile]:
    """Load every DAG file under ``paths`` (see :func:`iter_dag_files`)."""
    return [load_dag_file(p) for p in iter_dag_files(paths)]
