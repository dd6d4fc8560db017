"""Throwaway virtualenvs the tests need besides the project's own (the bare executor Python, the
S3 test server), created once per content and cached under ``~/.cache/airflow-provider-tsb/``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-provider-tsb"


def cached_venv(name: str, requirements: list[str], root: Path | None = None) -> Path:
    """The directory of a virtualenv with exactly ``requirements`` on this interpreter's Python,
    keyed by (Python version, requirements); built with ``uv`` when it is next to this Python
    (else ``venv`` + ``pip``) in a temporary directory and moved into place when complete.

    Raises:
        RuntimeError: the virtualenv could not be created (the tool's output in the message).
    """
    key = hashlib.sha256(json.dumps([sys.version, sorted(requirements)]).encode()).hexdigest()[:16]
    base_dir = root or cache_root()
    venv = base_dir / f"{name}-{key}"
    if (venv / ".complete").exists():
        return venv
    tmp = base_dir / f".{name}-{key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    uv = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
    base = getattr(sys, "_base_executable", sys.executable)
    if uv:
        steps = [[uv, "venv", "-q", "-p", base, str(tmp)],
                 [uv, "pip", "install", "-q", "-p", str(tmp / "bin" / "python"), *requirements]]
    else:
        steps = [[base, "-m", "venv", str(tmp)],
                 [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", *requirements]]
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"creating the {name} virtualenv failed: {' '.join(step)}\n{proc.stderr[-2000:]}")
    (tmp / ".complete").write_text(json.dumps(sorted(requirements)))
    if venv.exists():  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(venv)  # bin/python finds its pyvenv.cfg next to itself: the move keeps it working
    return venv
