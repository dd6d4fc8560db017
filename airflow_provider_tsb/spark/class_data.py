"""A class-data-sharing archive of Spark's driver classes: a local ``spark-submit`` that starts
faster.

A JVM spends most of a Spark driver's start loading, parsing and verifying the few thousand
classes of Spark's jars. JDK 13+ dynamic AppCDS (JEP 350, "Dynamic CDS Archives") lets one JVM
write the classes it loaded into an archive at exit (``-XX:ArchiveClassesAtExit=FILE``) and
every later JVM of the same Java and class path map them from it
(``-XX:SharedArchiveFile=FILE``). A JVM that cannot use the archive (another Java, another class
path, a missing file) ignores it and starts as usual: the archive can only make a start faster.
It saves most of the class loading, in wall time and in CPU (docs/benchmarks.md, "spark-submit
start").

:class:`ClassDataArchive` keeps one archive per Java and Spark installation in a cache folder
(``$TSB_CLASS_DATA_DIR``, else ``$XDG_CACHE_HOME/airflow-provider-tsb``, else
``~/.cache/airflow-provider-tsb``). :meth:`ClassDataArchive.java_options` gives the driver's
Java options when it exists; :meth:`ClassDataArchive.create` writes it by running
:mod:`airflow_provider_tsb.spark.class_data_app` once (one Spark start of its own);
:meth:`ClassDataArchive.ensure` starts that in the background the first time a driver would have
used it. A job's
``spark-submit`` gets it through :func:`~airflow_provider_tsb.hooks.submit_conf.configure_submit`
when its driver runs on this machine; ``tsb spark archive`` creates it ahead.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from airflow_provider_tsb.exceptions import ClassDataError
from airflow_provider_tsb.spark.installation import driver_env, java_binary, spark_jars
from airflow_provider_tsb.spark.installation import spark_submit as default_spark_submit

#: folder of the archives, unless given: ``$TSB_CLASS_DATA_DIR``
DIR_ENV = "TSB_CLASS_DATA_DIR"
#: the app whose driver writes the archive
ARCHIVE_APP = Path(__file__).with_name("class_data_app.py")
#: the JVM's own CDS log lines (e.g. "Pre JDK 6 class not supported by CDS" when writing, "Unable to
#: use shared archive" when another Java reads it) are not the job's: off
QUIET_LOGGING = "-Xlog:cds=off -Xlog:cds+dynamic=off"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"
#: archives kept in the folder (the newest; older Java or Spark installations' go)
KEEP_ARCHIVES = 3


def default_dir() -> Path:
    """``$TSB_CLASS_DATA_DIR``, else ``$XDG_CACHE_HOME/airflow-provider-tsb``, else
    ``~/.cache/airflow-provider-tsb``."""
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "airflow-provider-tsb"


class ClassDataArchive:
    """The class-data archive of one Java and Spark installation (see the module doc).

    Args:
        directory: where archives are kept (default :func:`default_dir`).
        spark_submit: the ``spark-submit`` whose drivers use it (default: ``$SPARK_HOME``'s, else
            pyspark's own; see :func:`~airflow_provider_tsb.spark.installation.spark_submit`).
    """

    def __init__(self, directory: Path | str | None = None, spark_submit: str | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_dir()
        self.spark_submit = spark_submit or default_spark_submit()

    @property
    def path(self) -> Path:
        """``spark-<key>.jsa`` in :attr:`directory`; the key changes with the Java binary (path and
        modification time) and the Spark jars folder (:func:`spark_jars`, path and modification
        time), so an upgrade of either writes a new one."""
        java = java_binary() or "java"
        real = os.path.realpath(java)
        jars = spark_jars()
        stamp = f"{real}:{_mtime(real)}:{jars}:{_mtime(str(jars))}"
        return self.directory / f"spark-{hashlib.sha1(stamp.encode()).hexdigest()[:16]}.jsa"

    def exists(self) -> bool:
        """Whether the archive has been written."""
        return self.path.is_file()

    def java_options(self) -> str:
        """The driver's Java options that map the archive (``""`` while it does not exist)."""
        return f"-XX:SharedArchiveFile={self.path} {QUIET_LOGGING}" if self.exists() else ""

    def ensure(self) -> str:
        """:meth:`java_options`; when the archive does not exist yet, start writing it in the
        background (a detached ``python -m airflow_provider_tsb.spark.class_data``, at most one per
        archive) and return ``""``: the drivers started after it is written use it."""
        if self.exists():
            return self.java_options()
        if java_binary() is None:
            return ""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._lock_holder_alive():
            return ""
        log = self.path.with_suffix(".log")
        with log.open("ab") as out:
            subprocess.Popen(
                [sys.executable, "-m", "airflow_provider_tsb.spark.class_data", str(self.directory), self.spark_submit],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env=driver_env(),
            )
        return ""

    def create(self, timeout_s: float = 600.0) -> float:
        """Write the archive (nothing when it exists); returns the seconds it took (0.0 when it existed).

        One process writes it at a time (a lock file next to it; others wait for it).

        Raises:
            ClassDataError: the driver that writes it failed or took over ``timeout_s`` seconds.
        """
        if self.exists():
            return 0.0
        self.directory.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.path.with_suffix(".lock").open("a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            lock.seek(0)
            lock.truncate()
            lock.write(str(os.getpid()))
            lock.flush()
            if self.exists():
                return 0.0
            self._write(timeout_s)
        return time.monotonic() - started

    def delete(self) -> bool:
        """Remove the archive; returns whether there was one."""
        existed = self.exists()
        self.path.unlink(missing_ok=True)
        return existed

    def _write(self, timeout_s: float) -> None:
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        scratch = self.directory / f"app-{os.getpid()}"
        command = [
            self.spark_submit, "--master", "local[1]", "--conf", "spark.ui.enabled=false",
            "--driver-java-options", f"-XX:ArchiveClassesAtExit={tmp} {QUIET_LOGGING}",
            str(ARCHIVE_APP), str(scratch),
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=driver_env(),
                                  cwd=self.directory)
        except subprocess.TimeoutExpired as exc:
            tmp.unlink(missing_ok=True)
            raise ClassDataError(f"writing the class-data archive {self.path} took over {timeout_s:g} s") from exc
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if done.returncode != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            lines = [line for line in (done.stdout + done.stderr).splitlines() if " INFO " not in line]
            tail = "\n".join(lines[-20:])
            raise ClassDataError(
                f"the driver writing the class-data archive {self.path} exited with code {done.returncode}; "
                f"its last lines:\n{tail}"
            )
        tmp.replace(self.path)
        older = sorted(self.directory.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in older[KEEP_ARCHIVES:]:
            stale.unlink(missing_ok=True)

    def _lock_holder_alive(self) -> bool:
        """Whether another process holds the archive's lock (is writing it)."""
        lock_path = self.path.with_suffix(".lock")
        with lock_path.open("a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def executors_run_here(master: str) -> bool:
    """Whether the executors of ``master`` run on this machine besides the driver: a
    ``local-cluster[...]`` master, or a standalone ``spark://`` master whose every host is a
    loopback address or this host's name (a cluster of one machine). ``local[...]`` has no
    executor process (the driver runs the tasks)."""
    if master.startswith("local-cluster"):
        return True
    if not master.startswith("spark://"):
        return False
    here = {"127.0.0.1", "localhost", "::1", "[::1]", socket.gethostname()}
    return all(host.rsplit(":", 1)[0] in here for host in master[len("spark://"):].split(","))


def with_class_data(conf: Mapping[str, str], options: str, master: str = "local") -> dict[str, str]:
    """``conf`` (Spark properties) with the archive's Java ``options`` appended to
    ``spark.driver.extraJavaOptions`` (the conf's own options first) and, when the executors of
    ``master`` run on this machine (:func:`executors_run_here`), to
    ``spark.executor.extraJavaOptions``. Nothing for empty ``options`` (no archive yet)."""
    out = dict(conf)
    for key in (DRIVER_JAVA_OPTIONS, EXECUTOR_JAVA_OPTIONS) if executors_run_here(master) else (DRIVER_JAVA_OPTIONS,):
        current = out.get(key, "").strip()
        if options and options not in current:
            out[key] = f"{current} {options}".strip()
    return out


def _mtime(path: str) -> int:
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return 0


def main(argv: list[str]) -> int:
    """``python -m airflow_provider_tsb.spark.class_data DIRECTORY SPARK_SUBMIT``: write the archive
    (what :meth:`ClassDataArchive.ensure` starts in the background)."""
    directory, submit = argv
    seconds = ClassDataArchive(directory, submit).create()
    print(f"class-data archive written in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
