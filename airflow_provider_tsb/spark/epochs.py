"""What both table readers share: the change columns, epochs and data-skipping ranges.

Leaf helpers of :mod:`airflow_provider_tsb.spark.inputs` (the public reads) and its two
readers, :mod:`.inputs_delta` (Spark's Delta reader) and :mod:`.inputs_files` (the file list of
a plain table). Metadata only: the ranges come from the Delta log's per-file statistics
(delta-rs), never from data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from airflow_provider_tsb.delta.log import normalize_location, read_commit_actions
from airflow_provider_tsb.delta.snapshots import Snapshot, snapshot_at
from airflow_provider_tsb.exceptions import DeltaLogError
from airflow_provider_tsb.spark.timing import phase

#: Columns added by :func:`~airflow_provider_tsb.spark.inputs.read_changes`.
CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
#: Spark's hidden file metadata column of a file scan (its ``file_path`` names a row's file)
METADATA = "_metadata"
#: ``_change_type`` values that add a row / remove a row.
INSERT_TYPES = ("insert", "update_postimage")
DELETE_TYPES = ("delete", "update_preimage")
#: data skipping ranges, ``{column: (min, max)}``; a column mapped to ``None`` has an empty range
#: (an epoch that added no row): no file overlaps it
Ranges = Mapping[str, "tuple[Any, Any] | None"]


def overlaps(entry: Mapping[str, Any], within: Ranges) -> bool:
    """Whether a file's [min, max] overlaps every range (unknown statistics overlap; an empty
    range, ``None``, none)."""
    for column, bounds in within.items():
        if bounds is None:
            return False
        lo, hi = bounds
        fmin, fmax = entry["min"].get(column), entry["max"].get(column)
        if fmin is None or fmax is None or lo is None or hi is None:
            continue
        if fmin > hi or fmax < lo:
            return False
    return True


def change_ranges(location: str, from_version: int | None, to_version: int, columns: Sequence[str]) -> dict[
    str, tuple[Any, Any] | None
]:
    """``{column: (min, max)}`` over the files added in the epoch ``(from_version, to_version]``.

    From the Delta statistics of the added files (no data is read), for
    :func:`read_snapshot`'s ``within``. A column some added file has no min/max for (a decimal,
    a boolean, a nested column) is ``(None, None)``: unbounded, no skipping on it; an epoch
    that added no row (no file, or files whose ``numRecords``
    is 0) gives ``None`` for every column (an empty range: ``read_snapshot(within=...)`` then
    reads no file, where ``{}`` would read them all).
    Timestamp statistics are truncated to milliseconds by Delta writers; truncation is
    monotonic, so overlaps are kept. A file the epoch added and a later commit of the same epoch
    compacted away (``dataChange = false``, a root's auto compaction) is counted by the files
    that compaction wrote: a wider range, never a missed row.

    Raises:
        DeltaLogError: a commit in the range is missing from the log.
    """
    loc = normalize_location(location)
    start = -1 if from_version is None else from_version
    with phase("delta_log"):
        added: set[str] = set()
        for version in range(start + 1, to_version + 1):
            actions = read_commit_actions(loc, version)
            if actions is None:
                raise DeltaLogError(f"Delta log of {loc!r} has no commit {version}: cannot read its changes")
            if any("remove" in a and not a["remove"].get("dataChange", True) and a["remove"]["path"] in added
                   for a in actions):  # a compaction rewrote rows the epoch added: they are in its files now
                added.update(a["add"]["path"] for a in actions if "add" in a and not a["add"].get("dataChange", True))
            added.update(a["add"]["path"] for a in actions if "add" in a and a["add"].get("dataChange", True))
        if not added:
            return dict.fromkeys(columns)
        entries = [e for e in add_entries(snapshot_at(loc, to_version), stats_of=list(columns))
                   if e["path"] in added and e["rows"] != 0]  # a file of no row has no range (no min/max)
        if not entries:
            return dict.fromkeys(columns)
    out: dict[str, tuple[Any, Any] | None] = {}
    for column in columns:
        mins = [e["min"].get(column) for e in entries]
        maxs = [e["max"].get(column) for e in entries]
        known = entries and all(v is not None for v in mins + maxs)
        out[column] = (min(mins), max(maxs)) if known else (None, None)
    return out


def add_entries(table: Snapshot, stats_of: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Active files of a snapshot as ``{"path", "partitionValues", "min", "max", "rows"}``
    (metadata only).

    ``min``/``max``: ``{column: value}`` of the statistics of ``stats_of`` (``None`` when absent);
    ``rows``: the file's ``numRecords`` statistic (``None`` when absent).
    """
    actions = table.add_actions
    names = set(actions.column_names)
    part_cols = [c for c in actions.column_names if c.startswith("partition.")]
    stat_cols = [f"{k}.{c}" for c in stats_of for k in ("min", "max") if f"{k}.{c}" in names]
    count_col = ["num_records"] if "num_records" in names else []
    rows = actions.select(["path", *part_cols, *stat_cols, *count_col]).to_pylist()
    return [
        {
            "path": row["path"],
            "rows": row.get("num_records"),
            "partitionValues": {c[len("partition.") :]: (None if row[c] is None else str(row[c])) for c in part_cols},
            "min": {c: row.get(f"min.{c}") for c in stats_of},
            "max": {c: row.get(f"max.{c}") for c in stats_of},
        }
        for row in rows
    ]


def change_schema(schema: StructType) -> StructType:
    """Schema of :func:`read_changes`: the table columns + ``_change_type`` + ``_commit_version``."""
    return StructType(
        list(schema.fields)
        + [StructField(CHANGE_TYPE, StringType(), False), StructField(COMMIT_VERSION, LongType(), False)]
    )


def check_epochs(loc: str, start: int, to_version: int, barriers: Sequence[tuple[int, int]]) -> None:
    """Raise ``ValueError`` unless ``barriers`` (``[(barrier, version)]``) ascend in both, end at
    ``to_version`` and start above ``start``."""
    if not barriers:
        return
    ordered = all(b1 < b2 and v1 <= v2 for (b1, v1), (b2, v2) in zip(barriers, barriers[1:], strict=False))
    if not ordered or barriers[-1][1] != to_version or barriers[0][1] < start:
        raise ValueError(
            f"read_changes({loc!r}): barriers {list(barriers)} must ascend by barrier and version, end at "
            f"to_version {to_version} and start at or above from_version {start}"
        )


def barrier_of(barriers: Sequence[tuple[int, int]]) -> Column:
    """:data:`BARRIER_COLUMN`: the first barrier of ``[(barrier, version)]`` whose version is at or
    above the row's ``_commit_version``. One flat ``CASE`` of integer literals: chained
    ``F.when(...).otherwise(...)`` nests one level per barrier, and Spark Connect refuses a plan
    nested deeper than protobuf's limit (``Exceeded upb_DecodeOptions_MaxDepth``), which a
    micro-batch of many barriers reaches."""
    (last, _), branches = barriers[-1], barriers[:-1]
    if not branches:
        return F.lit(int(last)).cast(IntegerType())
    whens = " ".join(f"WHEN `{COMMIT_VERSION}` <= {int(upto)} THEN {int(barrier)}" for barrier, upto in branches)
    return F.expr(f"CASE {whens} ELSE {int(last)} END").cast(IntegerType())


def change_sign() -> Column:
    """Column ``+1`` for added rows, ``-1`` for removed rows of a :func:`read_changes` frame."""
    return F.when(F.col(CHANGE_TYPE).isin(*INSERT_TYPES), F.lit(1)).otherwise(F.lit(-1))
