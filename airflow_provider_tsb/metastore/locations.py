"""Table locations the registry accepts (issue 25 item 5).

A location is absolute (a path from ``/`` or a URI such as ``s3://bucket/...``) and has no ``..``
segment: every process -- the scheduler, the Spark driver and executors, the api-server -- must
find a table at the same place whatever its working directory, and ``..`` can point a table
outside its warehouse. A registered table keeps its location: registering it again elsewhere
(the REST API's ``/register/*`` with another ``location``, a changed declaration) is refused
instead of being silently ignored.
"""

from __future__ import annotations

from airflow_provider_tsb.exceptions import InvalidLocationError, TableLocationConflictError

#: URI schemes of Delta table locations: local files and the object stores delta-rs and Spark's
#: Delta open (S3, GCS, Azure, HDFS; ``memory`` for tests)
TABLE_SCHEMES = frozenset({"file", "s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "azure", "hdfs",
                           "lakefs", "memory"})


def check_table_location(name: str, location: str) -> str:
    """``location`` when it is absolute (a path from ``/`` or a URI of :data:`TABLE_SCHEMES`) with
    no ``..`` segment.

    Every process -- the scheduler, the Spark driver and executors, the api-server -- must find a
    table at the same place whatever its working directory, and a ``..`` segment can point a
    table outside its warehouse (issue 25 item 5).

    Raises:
        InvalidLocationError: names the table and the location, and says what to give.
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
        return location
    raise InvalidLocationError(
        f"table {name!r}: location {location!r} {problem}; give an absolute path (/data/warehouse/...) or a URI "
        "(s3://bucket/...) without '..', so that every process finds the table at the same place"
    )


def check_same_location(name: str, registered: str, asked: str | None) -> None:
    """TableLocationConflictError when ``asked`` is given and is not the ``registered`` location
    of table ``name`` (issue 25 item 5: a re-registration never moves a table silently)."""
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
