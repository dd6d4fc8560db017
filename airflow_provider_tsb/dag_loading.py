"""Load the topologies declared in DAG files (for ``tsb topology validate`` / ``show``).

A DAG file is imported the way Airflow's DAG processor imports it (as a fresh module), and
every :class:`~airflow_provider_tsb.topology.Topology` created while it runs is collected. An
exception raised by the file (for example a topology that fails validation at parse time) is
reported as that file's error, as Airflow reports an import error.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_tsb.topology import Topology, declared_topologies, forget_declared_topologies


@dataclass
class LoadedFile:
    """Result of importing one DAG file."""

    path: str
    topologies: list[Topology] = field(default_factory=list)
    error: str | None = None


def iter_dag_files(paths: list[str]) -> list[str]:
    """Expand files and folders into the sorted list of ``.py`` DAG files they hold.

    Raises:
        FileNotFoundError: a path does not exist (names it).
    """
    files: list[str] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"no such DAG file or folder: {raw}")
        if path.is_dir():
            files.extend(
                str(p) for p in sorted(path.rglob("*.py"))
                if "__pycache__" not in p.parts and not p.name.startswith(".")
            )
        else:
            files.append(str(path))
    return files


def load_dag_file(path: str) -> LoadedFile:
    """Import one DAG file and collect the topologies it declares. Never raises for user code."""
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
