"""Spark settings of the examples: small runs on one machine (demo tuning, not provider defaults).

The provider adds no Spark setting to a job: a job's ``spark-submit`` gets the ``conf`` declared
with :meth:`Topology.job(conf=...) <airflow_provider_tsb.topology.Topology.job>` updated with the
operator's own ``conf``. The example DAGs (``dags/``) declare :data:`LOCAL_SPARK_CONF` on their
jobs, so the demo, the benchmarks that launch those jobs and the tests run with it.
"""

from __future__ import annotations

#: 4 shuffle partitions (Spark's default of 200 is for clusters), no Spark UI, UTC sessions and a
#: 1 GB driver (Spark configuration docs: ``spark.sql.shuffle.partitions``, ``spark.ui.enabled``,
#: ``spark.sql.session.timeZone``, ``spark.driver.memory``)
LOCAL_SPARK_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "1g",
}
