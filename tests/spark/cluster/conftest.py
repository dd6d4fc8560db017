"""Session fixtures of the cluster tests: the bare executor Python and one standalone cluster
(a master and two workers from pyspark's jars) shared by every test of the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dev.spark_cluster import SparkCluster, free_port, start_cluster
from dev.spark_cluster import bare_python as make_bare_python


@pytest.fixture(scope="session")
def bare_python() -> str:
    """The executors' interpreter: a virtualenv with only pyarrow, pandas and numpy."""
    return make_bare_python()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory, bare_python: str) -> Iterator[SparkCluster]:
    """A standalone cluster: 2 workers of 4 cores and 3 GB each; stopped by process group.

    8 core slots (the machine's CPUs are shared anyway): the session's Connect server holds 2
    for the whole session (``spark.cores.max``, no dynamic allocation) and the three streaming
    ``spark-submit`` jobs need 2 each at once. With 6 slots the job registered last got none:
    when that was ``enrich_flights``, the two jobs downstream of it waited for a barrier it
    never wrote (``Initial job has not accepted any resources``) until the test's timeout."""
    cluster = start_cluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=4, memory="3g")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def cluster_remote(tmp_path_factory: pytest.TempPathFactory, spark_cluster: SparkCluster, bare_python: str
                   ) -> Iterator[str]:
    """A Spark Connect server whose master is the cluster (``tsb spark start --master spark://...``),
    with the examples' cluster settings (1-core 512 MB executors running the bare Python): the URL
    of the jobs' engine on the cluster."""
    from airflow_provider_tsb.spark.connect_server import ConnectServer, ConnectServerOptions
    from tsb_examples.spark_conf import cluster_spark_conf

    server = ConnectServer(tmp_path_factory.mktemp("cluster-connect"), ConnectServerOptions(
        port=free_port(), master=spark_cluster.master_url, driver_memory="1g",
        conf={**cluster_spark_conf(bare_python), "spark.app.name": "tsb-spark-connect"},
    ))
    status = server.start()
    try:
        yield str(status.url)
    finally:
        server.stop()
