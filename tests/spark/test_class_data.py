"""The class-data archive of Spark's driver classes (:mod:`airflow_provider_tsb.spark.class_data`).

A job's ``spark-submit`` driver maps it (``-Xshare:on`` makes a JVM that cannot map it fail, so
the run proves the archive is used), the operator's command carries it where the driver runs
on this machine and not where it runs on a cluster, and ``tsb spark archive`` reports it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_tsb.hooks.submit_conf import configure_submit, uses_class_data
from airflow_provider_tsb.spark.class_data import ClassDataArchive, executors_run_here, with_class_data
from dev.job_processes import job_command, job_env, wordcount_deployment

TSB = str(Path(sys.executable).parent / "tsb")


def _require_archive(command: list[str], archive: str) -> list[str]:
    """``command`` whose driver must map ``archive`` (``-Xshare:on``: the JVM exits otherwise)."""
    i = command.index("--driver-java-options") + 1
    options = command[i].split()
    options = [o for o in options if not o.startswith("-XX:SharedArchiveFile=")]
    return [*command[:i], " ".join([*options, f"-XX:SharedArchiveFile={archive}", "-Xshare:on"]), *command[i + 1:]]


def test_a_job_driver_maps_the_archive_and_commits(class_data: str, tmp_path: Path) -> None:
    archive = ClassDataArchive()
    assert archive.exists() and class_data == archive.java_options()
    dep = wordcount_deployment(tmp_path, f"sqlite:///{tmp_path / 'tsb.db'}", barriers=1)
    command = job_command(dep, "wordcount_words", 1)
    assert f"-XX:SharedArchiveFile={archive.path}" in command[command.index("--driver-java-options") + 1]
    done = subprocess.run(_require_archive(command, str(archive.path)), env=job_env(dep.url), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert dep.store.table_states.version_at("tsb.wordcount.word_count", 1) is not None
    # the same check fails on an archive the JVM cannot map
    bogus = tmp_path / "not-an-archive.jsa"
    bogus.write_bytes(b"\0" * 4096)
    failed = subprocess.run(_require_archive(job_command(dep, "wordcount_words", 1), str(bogus)),
                            env=job_env(dep.url), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0 and "shared archive" in (failed.stdout + failed.stderr).lower()


def test_tsb_spark_archive_reports_and_deletes(class_data: str, tmp_path: Path) -> None:
    there = subprocess.run([TSB, "spark", "archive"], capture_output=True, text=True, timeout=120)
    assert there.returncode == 0 and f"already there: {ClassDataArchive().path}" in there.stdout
    empty = subprocess.run([TSB, "spark", "archive", "--delete", "--directory", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
    assert empty.returncode == 0 and "no class-data archive at" in empty.stdout


@pytest.mark.parametrize(
    ("connection", "extra", "expected"),
    [
        ({"master": "local[2]", "deploy_mode": None, "spark_binary": "spark-submit"}, {}, True),
        ({"master": "spark://m:7077", "deploy_mode": "client", "spark_binary": "spark-submit"}, {}, True),
        ({"master": "spark://m:7077", "deploy_mode": "cluster", "spark_binary": "spark-submit"}, {}, False),
        ({"master": "yarn", "deploy_mode": None, "spark_binary": "spark3-submit"}, {}, False),
        ({"master": "local[2]", "deploy_mode": None, "spark_home": "/opt/spark"}, {}, False),
        ({"master": "local[2]", "deploy_mode": None}, {"tsb-class-data": "false"}, False),
    ],
)
def test_which_drivers_get_the_archive(connection: dict, extra: dict, expected: bool) -> None:
    assert uses_class_data(connection, extra) is expected


def test_the_archive_goes_after_the_jobs_own_java_options() -> None:
    conf = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1", "spark.ui.enabled": "false"}
    got = with_class_data(conf, "-XX:SharedArchiveFile=/a.jsa")
    assert got["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile=/a.jsa"
    assert "spark.executor.extraJavaOptions" not in got  # local[...]: no executor process
    assert with_class_data(got, "-XX:SharedArchiveFile=/a.jsa") == got  # not twice
    assert with_class_data(conf, "") == conf  # no archive yet: nothing added
    here = with_class_data(conf, "-XX:SharedArchiveFile=/a.jsa", "spark://127.0.0.1:7077")
    assert here["spark.executor.extraJavaOptions"] == "-XX:SharedArchiveFile=/a.jsa"


@pytest.mark.parametrize(("master", "expected"), [
    ("local[2]", False), ("local-cluster[2,1,1024]", True), ("spark://127.0.0.1:7077", True),
    ("spark://localhost:7077,127.0.0.1:7078", True), ("spark://spark-master:7077", False), ("yarn", False),
    ("k8s://https://kube:6443", False),
])
def test_executors_get_the_archive_only_on_this_machine(master: str, expected: bool) -> None:
    assert executors_run_here(master) is expected


def test_the_operators_submit_carries_the_archive(class_data: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CDS", '{"conn_type": "spark", "host": "local[2]"}')
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CDS_OFF",
                       '{"conn_type": "spark", "host": "local[2]", "extra": {"tsb-class-data": "false"}}')
    hook = configure_submit(SparkSubmitHook(conn_id="spark_cds", conf={}), "spark_cds")
    assert hook._conf["spark.driver.extraJavaOptions"] == class_data
    command = hook._build_spark_submit_command("app.py")
    assert f"spark.driver.extraJavaOptions={class_data}" in command
    off = configure_submit(SparkSubmitHook(conn_id="spark_cds_off", conf={}), "spark_cds_off")
    assert "spark.driver.extraJavaOptions" not in off._conf
