"""Object storage for Delta tables: the storage options of a table location, in one place.

Tables may live at ``s3://`` (or ``s3a://``), ``abfss://``/``az://`` or ``gs://`` locations.
Every delta-rs call of the provider that opens or writes a table (``DeltaTable(...)``,
``write_deltalake``, ``create_table_with_add_actions``) and every pyarrow filesystem it
builds for the log reads takes its options from :func:`storage_options` (delta-rs docs,
"Usage > Loading a table > Custom storage backends": ``storage_options`` keys such as
``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``AZURE_STORAGE_ACCOUNT_NAME``,
``GOOGLE_SERVICE_ACCOUNT``). Local paths get ``None`` (no options).

Where the options come from, strongest first: :func:`configure` in this process (the Spark job
hook calls it with the options of its ``storage_conn_id`` Airflow connection); else the JSON
object in ``$TSB_STORAGE_OPTIONS`` (the hook passes it so to ``spark-submit``: the driver of a
job reads and commits with the same options; never on a command line). One set of options
serves every remote location of the process (one bucket or account per topology).

:func:`storage_options_from_connection` turns an Airflow connection (``aws``, ``wasb`` /
``adls`` / ``azure_data_lake``, ``google_cloud_platform``) into delta-rs options; any
connection's extra may also give ``{"storage_options": {...}}`` verbatim (those win).

Commit atomicity (Delta protocol, "Delta Log Entries": a commit file must be created only if it
does not exist): Azure and Google Cloud Storage give it natively. On S3, delta-rs 1.x writes the
commit file with a conditional put (``If-None-Match: *``, supported by AWS S3 since 2024), so
two writers racing for one version cannot overwrite each other (the loser retries on the next
version; ``tests/delta/test_object_storage.py`` shows it against moto's S3 server). An S3-compatible
store without conditional writes needs a locking provider (``AWS_S3_LOCKING_PROVIDER=dynamodb``
with ``DELTA_DYNAMO_TABLE_NAME``); ``AWS_S3_ALLOW_UNSAFE_RENAME=true`` is safe only with a
single writer per table, which a topology guarantees for its sink tables (one writer job) but
not for a root table written by several ingestion processes.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

#: environment variable with the JSON object of storage options (see module doc)
ENV_VAR = "TSB_STORAGE_OPTIONS"

_lock = threading.Lock()
_configured: dict[str, str] | None = None

def is_remote(location: str) -> bool:
    """Whether ``location`` is an object-store URI (not a local path or ``file://``)."""
    return "://" in str(location) and not str(location).startswith("file://")


def configure(options: Mapping[str, str] | None) -> None:
    """Set the storage options of this process (``None``: back to ``$TSB_STORAGE_OPTIONS``)."""
    global _configured
    with _lock:
        _configured = None if options is None else {str(k): str(v) for k, v in options.items()}


def configured_options() -> dict[str, str]:
    """The options of this process (:func:`configure`, else ``$TSB_STORAGE_OPTIONS``; ``{}``).

    Raises:
        ValueError: ``$TSB_STORAGE_OPTIONS`` is not a JSON object (the message says so).
    """
    with _lock:
        if _configured is not None:
            return dict(_configured)
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ValueError(f"${ENV_VAR} must be a JSON object of delta-rs storage options, e.g. "
                         '{"AWS_REGION": "eu-west-1"}')
    return {str(k): str(v) for k, v in value.items()}


def storage_options(location: str) -> dict[str, str] | None:
    """The delta-rs ``storage_options`` for ``location``: ``None`` for a local table or when
    none are configured, else the configured options."""
    if not is_remote(location):
        return None
    return configured_options() or None


def _aws_options(conn: Any, get: Callable[[str], Any], extra: Mapping[str, Any]) -> dict[str, str]:
    """S3 options of an ``aws`` connection (``get``: an extra field, bare or ``extra__aws__``-prefixed)."""
    opts: dict[str, str] = {}
    key_id = conn.login or get("aws_access_key_id")
    secret = conn.password or get("aws_secret_access_key")
    if key_id:
        opts["AWS_ACCESS_KEY_ID"] = key_id
    if secret:
        opts["AWS_SECRET_ACCESS_KEY"] = secret
    if get("aws_session_token"):
        opts["AWS_SESSION_TOKEN"] = get("aws_session_token")
    if get("region_name"):
        opts["AWS_REGION"] = get("region_name")
    endpoint = get("endpoint_url") or ((extra.get("service_config") or {}).get("s3") or {}).get("endpoint_url")
    if endpoint:
        opts["AWS_ENDPOINT_URL"] = endpoint
        if str(endpoint).startswith("http://"):
            opts["AWS_ALLOW_HTTP"] = "true"
    return opts


def _azure_options(conn: Any, get: Callable[[str], Any]) -> dict[str, str]:
    """Azure storage options: a service principal (extra ``tenant_id``) or an account key, and a SAS token."""
    opts: dict[str, str] = {}
    if get("tenant_id"):
        opts.update(AZURE_TENANT_ID=get("tenant_id"), AZURE_CLIENT_ID=conn.login or "",
                    AZURE_CLIENT_SECRET=conn.password or "")
        if get("account_name") or conn.host:
            opts["AZURE_STORAGE_ACCOUNT_NAME"] = get("account_name") or _azure_account(conn.host)
    else:
        opts["AZURE_STORAGE_ACCOUNT_NAME"] = conn.login or get("account_name") or _azure_account(conn.host)
        if conn.password:
            opts["AZURE_STORAGE_ACCOUNT_KEY"] = conn.password
    if get("sas_token"):
        opts["AZURE_STORAGE_SAS_KEY"] = get("sas_token")
    return opts


def _gcp_options(get: Callable[[str], Any]) -> dict[str, str]:
    """GCS options: a service account file (extra ``key_path``) or its JSON (``keyfile_dict``)."""
    opts: dict[str, str] = {}
    if get("key_path"):
        opts["GOOGLE_SERVICE_ACCOUNT"] = get("key_path")
    keyfile = get("keyfile_dict")
    if keyfile:
        opts["GOOGLE_SERVICE_ACCOUNT_KEY"] = keyfile if isinstance(keyfile, str) else json.dumps(keyfile)
    return opts


def storage_options_from_connection(conn: Any) -> dict[str, str]:
    """delta-rs storage options from an Airflow connection (duck-typed: ``conn_type``,
    ``login``, ``password``, ``host``, ``extra_dejson``).

    * ``aws``: ``login``/``password`` (or extra ``aws_access_key_id``/``aws_secret_access_key``),
      extra ``aws_session_token``, ``region_name``, ``endpoint_url`` (also
      ``service_config.s3.endpoint_url``; ``http://`` adds ``AWS_ALLOW_HTTP``);
    * ``wasb``, ``adls``, ``azure_data_lake``, ``azure``: account name ``login`` (or extra
      ``account_name``) and key ``password``; with extra ``tenant_id``, a service principal
      (``login`` = client id, ``password`` = secret); extra ``sas_token``;
    * ``google_cloud_platform``/``gcp``: extra ``key_path`` (a service account file) or
      ``keyfile_dict`` (its JSON);
    * any type: extra ``storage_options`` (a JSON object) is added last, verbatim.

    Raises:
        ValueError: a connection type this does not know and no ``storage_options`` extra.
    """
    kind = (conn.conn_type or "").lower()
    extra: Mapping[str, Any] = conn.extra_dejson or {}

    def get(key: str) -> Any:
        return extra.get(key) or extra.get(f"extra__{kind}__{key}")

    opts: dict[str, str] = {}
    if kind in ("aws", "s3"):
        opts = _aws_options(conn, get, extra)
    elif kind in ("wasb", "adls", "azure_data_lake", "azure"):
        opts = _azure_options(conn, get)
    elif kind in ("google_cloud_platform", "gcp", "google"):
        opts = _gcp_options(get)
    elif not extra.get("storage_options"):
        raise ValueError(
            f"connection type {conn.conn_type!r} gives no Delta storage options: use an 'aws', 'wasb', 'adls' or "
            "'google_cloud_platform' connection, or put {\"storage_options\": {...}} in its extra"
        )
    verbatim = extra.get("storage_options") or {}
    if isinstance(verbatim, str):
        verbatim = json.loads(verbatim)
    opts.update({str(k): str(v) for k, v in verbatim.items()})
    return {k: str(v) for k, v in opts.items() if v not in (None, "")}


def _azure_account(host: str | None) -> str:
    """The account of ``<account>.blob.core.windows.net`` / ``.dfs.`` (or the host itself)."""
    return (host or "").split("://")[-1].split(".")[0]


def pyarrow_filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path without scheme)`` for a remote ``location``, built with the storage
    options: ``S3FileSystem`` (keys, token, region, endpoint) for ``s3://``/``s3a://``,
    ``AzureFileSystem`` (account name and key) for ``abfs[s]://``/``az://``, else pyarrow's own
    resolution of the URI (``gs://`` with the environment's Google credentials)."""
    opts = configured_options()
    parsed = urlparse(location)
    scheme = parsed.scheme.lower()
    path = (parsed.netloc + parsed.path).rstrip("/")
    if scheme in ("s3", "s3a") and opts:
        endpoint = opts.get("AWS_ENDPOINT_URL") or opts.get("AWS_ENDPOINT")
        kwargs: dict[str, Any] = {
            "access_key": opts.get("AWS_ACCESS_KEY_ID"), "secret_key": opts.get("AWS_SECRET_ACCESS_KEY"),
            "session_token": opts.get("AWS_SESSION_TOKEN"), "region": opts.get("AWS_REGION"),
        }
        if endpoint:
            ep = urlparse(endpoint)
            kwargs.update(endpoint_override=ep.netloc or ep.path, scheme=ep.scheme or "https")
        return pafs.S3FileSystem(**{k: v for k, v in kwargs.items() if v is not None}), path
    if scheme in ("abfs", "abfss", "az", "adl") and opts.get("AZURE_STORAGE_ACCOUNT_NAME"):
        account = opts["AZURE_STORAGE_ACCOUNT_NAME"]
        fs = pafs.AzureFileSystem(account_name=account, account_key=opts.get("AZURE_STORAGE_ACCOUNT_KEY"))
        container = parsed.netloc.split("@")[0]
        return fs, (container + parsed.path).rstrip("/")
    fs, resolved = pafs.FileSystem.from_uri(location)
    return fs, resolved.rstrip("/")
