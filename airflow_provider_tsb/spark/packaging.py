"""Ship the provider to Spark executors that have nothing of it installed: a ``--py-files`` zip.

Spark's way to give executors a Python package is ``spark-submit --py-files <zip>`` (Spark docs,
"Submitting Applications", "Bundling Your Application's Dependencies"): Spark copies the zip to
every executor and puts it on its Python workers' ``sys.path`` (and, in client deploy mode, on
the driver's ``PYTHONPATH``). :func:`package_zip` builds that zip of ``airflow_provider_tsb``
from the installed sources when a job is submitted, content-addressed: the file name carries a
hash of every file, so an unchanged package is zipped once and a changed one never reuses a
stale zip.

What runs on executors is only :data:`EXECUTOR_MODULES` (the streaming source's ``read()``,
unpickled in an executor's Python worker); they import nothing beyond the standard library and
pyspark, so the executors' interpreter needs only what a Spark image carries (pyspark's own
dependencies: pyarrow, pandas, numpy). ``tests/spark/cluster/test_executor_imports.py`` imports them
in such a bare interpreter. Everything else (delta-rs, the metastore, Airflow) runs on the
driver. See ``docs/design.md`` "Where the code runs".
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

import airflow_provider_tsb

#: modules an executor imports (the streaming source's partitions are read on executors); they
#: may import only the standard library and pyspark (checked by the cluster tests)
EXECUTOR_MODULES: tuple[str, ...] = (
    "airflow_provider_tsb",
    "airflow_provider_tsb.spark",
    "airflow_provider_tsb.spark.barrier_source",
)

#: what is not shipped: byte code (each Python compiles its own) and editor/OS litter
_SKIP_SUFFIXES = (".pyc", ".pyo", ".swp", "~")
_SKIP_DIRS = {"__pycache__"}


def package_root() -> Path:
    """The directory of the installed ``airflow_provider_tsb`` package."""
    return Path(airflow_provider_tsb.__file__).resolve().parent


def _package_files(root: Path) -> list[Path]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        files += [Path(dirpath) / f for f in sorted(filenames) if not f.endswith(_SKIP_SUFFIXES)]
    return files


def default_cache_dir() -> Path:
    """``$TSB_PY_FILES_CACHE``, else ``$XDG_CACHE_HOME/airflow-provider-tsb/py-files`` (default
    ``~/.cache/...``), else a directory under the system temp dir when the home is not writable."""
    explicit = os.environ.get("TSB_PY_FILES_CACHE")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-provider-tsb" / "py-files"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        return cache
    except OSError:
        return Path(tempfile.gettempdir()) / "airflow-provider-tsb-py-files"


def package_zip(cache_dir: str | Path | None = None) -> str:
    """Path of a zip of the installed ``airflow_provider_tsb`` package, for ``--py-files``.

    The zip holds the package's files under ``airflow_provider_tsb/`` (no byte code) and is
    named ``airflow_provider_tsb-<version>-<sha256 of the files, 16 hex>.zip`` in
    ``cache_dir`` (default :func:`default_cache_dir`): built once per content, written to a
    temporary file and renamed, so concurrent submits never see a partial zip.

    Cost: reading the package's files (under 1 MB) to hash them on every call.
    """
    root = package_root()
    files = _package_files(root)
    digest = hashlib.sha256()
    contents: list[tuple[str, bytes]] = []
    for path in files:
        name = "airflow_provider_tsb/" + path.relative_to(root).as_posix()
        data = path.read_bytes()
        digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
        contents.append((name, data))
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"airflow_provider_tsb-{airflow_provider_tsb.__version__}-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return str(target)
    fd, tmp = tempfile.mkstemp(prefix=".tsb-py-files-", suffix=".zip", dir=directory)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for name, data in contents:
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))  # reproducible bytes
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return str(target)
