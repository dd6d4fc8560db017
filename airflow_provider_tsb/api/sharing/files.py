"""Files of a shared table version and their signed URLs (Delta Sharing "Read Data from a Table").

A query answers one ``file`` line per Parquet file of the table at the barrier's Delta version
(:func:`version_files`), with a URL the client fetches without the bearer token:
``{endpoint}/files/{token}``. The token is opaque: a Fernet token (AES-128-CBC and
HMAC-SHA256, ``cryptography``) of ``[table root, path relative to it, expiry epoch ms,
principal]`` under :func:`signing_key`, Airflow's ``[api] secret_key`` when set (every
api-server worker of a deployment shares it), else a random key per process (URLs then work
only against the worker that made them). So a URL discloses nothing of the server's paths, and
names who it was issued to: the file route refuses it once that recipient (or Airflow token) is
revoked. :func:`grant` refuses a forged or expired token and a path outside the table root
(``..``, absolute paths): all :class:`ForbiddenFileError` (403).

Tables on object storage are served the same way (the api-server streams the object with the
deployment's storage options, :mod:`airflow_provider_tsb.delta.storage`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import posixpath
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import TTLCache
from cryptography.fernet import Fernet, InvalidToken

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.exceptions import ForbiddenFileError
from airflow_provider_tsb.metastore.records import BarrierState, TableVersion, now_ms

_process_key = secrets.token_bytes(32)


@dataclass(frozen=True)
class DataFile:
    """One Parquet file of a table version.

    Attributes:
        path: path relative to the table root (Delta ``add.path``, URL-decoded).
        size: bytes.
        partition_values: ``{column: value as string or None}``.
        num_records: rows, when the log records it.
    """

    path: str
    size: int
    partition_values: dict[str, str | None]
    num_records: int | None = None


def signing_key() -> bytes:
    """The URL key: SHA-256 of Airflow's ``[api] secret_key``, else a random per-process key."""
    secret = None
    try:
        from airflow.configuration import conf

        secret = conf.get("api", "secret_key", fallback=None)
    except Exception:  # noqa: BLE001 - no Airflow config: the per-process key
        secret = None
    if not secret:
        return _process_key
    return hashlib.sha256(b"tsb-sharing:" + secret.encode()).digest()


def _fernet(key: bytes | None) -> Fernet:
    return Fernet(base64.urlsafe_b64encode(key or signing_key()))


@dataclass(frozen=True)
class FileGrant:
    """What a valid file URL opens: one file of one table, until ``expires_ms``, for ``principal``.

    Attributes:
        root: the table root (never shown to the client: the URL is encrypted).
        path: the file's path relative to ``root``, normalised.
        expires_ms: epoch ms after which the URL is refused.
        principal: who the URL was issued to: ``recipient:<id>``, ``jwt:<jti>`` (an Airflow user's
            token), or ``None`` (a standalone app without authentication); the file route refuses
            the URL once that principal is revoked (:func:`~.auth.check_principal`).
    """

    root: str
    path: str
    expires_ms: int
    principal: str | None = None


def sign(root: str, path: str, expires_ms: int, key: bytes | None = None, principal: str | None = None) -> str:
    """An opaque URL token for file ``path`` (relative) of the table at ``root`` until
    ``expires_ms``, issued to ``principal`` (see :class:`FileGrant`)."""
    payload = json.dumps([root, path, int(expires_ms), principal], separators=(",", ":")).encode()
    return _fernet(key).encrypt(payload).decode().rstrip("=")


def grant(token: str, key: bytes | None = None, now: int | None = None) -> FileGrant:
    """The :class:`FileGrant` of a valid token.

    Raises:
        ForbiddenFileError: malformed, forged or expired token, or a path outside the root.
    """
    try:
        payload = _fernet(key).decrypt((token + "=" * (-len(token) % 4)).encode())
        root, path, expires, principal = json.loads(payload)
    except (InvalidToken, ValueError, TypeError):
        raise ForbiddenFileError("invalid file URL signature") from None
    if not isinstance(root, str) or not isinstance(path, str) or not isinstance(expires, int) \
            or not isinstance(principal, str | None):
        raise ForbiddenFileError("invalid file URL signature")
    if expires <= (now if now is not None else now_ms()):
        raise ForbiddenFileError("this file URL has expired: query the table again for fresh URLs")
    normal = posixpath.normpath(path)
    if path.startswith("/") or normal.startswith("..") or "://" in path:
        raise ForbiddenFileError("the file URL names a path outside its table")
    return FileGrant(root, normal, expires, principal)


def verify(token: str, key: bytes | None = None, now: int | None = None) -> tuple[str, str]:
    """``(table root, relative path)`` of a valid token (:func:`grant`).

    Raises:
        ForbiddenFileError: malformed, forged or expired token, or a path outside the root.
    """
    found = grant(token, key, now)
    return found.root, found.path


