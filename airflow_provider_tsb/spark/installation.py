"""Spark and Java on this machine: ``spark-submit``, ``java``, Spark's jars, a driver's environment.

What the local Spark Connect server (:mod:`airflow_provider_tsb.spark.connect_server`) and the
class-data archive (:mod:`airflow_provider_tsb.spark.class_data`) need to start a Spark driver
here: pyspark 4's own ``spark-submit`` (or ``$SPARK_HOME``'s) and Java 17+ (Spark 4's
requirement; ``$JAVA_HOME``, else ``java`` on ``PATH``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from airflow_provider_tsb.exceptions import SparkInstallationError

#: what pyspark puts in a process's environment once it made a Spark Connect session
#: (``SparkSession.builder.remote``): a child process inheriting them believes it is a client too
CONNECT_MARKERS = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_REMOTE")

#: pyspark 4.2 warns at every Spark Connect import that it "does not yet fully support pandas >=
#: 3.0.0"; tsb's apps do not use its pandas API, and the line drowned the demo's and jobs' output
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)


def java_binary() -> str | None:
    """``$JAVA_HOME/bin/java`` when it exists, else ``java`` on ``PATH``, else ``None``."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java")


def spark_jars() -> Path:
    """The jars folder of the Spark that ``spark-submit`` runs: ``$SPARK_HOME/jars``, else
    pyspark's own (where pyspark's ``find_spark_home`` and its ``bin/spark-submit`` point)."""
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return (Path(home) / "jars").resolve()
    import pyspark

    return (Path(pyspark.__file__).resolve().parent / "jars").resolve()


def driver_env() -> dict[str, str]:
    """This process's environment for a Spark driver of its own (``spark-submit``): without the
    markers of a Spark Connect client, with ``PYSPARK_PYTHON`` (default: this interpreter)."""
    env = {k: v for k, v in os.environ.items() if k not in (*CONNECT_MARKERS, "PYSPARK_GATEWAY_PORT")}
    env["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
    return env


def spark_submit() -> str:
    """``$SPARK_HOME/bin/spark-submit`` when set and present, else the one pyspark ships.

    Raises:
        SparkInstallationError: neither exists (install pyspark 4 with ``pip install pyspark``).
    """
    home = os.environ.get("SPARK_HOME")
    candidates = [Path(home) / "bin" / "spark-submit"] if home else []
    try:
        import pyspark

        candidates.append(Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit")
    except ImportError:
        pass
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    raise SparkInstallationError(
        f"spark-submit not found (looked at {[str(c) for c in candidates]}); install pyspark 4 "
        "(pip install 'pyspark>=4') or set SPARK_HOME to a Spark 4 installation"
    )


def check_java() -> None:
    """Raise :class:`SparkInstallationError` unless Java 17+ is on ``PATH`` or under ``$JAVA_HOME``."""
    java = java_binary()
    hint = "install Java 17+ (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    if not java or not Path(java).exists():
        raise SparkInstallationError(f"Spark needs Java 17+, and no java was found on PATH or in JAVA_HOME; {hint}")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkInstallationError(f"cannot run {java} -version ({exc}); {hint}") from exc
    text = out.stderr or out.stdout
    version = text.split('"')[1] if '"' in text else ""
    major = version.split(".")[0] if version else ""
    if not major.isdigit() or int(major) < 17:
        found = text.splitlines()[0] if text else "nothing"
        raise SparkInstallationError(f"Spark needs Java 17+, found {found}; {hint}")
