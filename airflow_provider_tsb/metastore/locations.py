"""Table locations the registry accepts.

A location is absolute (a path from ``/`` or a URI such as ``s3://bucket/...``) and has no ``..``
segment: every process -- the scheduler, the Spark driver and executors, the api-server -- must
find a table at the same place whatever its working directory, and ``..`` can point a table
outside its warehouse. A registered table keeps its location: registering it again elsewhere
(the REST API's ``/register/*`` with another ``location``, a changed declaration) is refused
instead of being silently ignored. Where allowed roots are set (``[tsb]
allowed_location_roots``: the REST API always, the Python API when configured), a location
must lie strictly under one of them (:func:`check_location`).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence

from airflow_provider_tsb.exceptions import InvalidLocationError, LocationNotAllowedError, TableLocationConflictError

#: URI schemes of Delta table locations: local files and the object stores delta-rs and Spark's
#: Delta open (S3, GCS, Azure, HDFS; ``memory`` for tests)
TABLE_SCHEMES = frozenset({"file", "s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "azure", "hdfs",
                           "lakefs", "memory"})


def check_table_location(name: str, location: str, roots: Sequence[str] | None = None) -> str:
    """``location`` when it is absolute (a path from ``/`` or a URI of :data:`TABLE_SCHEMES`) with
    no ``..`` segment, and under one of ``roots`` when given (:func:`check_location`).

    Every process -- the scheduler, the Spark driver and executors, the api-server -- must find a
    table at the same place whatever its working directory, and a ``..`` segment can point a
    table outside its warehouse.

    Raises:
        InvalidLocationError: names the table and the location, and says what to give.
        LocationNotAllowedError: outside ``roots`` (names the location and the roots).
    """
    path = location.split("://", 1)[1] if "://" in location else location
    scheme = location.split("://", 1)[0].lower() if "://" in location else None
    if "://" not in location and not location.startswith("/"):
        problem = "is relative"
    elif scheme is not None and scheme not in TABLE_SCHEMES:
        problem = f"has the scheme {scheme!r}, which no Delta reader opens (use one of {sorted(TABLE_SCHEMES)})"
    elif ".." in path.replace("\\", "/").split("/"):
        problem = "contains a '..' segment"
    else:
        check_location(location, roots)
        return location
    raise InvalidLocationError(
        f"table {name!r}: location {location!r} {problem}; give an absolute path (/data/warehouse/...) or a URI "
        "(s3://bucket/...) without '..', so that every process finds the table at the same place"
    )


def check_same_location(name: str, registered: str, asked: str | None) -> None:
    """TableLocationConflictError when ``asked`` is given and is not the ``registered`` location
    of table ``name``: a re-registration never moves a table silently."""
    from airflow_provider_tsb.delta.log import normalize_location

    if asked and normalize_location(asked) != normalize_location(registered):
        raise TableLocationConflictError(
            f"table {name!r} is registered at location {registered!r} and registered again at {asked!r}; a table "
            "keeps its location: move the table and its registration together (unregister its jobs, register "
            "it anew) or fix the declaration"
        )


def check_table_kind(name: str, kind: str) -> None:
    """TopologyError unless ``kind`` is a table kind (``root``, ``intermediate``, ``external``)."""
    from airflow_provider_tsb.exceptions import TopologyError

    if kind not in ("root", "intermediate", "external"):
        raise TopologyError(f"table {name!r}: kind {kind!r} is not a table kind; give 'root' (written from "
                            "outside the topology), 'intermediate' (written by one job) or 'external'")


__all__ = ["TABLE_SCHEMES", "check_same_location", "check_table_kind", "check_table_location"]


def _split(location: str) -> tuple[str, str]:
    """(scheme, normalised path); ``file://`` and plain paths have scheme ``""``."""
    scheme, sep, rest = location.partition("://")
    if not sep:
        return "", os.path.realpath(location)
    if scheme == "file":
        return "", os.path.realpath(rest)
    return scheme.lower(), rest


def check_location(location: str, roots: Sequence[str] | None) -> None:
    """Refuse a table ``location`` that is not strictly under one of ``roots``.

    Plain paths and ``file://`` URIs must be absolute and are compared after resolving ``..``
    and symbolic links; other URIs (``s3://bucket/...``) must start with a root and hold no
    ``.``/``..`` segment.

    Raises:
        LocationNotAllowedError: names the location and the allowed roots.
    """
    if roots is None:
        return
    scheme, path = _split(location)
    plain = location.partition("://")[2] if "://" in location else location
    bad = ""
    if not scheme and not plain.startswith("/"):
        bad = "it is not an absolute path"
    elif scheme and any(seg in (".", "..") for seg in path.split("/")):
        bad = "it holds a '.' or '..' segment"
    else:
        for root in roots:
            r_scheme, r_path = _split(root)
            if r_scheme != scheme:
                continue
            if scheme:
                if path.startswith(r_path.rstrip("/") + "/"):
                    return
            elif path != r_path and posixpath.commonpath([path, r_path]) == r_path:
                return
        bad = "it is outside the allowed roots"
    raise LocationNotAllowedError(
        f"table location {location!r} is not allowed: {bad}; tables live under {list(roots)} "
        "([tsb] allowed_location_roots, default the warehouse)"
    )


def configured_location_roots() -> list[str] | None:
    """``[tsb] allowed_location_roots`` (comma-separated paths or URIs) when it is set, else
    ``None``: the REST API keeps to the warehouse by default, the Python API of a DAG file or a
    task (trusted code, whose root tables may live anywhere) only to roots configured."""
    from airflow_provider_tsb.airflow_config import airflow_option

    roots = [r.strip() for r in (airflow_option("tsb", "allowed_location_roots") or "").split(",") if r.strip()]
    return roots or None
