"""Local SparkSession for tsb apps and tests (respects a master set by spark-submit)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

#: SQL confs tsb needs on every session (also applied to an existing one).
REQUIRED_SQL_CONF: dict[str, str] = {
    # delta-rs and other Delta readers expect INT64 timestamps, not Spark's legacy INT96.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
}

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.driver.memory": "2g",
    "spark.sql.sources.partitionOverwriteMode": "static",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.enable.summary-metadata": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


def launched_by_spark_submit() -> bool:
    """True when this Python process was started by ``spark-submit`` (a JVM gateway exists)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def get_spark(
    app_name: str = "tsb",
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return a SparkSession configured for tsb.

    Under ``spark-submit`` the master and confs given there win; otherwise a local session is
    built with ``master`` (default: env ``TSB_SPARK_MASTER`` or ``local[2]``), small shuffles
    and no UI. ``PYSPARK_PYTHON`` defaults to this interpreter so Python workers start.
    The confs of :data:`REQUIRED_SQL_CONF` are always set; the log level is
    ``$TSB_SPARK_LOG_LEVEL`` (default ``WARN``).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if not launched_by_spark_submit():
        builder = builder.master(master or os.environ.get("TSB_SPARK_MASTER", "local[2]"))
        for key, value in DEFAULT_CONF.items():
            builder = builder.config(key, value)
    for key, value in {**REQUIRED_SQL_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for key, value in REQUIRED_SQL_CONF.items():
        spark.conf.set(key, value)
    # Spark's INFO log costs driver CPU on every micro-batch; TSB_SPARK_LOG_LEVEL=INFO brings it back
    spark.sparkContext.setLogLevel(os.environ.get("TSB_SPARK_LOG_LEVEL", "WARN"))
    return spark
