"""Spark settings of the examples: small runs on one machine (demo tuning, not provider defaults).

The provider adds no Spark setting to a job: a job's ``spark-submit`` gets the Spark
connection's ``conf`` extra, updated with the ``conf`` declared with
:meth:`Topology.job(conf=...) <airflow_provider_tsb.topology.Topology.job>`, updated with the
operator's own ``conf``. The example DAGs (``dags/``) declare :data:`LOCAL_SPARK_CONF` on their
jobs, so the demo, the benchmarks that launch those jobs and the tests run with it.
"""

from __future__ import annotations

#: 4 shuffle partitions (Spark's default of 200 is for clusters), no Spark UI, UTC sessions, a
#: 1 GB driver (Spark configuration docs: ``spark.sql.shuffle.partitions``, ``spark.ui.enabled``,
#: ``spark.sql.session.timeZone``, ``spark.driver.memory``), and a driver JVM that compiles with
#: the JIT's first tier only (``-XX:TieredStopAtLevel=1``): a barrier's driver on a small
#: machine lives seconds, and the optimizing tier's compiler threads cost it more CPU than they
#: save (a ``wordcount_words`` barrier under ``spark-submit``: 13.3 -> 8.1 CPU-s, 8.0 -> 6.3 s;
#: ``benchmarks/submit_start.py``). ``spark.driver.extraJavaOptions`` is a driver setting: a
#: Spark Connect job leaves it to the server.
LOCAL_SPARK_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    # Delta rebuilds each version's state with a Spark job of 50 tasks by default (Delta SQL conf
    # ``snapshotPartitions``): one for the examples' small logs
    "spark.databricks.delta.snapshotPartitions": "1",
}


#: Spark settings for a cluster, as the Spark connection's ``conf`` extra (``TsbSparkJobOperator``
#: puts them under each job's declared conf, so a job overrides what it must): small executors
#: (1 core, 512 MB; Spark docs ``spark.executor.cores``, ``spark.executor.memory``), at most 2
#: cores per application so that the three flights jobs stream side by side
#: (``spark.cores.max``), a fixed executor count (``spark.dynamicAllocation.enabled``), and
#: the shuffle partitions of a cluster. ``executor_python`` is the executors' interpreter
#: (``spark.sql.execution.pyspark.python``: what runs the Python data source's ``read()`` and
#: UDFs on executors; the driver's Python workers keep ``spark.pyspark.python``).
def cluster_spark_conf(executor_python: str | None = None) -> dict[str, str]:
    """The ``conf`` extra of a Spark connection to a small standalone cluster (see above)."""
    conf = {
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
        "spark.dynamicAllocation.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
    }
    if executor_python:
        conf["spark.sql.execution.pyspark.python"] = executor_python
    return conf
