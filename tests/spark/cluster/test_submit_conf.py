"""What ``spark-submit`` gets for a cluster, read from the command the operator's hook builds:
Spark settings from the Spark connection under the job's and the operator's, the provider as
``--py-files`` (content-addressed), storage credentials in the environment only (unit tier)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from airflow_provider_tsb.operators.spark_job import TsbSparkJobOperator
from airflow_provider_tsb.spark.packaging import EXECUTOR_MODULES, package_zip
from airflow_provider_tsb.topology import Topology
from tsb_examples.spark_conf import cluster_spark_conf

MASTER = "spark://127.0.0.1:7077"


def topology(tmp_path: Path) -> Topology:
    topo = Topology("wc", warehouse=str(tmp_path / "wh"))
    topo.root_table("raw.words")
    topo.job("words", "/apps/words.py", sources=["raw.words"], sinks=["wc.counts"],
             conf={"spark.sql.shuffle.partitions": "8"})  # the job overrides the connection
    return topo


def spark_connection(monkeypatch, conn_id: str, host: str, extra: dict) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}",
                       json.dumps({"conn_type": "spark", "host": host, "extra": extra}))


def submit_command(op: TsbSparkJobOperator) -> list[str]:
    op.application_args = op.job_hook.build_application_args(None, None)
    return op._get_hook()._build_spark_submit_command(op.application)


def confs(cmd: list[str]) -> dict[str, str]:
    pairs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--conf"]
    return dict(p.split("=", 1) for p in pairs)


def test_connection_conf_under_the_job_and_the_operator(tmp_path, monkeypatch) -> None:
    conn = {**cluster_spark_conf("/opt/bare/bin/python"), "spark.dynamicAllocation.enabled": "true",
            "spark.dynamicAllocation.shuffleTracking.enabled": "true"}
    spark_connection(monkeypatch, "spark_cluster", MASTER,
                     {"deploy-mode": "client", "conf": conn, "spark.executor.instances": 2})
    op = TsbSparkJobOperator(task_id="words", topology=topology(tmp_path), job_id="words",
                             conn_id="spark_cluster", conf={"spark.executor.memory": "768m"})
    cmd = submit_command(op)
    got = confs(cmd)
    assert cmd[cmd.index("--master") + 1] == MASTER and cmd[cmd.index("--deploy-mode") + 1] == "client"
    assert got["spark.executor.cores"] == "1"  # the connection
    assert got["spark.dynamicAllocation.enabled"] == "true" and got["spark.cores.max"] == "2"
    assert got["spark.executor.instances"] == "2"  # a top-level spark.* key of the extra
    assert got["spark.sql.execution.pyspark.python"] == "/opt/bare/bin/python"
    assert got["spark.sql.shuffle.partitions"] == "8"  # the job's declared conf wins over the connection
    assert got["spark.executor.memory"] == "768m"  # the operator's conf wins over both
    shipped = cmd[cmd.index("--py-files") + 1]
    assert shipped == package_zip() and cmd.index("--py-files") < cmd.index(op.application)


def test_a_local_master_ships_nothing_unless_asked(tmp_path, monkeypatch) -> None:
    spark_connection(monkeypatch, "spark_local", "local[2]", {})
    topo = topology(tmp_path)
    local = TsbSparkJobOperator(task_id="words", topology=topo, job_id="words", conn_id="spark_local")
    assert "--py-files" not in submit_command(local)
    forced = TsbSparkJobOperator(task_id="words", topology=topo, job_id="words", conn_id="spark_local",
                                 ship_package=True)
    assert submit_command(forced)[submit_command(forced).index("--py-files") + 1] == package_zip()
    spark_connection(monkeypatch, "spark_off", MASTER, {"tsb-ship-package": "false"})
    off = TsbSparkJobOperator(task_id="words", topology=topo, job_id="words", conn_id="spark_off")
    assert "--py-files" not in submit_command(off)


def test_a_malformed_conf_extra_names_the_connection(tmp_path, monkeypatch) -> None:
    spark_connection(monkeypatch, "spark_bad", MASTER, {"conf": ["spark.executor.memory=1g"]})
    op = TsbSparkJobOperator(task_id="words", topology=topology(tmp_path), job_id="words", conn_id="spark_bad")
    with pytest.raises(ValueError, match="Spark connection 'spark_bad': extra 'conf' must be a JSON object"):
        submit_command(op)
    spark_connection(monkeypatch, "spark_bad2", MASTER, {"conf": {"executor.memory": "1g"}})
    op = TsbSparkJobOperator(task_id="words", topology=topology(tmp_path), job_id="words", conn_id="spark_bad2")
    with pytest.raises(ValueError, match=r"'spark_bad2': \['executor.memory'\] .* are not Spark properties"):
        submit_command(op)


def test_the_package_zip_is_content_addressed(tmp_path) -> None:
    first = package_zip(tmp_path)
    assert package_zip(tmp_path) == first  # unchanged sources: the same zip, built once
    with zipfile.ZipFile(first) as zf:
        names = set(zf.namelist())
    for module in EXECUTOR_MODULES:
        path = module.replace(".", "/")
        assert f"{path}.py" in names or f"{path}/__init__.py" in names, module
    assert "airflow_provider_tsb/spark/streaming.py" in names  # the whole package: the driver imports it too
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert len(list(tmp_path.glob("*.zip"))) == 1


def test_storage_credentials_go_to_the_environment_not_the_command_line(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_TSB_S3", json.dumps({
        "conn_type": "aws", "login": "AKIDEXAMPLE", "password": "s3cr3t",
        "extra": {"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:9000"}}))
    spark_connection(monkeypatch, "spark_cluster", MASTER, {})
    op = TsbSparkJobOperator(task_id="words", topology=topology(tmp_path), job_id="words",
                             conn_id="spark_cluster", storage_conn_id="tsb_s3")
    env = op.job_hook.build_env("sqlite:///x.db", None, None)
    assert json.loads(env["TSB_STORAGE_OPTIONS"]) == {
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true"}
    assert not any("s3cr3t" in a for a in submit_command(op))
