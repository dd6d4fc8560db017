"""Delta's jars on every Spark tsb starts (issue 58 item 1): the conf each Spark gets, and the
error a missing or mismatched jar gives before any Spark starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_tsb.spark import delta_jars as dj


def test_every_spark_gets_the_jars_extension_and_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dj.JARS_ENV, str(tmp_path))
    for a in dj.artifacts():
        (tmp_path / a.jar).write_bytes(b"jar")
    conf = dj.delta_conf({"spark.jars": "/opt/own.jar", dj.EXTENSIONS: "com.acme.Ext"})
    jars = conf["spark.jars"].split(",")
    assert jars[0] == "/opt/own.jar" and {Path(j).name for j in jars[1:]} == {a.jar for a in dj.artifacts()}
    assert conf[dj.EXTENSIONS] == f"com.acme.Ext,{dj.DELTA_EXTENSION}" and conf[dj.CATALOG] == dj.DELTA_CATALOG
    assert dj.delta_conf(conf) == conf  # idempotent: a conf that has them gets nothing twice
    assert any(a.artifact.startswith("delta-spark_4.2_") for a in dj.artifacts())


def test_packages_and_provided_modes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(dj.JARS_ENV, str(tmp_path / "none"))  # no jars needed in these modes
    monkeypatch.setenv(dj.MODE_ENV, "packages")
    conf = dj.delta_conf({})
    assert "spark.jars" not in conf and conf["spark.jars.packages"].startswith("io.delta:delta-spark_4.2_2.13:")
    monkeypatch.setenv(dj.MODE_ENV, "provided")
    assert dj.delta_conf({dj.CATALOG: "com.acme.Catalog"}) == {
        dj.EXTENSIONS: dj.DELTA_EXTENSION, dj.CATALOG: "com.acme.Catalog",
        **{k: v for k, v in dj.DELTA_SQL_CONF.items() if k not in (dj.EXTENSIONS, dj.CATALOG)}}
    monkeypatch.setenv(dj.MODE_ENV, "bogus")
    with pytest.raises(dj.DeltaJarsError, match="TSB_DELTA_JARS='bogus' is not one of cache, packages, provided"):
        dj.delta_conf({})


def test_a_missing_jar_fails_at_start_naming_it_and_the_fix(tmp_path: Path) -> None:
    env = {"TSB_JARS_DIR": str(tmp_path / "empty"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "airflow_provider_tsb", "spark", "jars"], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "delta-spark_4.2_2.13-" in done.stderr and "tsb spark jars --fetch" in done.stderr


def test_a_pom_for_another_spark_line_is_refused() -> None:
    with pytest.raises(dj.DeltaJarsError, match=r"built for Spark 4\.2, but pyspark is 4\.1\.0"):
        dj.check_spark_line("4.1.0")
    dj.check_spark_line("4.2.0")


def test_without_maven_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(dj.DeltaJarsError, match=r"Maven \(`mvn`\) is not installed"):
        dj.fetch(tmp_path / "jars")


def test_packages_mode_leaves_out_the_aws_sdk_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """hadoop-aws names the whole AWS SDK bundle (hundreds of MB); Spark's own resolution leaves it
    out for the SDK modules the pom names, as ``copy-dependencies`` does."""
    monkeypatch.setenv(dj.MODE_ENV, "packages")
    conf = dj.delta_conf({"spark.jars.excludes": "com.acme:big"})
    packages = conf["spark.jars.packages"].split(",")
    assert "org.apache.hadoop:hadoop-aws:3.5.0" in packages and "software.amazon.awssdk:s3:2.35.4" in packages
    assert conf["spark.jars.excludes"] == "com.acme:big,software.amazon.awssdk:bundle"


def test_storage_options_become_s3a_session_settings() -> None:
    from airflow_provider_tsb.spark.hadoop_fs import S3A_FILESYSTEM, hadoop_settings

    assert hadoop_settings({}) == {} and hadoop_settings({"AZURE_STORAGE_ACCOUNT_NAME": "acct"}) == {}
    assert hadoop_settings({"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "AWS_REGION": "us-east-1",
                            "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true"}) == {
        "fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK", "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false", "fs.s3.impl": S3A_FILESYSTEM}
    temporary = hadoop_settings({"aws_session_token": "T", "AWS_ENDPOINT": "https://s3.acme.example",
                                 "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"})
    assert temporary["fs.s3a.session.token"] == "T" and temporary["fs.s3a.path.style.access"] == "false"
    assert temporary["fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert "fs.s3a.connection.ssl.enabled" not in temporary
