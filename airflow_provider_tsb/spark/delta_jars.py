"""Delta Lake's JVM jars for every Spark that tsb starts: fetched with Maven, checked at start.

The data plane reads and writes Delta with Delta's own Spark connector (``delta-spark``). Its
Python package is on PyPI; its jars are on Maven Central. The package ships a small Maven
project, ``spark/jvm/pom.xml``, naming the exact artifacts (``io.delta:delta-spark_4.2_2.13``,
built for the Spark line of pyspark 4.2, with ``delta-storage``; Hadoop's S3A connector
``hadoop-aws`` 3.5.0 with the AWS SDK modules it uses, for tables on ``s3://``:
:mod:`airflow_provider_tsb.spark.hadoop_fs`); :func:`fetch` copies them into
:func:`jars_dir` with ``mvn dependency:copy-dependencies``. ``make install``, ``.ci/run`` and
``tsb spark jars --fetch`` run it; ``tsb spark start`` fetches what is missing.

:func:`delta_conf` gives a Spark conf the jars (``spark.jars``) and Delta's SQL extension and
catalog (Delta docs "Quickstart": ``spark.sql.extensions =
io.delta.sql.DeltaSparkSessionExtension``, ``spark.sql.catalog.spark_catalog =
org.apache.spark.sql.delta.catalog.DeltaCatalog``): the local Spark Connect server, every
``spark-submit`` job and the local drivers get it, and executors receive ``spark.jars`` from
their driver. A jar that is missing, or built for another Spark line than pyspark's, fails at
start with :class:`DeltaJarsError`, naming the jar and the command that fetches it.

Two ways around the cache (``$TSB_DELTA_JARS``):

* ``packages``: Spark resolves Delta itself (``spark.jars.packages =
  io.delta:delta-spark_4.2_2.13:VERSION``), for a Spark that reaches Maven Central;
* ``provided``: the platform's Spark already has Delta on its classpath (Databricks, EMR,
  Dataproc, Fabric): only the SQL extension and catalog are set, and only where unset.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from airflow_provider_tsb.exceptions import DeltaJarsError

#: where the jars live, unless given: ``$TSB_JARS_DIR``
JARS_ENV = "TSB_JARS_DIR"
#: ``cache`` (default: the jars fetched into :func:`jars_dir`), ``packages`` or ``provided``
MODE_ENV = "TSB_DELTA_JARS"
EXTENSIONS = "spark.sql.extensions"
CATALOG = "spark.sql.catalog.spark_catalog"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
#: Spark settings every tsb Spark needs for Delta (besides the jars)
DELTA_SQL_CONF: dict[str, str] = {
    EXTENSIONS: DELTA_EXTENSION,
    CATALOG: DELTA_CATALOG,
    # a change data feed across a column rename or drop reads with the newest schema (Delta's
    # default refuses it: DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA)
    "spark.databricks.delta.changeDataFeed.defaultSchemaModeForColumnMappingTable": "endVersion",
}
#: ``spark.jars.excludes`` of mode ``packages``: the pom's exclusions (hadoop-aws's AWS SDK bundle,
#: hundreds of MB, for the SDK modules the pom names)
PACKAGES_EXCLUDES = ("software.amazon.awssdk:bundle",)
FETCH_HINT = "run `tsb spark jars --fetch` (or `make install`), which fetches them with Maven"


@dataclass(frozen=True)
class Artifact:
    """One Maven artifact the pom names directly."""

    group: str
    artifact: str
    version: str

    @property
    def jar(self) -> str:
        """Its jar's file name as ``copy-dependencies`` writes it."""
        return f"{self.artifact}-{self.version}.jar"

    @property
    def coordinate(self) -> str:
        """``group:artifact:version``, as ``spark.jars.packages`` takes it."""
        return f"{self.group}:{self.artifact}:{self.version}"


def pom_text() -> str:
    """The shipped pom (``airflow_provider_tsb/spark/jvm/pom.xml``)."""
    return resources.files("airflow_provider_tsb.spark").joinpath("jvm", "pom.xml").read_text()