def local_file(root: str, path: str) -> str:
    """The absolute local path of ``path`` under ``root``, refusing links that leave the root.

    Raises:
        ForbiddenFileError: the real path is outside the root's real path.
    """
    real_root = os.path.realpath(root)
    full = os.path.realpath(os.path.join(real_root, path))
    if os.path.commonpath([full, real_root]) != real_root:
        raise ForbiddenFileError("the file URL names a path outside its table")
    return full


def _partition_values(row: Mapping[str, Any]) -> dict[str, str | None]:
    return {k[len("partition."):]: (None if v is None else str(v)) for k, v in row.items()
            if k.startswith("partition.")}


@dataclass(frozen=True)
class Snapshot:
    """What a Delta Sharing answer needs of one committed Delta version (immutable).

    Attributes:
        meta_id: the table's ``metaData.id``.
        schema_json: the schema as Delta's JSON string.
        partition_columns: partition column names.
        configuration: the table properties.
        files: the version's Parquet files.
    """

    meta_id: str
    schema_json: str
    partition_columns: tuple[str, ...]
    configuration: dict[str, str]
    files: tuple[DataFile, ...]


#: seconds a loaded snapshot is kept per process (a committed Delta version never changes; the
#: bound covers a table dropped and created again at the same location)
SNAPSHOT_CACHE_SECONDS = 60.0
#: snapshots kept per process
SNAPSHOT_CACHE_SIZE = 256
_snapshots: TTLCache[tuple[str, int], Snapshot] = CACHES.add(
    "api.sharing.snapshots", TTLCache(SNAPSHOT_CACHE_SIZE, SNAPSHOT_CACHE_SECONDS))
_snapshots_lock = threading.Lock()


def snapshot(location: str, version: int) -> Snapshot:
    """The :class:`Snapshot` of the Delta table at ``location``, ``version``: one snapshot load
    (delta-rs), then kept per process for :data:`SNAPSHOT_CACHE_SECONDS` (loading it is most of
    a query's time: docs/benchmarks.md).

    Raises:
        TableNotFoundError, DeltaLogError: as :func:`~airflow_provider_tsb.delta.log.open_table`.
    """
    from urllib.parse import unquote

    import pyarrow as pa

    from airflow_provider_tsb.delta.log import open_table

    key = (os.fspath(location), version)
    with _snapshots_lock:
        found = _snapshots.get(key)
    if found is not None:
        return found
    dt = open_table(location, version)
    meta = dt.metadata()
    rows = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    files = tuple(DataFile(unquote(r["path"]), int(r["size_bytes"]), _partition_values(r), r.get("num_records"))
                  for r in rows)
    found = Snapshot(meta.id, dt.schema().to_json(), tuple(meta.partition_columns),
                     dict(meta.configuration or {}), files)
    with _snapshots_lock:
        _snapshots[key] = found
    return found


def snapshot_files(location: str, version: int) -> list[DataFile]:
    """The files of the Delta table at ``location``, ``version`` (:func:`snapshot`).

    Raises:
        TableNotFoundError, DeltaLogError: as :func:`~airflow_provider_tsb.delta.log.open_table`.
    """
    return list(snapshot(location, version).files)


def version_files(tv: TableVersion) -> list[DataFile]:
    """The files of a resolved version: a WRITTEN version's files; a PROCESSED one (READ_COMMITTED)
    is its previous version with the staged manifest applied (``overwrite``: the staged files;
    ``append``: both, minus ``removes``). The version's Delta log is verified first
    (:func:`~airflow_provider_tsb.read.version_reads.verify_served`: ``DeltaLogIntegrityError``
    when it does not give the live files its barrier's commit recorded)."""
    from airflow_provider_tsb.read.version_reads import verify_served

    verify_served(tv)
    base = snapshot_files(tv.location, tv.version) if tv.version is not None else []
    if tv.state != BarrierState.PROCESSED or not tv.staged:
        return base
    staged = []
    for entry in tv.staged.get("files") or []:
        meta: Mapping[str, Any] = entry if isinstance(entry, Mapping) else {"path": entry}
        path = str(meta["path"])
        size = int(meta.get("size") or _size(tv.location, path))  # the data plane's entries carry it
        staged.append(DataFile(path, size, dict(meta.get("partition_values") or {}), meta.get("num_records")))
    if tv.staged.get("mode") == "overwrite":
        return staged
    removes = {str(p) for p in tv.staged.get("removes") or []}
    return [f for f in base if f.path not in removes] + staged


def _size(location: str, path: str) -> int:
    from airflow_provider_tsb.delta.log import filesystem, join

    fs, full = filesystem(join(location, path))
    return int(fs.get_file_info(full).size or 0)


def file_id(location: str, path: str) -> str:
    """A stable id of a file: a hash of its table root and path."""
    return hashlib.sha256(f"{location}\0{path}".encode()).hexdigest()[:32]
