"""Spark's Hadoop filesystem settings for tables on object storage, from the storage options.

The control plane reaches ``s3://`` tables through delta-rs with its storage options
(:mod:`airflow_provider_tsb.delta.storage`: ``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...);
Spark reaches them through Hadoop's S3A connector (``hadoop-aws``, fetched with Delta's jars:
``spark/jvm/pom.xml``). :func:`hadoop_settings` turns the first into the second, so one Airflow
connection (``storage_conn_id``) serves both sides of a job. The settings are session
settings: :func:`~airflow_provider_tsb.spark.session.get_spark` sets them on each job's own
session (a Spark Connect session, or the driver a job starts), and Spark hands every setting of
a session to the Hadoop configuration of its reads and writes
(``SessionState.newHadoopConf``), Delta's log included. They never go on a command line, and
Spark's UI redacts them (``spark.redaction.regex`` matches ``secret``, ``token`` and
``access.key``).

Both ``s3://`` and ``s3a://`` locations work from Spark: ``fs.s3.impl`` maps ``s3://`` to S3A
(Hadoop docs, "Hadoop-AWS module: Integration with Amazon Web Services").

Hadoop's filesystem cache keeps one S3A client per bucket and user in a JVM: on a shared Spark
Connect server the first session to open a bucket fixes its credentials, so give a server one
set of credentials per bucket (or start it with ``--conf spark.hadoop.fs.s3a.*``).

Azure (``abfss://``, ``hadoop-azure``) and GCS (``gs://``, the GCS connector) are configured
on the Spark side as Hadoop settings of their own (docs/engines.md "Tables on object
storage"); this module maps only S3.
"""

from __future__ import annotations

from collections.abc import Mapping

#: the S3A connector's filesystem class (``hadoop-aws``)
S3A_FILESYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
#: delta-rs option (object_store's ``AmazonS3ConfigKey``) -> S3A setting, where one maps to one
_S3A_KEYS = {
    "AWS_ACCESS_KEY_ID": "fs.s3a.access.key",
    "AWS_SECRET_ACCESS_KEY": "fs.s3a.secret.key",
    "AWS_SESSION_TOKEN": "fs.s3a.session.token",
    "AWS_REGION": "fs.s3a.endpoint.region",
}
_TRUE = {"1", "true", "yes", "on"}


def hadoop_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The S3A session settings of delta-rs storage ``options``; ``{}`` without S3 options.

    Keys read: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN`` (then the
    temporary-credentials provider), ``AWS_REGION``, ``AWS_ENDPOINT_URL`` (or
    ``AWS_ENDPOINT``: an S3-compatible server, addressed path-style unless
    ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST`` is true, over plain HTTP when its URL says ``http://``).

    Example::

        >>> hadoop_settings({"AWS_REGION": "eu-west-1"})["fs.s3a.endpoint.region"]
        'eu-west-1'
    """
    opts = {str(k).upper(): str(v) for k, v in options.items()}
    out = {key: opts[name] for name, key in _S3A_KEYS.items() if opts.get(name)}
    if opts.get("AWS_SESSION_TOKEN"):
        out["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    endpoint = opts.get("AWS_ENDPOINT_URL") or opts.get("AWS_ENDPOINT")
    if endpoint:
        out["fs.s3a.endpoint"] = endpoint
        virtual = opts.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "").lower() in _TRUE
        out["fs.s3a.path.style.access"] = "false" if virtual else "true"
        if endpoint.lower().startswith("http://"):
            out["fs.s3a.connection.ssl.enabled"] = "false"
    if out:
        out["fs.s3.impl"] = S3A_FILESYSTEM
    return out