def artifacts() -> list[Artifact]:
    """The artifacts the pom names directly (Delta's connector, S3A and its AWS SDK modules)."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.fromstring(pom_text())
    return [Artifact(*(d.findtext(f"m:{k}", namespaces=ns) or "" for k in ("groupId", "artifactId", "version")))
            for d in root.iterfind("m:dependencies/m:dependency", ns)]


def jars_dir() -> Path:
    """``$TSB_JARS_DIR``, else ``~/.cache/airflow-provider-tsb/jars/<digest of the pom>``: a new
    pom (another Delta version) gets a folder of its own."""
    given = os.environ.get(JARS_ENV)
    if given:
        return Path(given).expanduser()
    digest = hashlib.sha256(pom_text().encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "airflow-provider-tsb" / "jars" / digest


def fetch(target: Path | None = None, *, timeout_s: float = 900.0) -> list[Path]:
    """Copy the pom's jars into ``target`` (default :func:`jars_dir`) with Maven; returns them.

    Written to a sibling folder first and renamed, so a process never sees half the jars.

    Raises:
        DeltaJarsError: ``mvn`` is not installed, or failed (with its last output lines).
    """
    target = target or jars_dir()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DeltaJarsError(f"Maven (`mvn`) is not installed: it fetches Delta's jars into {target}; install it "
                             "(e.g. `apt-get install -y maven`), or set TSB_DELTA_JARS=packages (Spark fetches "
                             "them) or TSB_DELTA_JARS=provided (your Spark has them)")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    pom = staging.with_suffix(".pom.xml")
    pom.write_text(pom_text())
    try:
        done = subprocess.run([mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                               f"-DoutputDirectory={staging}"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise DeltaJarsError(f"Maven did not fetch Delta's jars within {timeout_s:.0f} s") from None
    finally:
        pom.unlink(missing_ok=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise DeltaJarsError(f"Maven could not fetch Delta's jars ({', '.join(a.coordinate for a in artifacts())}) "
                             f"into {target}:\n{tail}")
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return sorted(target.glob("*.jar"))


def check_spark_line(spark_version: str | None = None) -> None:
    """Refuse a Delta artifact built for another Spark line than pyspark's
    (``delta-spark_4.2_2.13`` needs Spark 4.2).

    Raises:
        DeltaJarsError: names the jar, both Spark lines and what to do.
    """
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    line = ".".join(spark_version.split(".")[:2])
    for a in artifacts():
        parts = a.artifact.split("_")
        if a.group == "io.delta" and len(parts) == 3 and parts[1] != line:
            raise DeltaJarsError(f"{a.jar} is built for Spark {parts[1]}, but pyspark is {spark_version}: install "
                                 f"pyspark {parts[1]}.x, or a provider release whose pom names delta-spark_{line}")


def delta_jars(*, fetch_missing: bool = False) -> list[Path]:
    """The jars of :func:`jars_dir`, checked: each artifact the pom names is there.

    Args:
        fetch_missing: fetch them (:func:`fetch`) when some are missing, instead of raising.

    Raises:
        DeltaJarsError: a jar is missing (names it and :data:`FETCH_HINT`), or the Spark line
            does not match (:func:`check_spark_line`).
    """
    check_spark_line()
    folder = jars_dir()
    missing = [a.jar for a in artifacts() if not (folder / a.jar).is_file()]
    if missing and fetch_missing:
        fetch(folder)
        missing = [a.jar for a in artifacts() if not (folder / a.jar).is_file()]
    if missing:
        raise DeltaJarsError(f"Delta's jars {missing} are not in {folder}: {FETCH_HINT}")
    return sorted(folder.glob("*.jar"))


def delta_conf(conf: Mapping[str, str] | None = None, *, fetch_missing: bool = False) -> dict[str, str]:
    """``conf`` with Delta for a Spark that starts with it (see module docstring): ``spark.jars``
    extended with :func:`delta_jars` (mode ``cache``) or ``spark.jars.packages`` with the pom's
    coordinates (``packages``), and :data:`DELTA_SQL_CONF` where ``conf`` does not set them. A
    ``spark.sql.extensions`` of ``conf`` keeps its own and gets Delta's after them.

    Raises:
        DeltaJarsError: as :func:`delta_jars`; an unknown ``$TSB_DELTA_JARS``.
    """
    out = dict(conf or {})
    mode = os.environ.get(MODE_ENV, "cache").strip().lower() or "cache"
    if mode == "cache":
        jars = [p for p in out.get("spark.jars", "").split(",") if p]
        out["spark.jars"] = ",".join([*jars, *(str(j) for j in delta_jars(fetch_missing=fetch_missing)
                                               if str(j) not in jars)])
    elif mode == "packages":
        packages = [p for p in out.get("spark.jars.packages", "").split(",") if p]
        out["spark.jars.packages"] = ",".join([*packages, *(a.coordinate for a in artifacts()
                                                            if a.coordinate not in packages)])
        excludes = [e for e in out.get("spark.jars.excludes", "").split(",") if e]
        out["spark.jars.excludes"] = ",".join([*excludes, *(e for e in PACKAGES_EXCLUDES if e not in excludes)])
    elif mode != "provided":
        raise DeltaJarsError(f"{MODE_ENV}={mode!r} is not one of cache, packages, provided")
    extensions = [e.strip() for e in out.get(EXTENSIONS, "").split(",") if e.strip()]
    if DELTA_EXTENSION not in extensions:
        out[EXTENSIONS] = ",".join([*extensions, DELTA_EXTENSION])
    for key, value in DELTA_SQL_CONF.items():
        out.setdefault(key, value)
    return out
