"""The NDJSON lines of the Delta Sharing answers (PROTOCOL.md "API Response Actions in Parquet
Format") and the file download of a signed URL.

* :func:`metadata_lines`: ``{"protocol": {"minReaderVersion": 1}}`` and ``{"metaData": {id,
  format, schemaString, partitionColumns, configuration}}`` of the Delta version read;
* :func:`query_lines`: those two and one ``{"file": {url, id, partitionValues, size, stats,
  expirationTimestamp}}`` per Parquet file (``stats`` holds ``numRecords`` when known);
* :func:`change_lines`: those two and, per barrier ``k``, ``{"add": ...}`` for each file of
  barrier ``k`` not in barrier ``k - 1`` and ``{"remove": ...}`` for each file of ``k - 1`` no
  longer in ``k``, with ``version`` = ``k`` and ``timestamp`` = the barrier's time (epoch ms);
* :func:`file_response`: the bytes of a file (HTTP ``Range`` honoured: local files by
  Starlette's ``FileResponse``, object-store files by a ranged read).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from fastapi.responses import FileResponse, Response

from airflow_provider_tsb.api.sharing.files import DataFile, local_file, snapshot, snapshot_files, version_files
from airflow_provider_tsb.api.sharing.model import BarrierSteps
from airflow_provider_tsb.exceptions import InconsistentReadError, TableNotFoundError
from airflow_provider_tsb.metastore.records import TableVersion

#: ``(table root, relative path) -> (url, file id)``
Signer = Callable[[str, str], tuple[str, str]]


def _header(location: str, version: int | None, table: str) -> list[dict[str, Any]]:
    if version is None:
        raise InconsistentReadError(f"table {table} has no committed Delta version at this barrier yet")
    snap = snapshot(location, version)
    return [
        {"protocol": {"minReaderVersion": 1}},
        {"metaData": {
            "id": snap.meta_id, "format": {"provider": "parquet"}, "schemaString": snap.schema_json,
            "partitionColumns": list(snap.partition_columns), "configuration": dict(snap.configuration),
        }},
    ]


def metadata_lines(tv: TableVersion) -> list[dict[str, Any]]:
    """Protocol and metaData lines of resolved version ``tv`` (of its base version when PROCESSED)."""
    return _header(tv.location, tv.version, tv.table)


def _file(f: DataFile, location: str, expires: int, signer: Signer) -> dict[str, Any]:
    url, fid = signer(os.fspath(location), f.path)
    out: dict[str, Any] = {"url": url, "id": fid, "partitionValues": f.partition_values, "size": f.size,
                           "expirationTimestamp": expires}
    if f.num_records is not None:
        out["stats"] = json.dumps({"numRecords": int(f.num_records)})
    return out


def query_lines(tv: TableVersion, expires: int, signer: Signer) -> list[dict[str, Any]]:
    """The lines of a snapshot query of ``tv`` (URLs valid until ``expires``, epoch ms)."""
    lines = metadata_lines(tv)
    lines.extend({"file": _file(f, tv.location, expires, signer)} for f in version_files(tv))
    return lines


def change_lines(table: str, steps: BarrierSteps, expires: int, signer: Signer) -> list[dict[str, Any]]:
    """The lines of a changes answer over ``steps`` (see module doc)."""
    newest = max(steps.versions)
    lines = _header(steps.location, steps.versions[newest], table)
    cache: dict[int | None, dict[str, DataFile]] = {None: {}}

    def files(version: int | None) -> dict[str, DataFile]:
        if version not in cache:
            cache[version] = {f.path: f for f in snapshot_files(steps.location, version)}  # type: ignore[arg-type]
        return cache[version]

    for k in sorted(steps.ts_ms):
        before, after = files(steps.versions.get(k - 1)), files(steps.versions[k])
        extra = {"version": k, "timestamp": steps.ts_ms[k]}
        for path in sorted(after.keys() - before.keys()):
            lines.append({"add": {**_file(after[path], steps.location, expires, signer), **extra}})
        for path in sorted(before.keys() - after.keys()):
            lines.append({"remove": {**_file(before[path], steps.location, expires, signer), **extra}})
    return lines


def _range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end inclusive)`` of a single ``bytes=`` range, or ``None`` for the whole file."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[len("bytes="):].partition("-")
    try:
        if first == "":
            start, end = max(size - int(last), 0), size - 1
        else:
            start, end = int(first), (int(last) if last else size - 1)
    except ValueError:
        return None
    return (start, min(end, size - 1)) if start <= end and start < size else None


def file_response(root: str, path: str, range_header: str | None) -> Response:
    """The file ``path`` under table ``root``.

    Raises:
        ForbiddenFileError: the path leaves the root.
        TableNotFoundError: the file is gone (404).
    """
    from airflow_provider_tsb.delta.log import filesystem, join
    from airflow_provider_tsb.delta.storage import is_remote

    if not is_remote(root):
        full = local_file(root, path)
        if not os.path.isfile(full):
            raise TableNotFoundError("the file of this URL is gone (removed by snapshot expiry?)")
        return FileResponse(full, media_type="application/octet-stream")
    fs, remote = filesystem(join(root, path))
    info = fs.get_file_info(remote)
    if info.size is None:
        raise TableNotFoundError("the file of this URL is gone (removed by snapshot expiry?)")
    span = _range(range_header, info.size)
    with fs.open_input_file(remote) as fh:
        if span is None:
            return Response(fh.read(), media_type="application/octet-stream", headers={"accept-ranges": "bytes"})
        fh.seek(span[0])
        data = fh.read(span[1] - span[0] + 1)
    return Response(data, status_code=206, media_type="application/octet-stream",
                    headers={"content-range": f"bytes {span[0]}-{span[1]}/{info.size}", "accept-ranges": "bytes"})
