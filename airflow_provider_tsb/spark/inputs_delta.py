"""Read Delta tables with Spark's Delta reader at exact versions: snapshots and epochs of changes.

Every read goes through Delta's own connector (``spark.read.format("delta")``, Delta docs
"Table batch reads and writes"): ``versionAsOf`` for a snapshot, the change data feed
(``readChangeFeed``) for an epoch whose commits recorded change data, so deletion vectors,
column mapping (``name`` and ``id``), ``timestampNtz``, type widening, v2 checkpoints and row
tracking are Delta's to apply. delta-rs only lists the commits of an epoch and the files'
statistics (metadata, on the driver): which files an epoch added or removed, and which overlap
a data-skipping range. Table data is never collected to the driver.

A row of a version is tied to its file by Spark's hidden ``_metadata.file_path`` column,
matched to the log's ``add.path`` by the shortest path suffix that tells the files apart
(:func:`file_keys`).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from airflow_provider_tsb.delta.integrity import verify_version
from airflow_provider_tsb.delta.log import normalize_location, read_commit_actions
from airflow_provider_tsb.delta.snapshots import snapshot_at
from airflow_provider_tsb.exceptions import DeltaLogError
from airflow_provider_tsb.spark.epochs import (
    CHANGE_TYPE,
    COMMIT_VERSION,
    METADATA,
    Ranges,
    add_entries,
    barrier_of,
    change_schema,
    check_epochs,
    overlaps,
)
from airflow_provider_tsb.spark.frames import BARRIER_COLUMN
from airflow_provider_tsb.spark.timing import phase


def delta_version(spark: SparkSession, location: str, version: int) -> DataFrame:
    """The Delta table at ``location`` as of ``version`` (Spark's Delta reader, ``versionAsOf``)."""
    return spark.read.format("delta").option("versionAsOf", int(version)).load(normalize_location(location))




def read_snapshot(
    spark: SparkSession, location: str, version: int, *, within: Ranges | None = None,
    exclude: Collection[str] | None = None,
) -> DataFrame:
    """Return the Delta table at ``location`` as of ``version`` as a lazy DataFrame (Spark's
    Delta reader: deletion vectors, column mapping and the other table features applied).

    Columns: the table schema at ``version``. Cost on the driver: the commit file's figures
    check, and with ``within`` or ``exclude`` one snapshot load (delta-rs, cached per process:
    :func:`~airflow_provider_tsb.delta.snapshots.snapshot_at`) for the file list.

    ``within``, ``exclude`` and the errors: as :func:`airflow_provider_tsb.spark.inputs.read_snapshot`.
    """
    loc = normalize_location(location)
    with phase("delta_log"):
        verify_version(loc, version, None, name=loc, barrier=None)
        keep: list[str] | None = None
        if within or exclude:
            table = snapshot_at(loc, version)
            keep = [e["path"] for e in add_entries(table, stats_of=list(within or {}))
                    if not (within and not overlaps(e, within)) and not (exclude and e["path"] in exclude)]
    df = delta_version(spark, loc, version)
    if keep is None:
        return df
    return _within(_only_files(df, keep), within or {})


def _only_files(df: DataFrame, paths: Sequence[str]) -> DataFrame:
    """The rows of ``df`` (a Delta scan) that live in the files ``paths`` (log paths)."""
    if not paths:
        return df.where(F.lit(False))
    keys = file_keys(paths)
    depth = keys[paths[0]].count("/") + 1
    return df.where(_file_key(df, depth).isin(sorted(set(keys.values())))).select(*df.columns)


#: how far a timestamp statistic may be from the values it bounds: Delta writers truncate them
#: to milliseconds (Delta protocol "Per-file Statistics")
_STAT_SLACK = dt.timedelta(milliseconds=1)


def _within(df: DataFrame, within: Ranges) -> DataFrame:
    """``df`` filtered to the ranges of its numeric, date and timestamp columns (widened by
    :data:`_STAT_SLACK` for timestamps), so Delta's own data skipping prunes the files too; text
    statistics may be truncated prefixes, and are left to the file selection."""
    for column, bounds in within.items():
        if bounds is None or column not in df.columns:
            continue
        lo, hi = bounds
        if isinstance(lo, bool) or not isinstance(lo, int | float | dt.date) or type(lo) is not type(hi):
            continue
        if isinstance(lo, dt.datetime):
            lo, hi = lo - _STAT_SLACK, hi + _STAT_SLACK
        df = df.where(F.col(column).isNull() | F.col(column).between(lo, hi))
    return df


def _file_key(df: DataFrame, depth: int) -> Column:
    """The last ``depth`` components of a row's file path (Spark's hidden ``_metadata`` column,
    found even when the table has a ``_metadata`` column of its own)."""
    parts = F.split(df.metadataColumn(METADATA).getField("file_path"), "/")
    return F.array_join(F.slice(parts, -depth, depth), "/")


def read_changes(
    spark: SparkSession, location: str, from_version: int | None, to_version: int, *,
    barriers: Sequence[tuple[int, int]] = (),
) -> DataFrame:
    """Return the changes of the epoch ``(from_version, to_version]`` as a lazy DataFrame.

    ``from_version=None`` (or -1) means from the table's creation. Columns: table schema
    (as of ``to_version``) + ``_change_type`` (``insert`` / ``delete`` / ``update_preimage`` /
    ``update_postimage``) + ``_commit_version``. Delta's change data feed rules (Delta protocol
    "Change Data Files"), read with Delta's own reader:

    * an epoch of a table with ``delta.enableChangeDataFeed`` on (at its first version, or
      with ``cdc`` actions in its commits) is read with Delta's change data feed
      (``readChangeFeed``, ``startingVersion``/``endingVersion``): row-level deletes and
      updates, whatever the table's features;
    * otherwise each file a commit added with ``dataChange`` is inserts (its rows as of the
      last version of the epoch it is live in) and each file it removed with ``dataChange`` is
      deletes (its rows as of the version before). That is exact for appends (a root's
      ingestion) and, as a net change, for rewrites of whole files or deletion vectors; enable
      the change data feed for row-level changes. Commits without ``dataChange`` (``OPTIMIZE``,
      a root's compaction) are no change.

    The files read at one version are one scan, whatever the number of commits: each row's
    ``_commit_version`` comes from its file (``_metadata.file_path``).

    Args:
        barriers: the epochs of a micro-batch, ``[(barrier, version)]`` in ascending order, the
            last version ``to_version``: each row gets :data:`BARRIER_COLUMN` (int), the first
            barrier whose version is at or above its commit version (barrier ``b``'s epoch is
            ``(version of the barrier before, version of b]``).

    Cost on the driver: one log-file read per version in the range.

    Raises:
        DeltaLogError: a commit in the range is missing from the log, or the table's change
            data feed does not cover the epoch (names the table and the versions).
        ValueError: ``from_version > to_version``; ``barriers`` out of order, not ending at
            ``to_version`` or starting at or below ``from_version``.
    """
    loc = normalize_location(location)
    start = -1 if from_version is None else from_version
    if start > to_version:
        raise ValueError(f"read_changes({loc!r}): from_version {start} > to_version {to_version}")
    check_epochs(loc, start, to_version, barriers)
    with phase("delta_log"):
        commits = {}
        for version in range(start + 1, to_version + 1):
            actions = read_commit_actions(loc, version)
            if actions is None:
                raise DeltaLogError(f"Delta log of {loc!r} has no commit {version}: cannot read its changes")
            commits[version] = actions
    if commits and _feed_on(loc, commits):
        out = _change_feed(spark, loc, commits, to_version)
    else:
        out = _file_changes(spark, loc, to_version, commits)
    return out.withColumn(BARRIER_COLUMN, barrier_of(barriers)) if barriers else out


#: the table property that turns Delta's change data feed on (Delta docs "Change data feed")
CHANGE_DATA_FEED = "delta.enableChangeDataFeed"


def _feed_on(loc: str, commits: Mapping[int, list[dict[str, Any]]]) -> bool:
    """Whether the change data feed covers the epoch: on at its first version, or some commit
    recorded change data (``cdc`` actions)."""
    if any("cdc" in a for actions in commits.values() for a in actions):
        return True
    return (snapshot_at(loc, min(commits)).property(CHANGE_DATA_FEED) or "").lower() == "true"


def _change_feed(spark: SparkSession, loc: str, commits: Mapping[int, list[dict[str, Any]]], last: int
                 ) -> DataFrame:
    """Delta's change data feed of the epoch's versions, in the schema of ``last``.

    Delta refuses one feed across a column rename or drop (``DELTA_CHANGE_DATA_FEED_
    INCOMPATIBLE_DATA_SCHEMA``), so the epoch is read in segments that each start at a schema
    change (a ``metaData`` action), and the older segments' columns are renamed to ``last``'s by
    their column mapping id; a column dropped since is left out (``_commit_timestamp`` too).
    """
    from pyspark.errors import PySparkException

    versions = sorted(commits)
    starts = [versions[0]] + [v for v in versions[1:] if any("metaData" in a for a in commits[v])]
    ends = [s - 1 for s in starts[1:]] + [last]
    schema = delta_version(spark, loc, last).schema
    cols = [f.name for f in change_schema(schema).fields]
    frames = []
    for first, end in zip(starts, ends, strict=True):
        df = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", first)
              .option("endingVersion", end).load(loc))
        try:
            df = _renamed(df, loc, end, last) if end != last else df
        except PySparkException as exc:
            raise DeltaLogError(f"the change data feed of Delta table {loc!r} does not cover versions {first} to "
                                f"{end} ({str(exc).splitlines()[0]}): set TBLPROPERTIES "
                                "'delta.enableChangeDataFeed' = 'true' before the rows change") from exc
        frames.append(df.select(*[c for c in cols if c in df.columns]))
    return reduce(lambda x, y: x.unionByName(y, allowMissingColumns=True), frames).select(*cols)


def _file_changes(spark: SparkSession, loc: str, to_version: int, commits: Mapping[int, list[dict[str, Any]]]
                  ) -> DataFrame:
    """The epoch's changes from its commits' ``add`` / ``remove`` actions with ``dataChange``
    (see :func:`read_changes`): ``{version read at: {kind: {path: commit version}}}``, one scan
    per version read at."""
    reads: dict[int, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    added: dict[str, int] = {}
    for version, actions in sorted(commits.items()):
        for a in actions:
            if "remove" in a:
                path = a["remove"]["path"]
                if path in added:  # live in the epoch until this commit removed it
                    reads[version - 1]["insert"][path] = added.pop(path)
                if a["remove"].get("dataChange", True):
                    reads[version - 1]["delete"][path] = version
        for a in actions:
            if "add" in a and a["add"].get("dataChange", True):
                added[a["add"]["path"]] = version
    for path, version in added.items():
        reads[to_version]["insert"][path] = version
    schema = delta_version(spark, loc, to_version).schema
    frames = []
    for at, kinds in sorted(reads.items()):
        df = delta_version(spark, loc, at)
        df = df if at == to_version else _renamed(df, loc, at, to_version)
        frames += [_kind_rows(df, kind, files) for kind, files in sorted(kinds.items()) if files]
    if not frames:
        return spark.createDataFrame([], change_schema(schema))
    cols = [f.name for f in change_schema(schema).fields]
    return reduce(lambda x, y: x.unionByName(y, allowMissingColumns=True), frames).select(*cols)


#: the field metadata key of a column's id in a table with column mapping (Delta protocol "Column Mapping")
COLUMN_ID = "delta.columnMapping.id"


def _renamed(df: DataFrame, loc: str, version: int, last: int) -> DataFrame:
    """``df`` (rows read in the schema of ``version``) with its columns renamed to those of
    ``last`` where column mapping says they are the same column (same
    ``delta.columnMapping.id`` in the log's schemas: Spark Connect hands out no field metadata):
    a rename in the epoch."""
    import json

    def ids(v: int) -> dict[int, str]:
        fields = json.loads(snapshot_at(loc, v).schema_json)["fields"]
        return {f["metadata"][COLUMN_ID]: f["name"] for f in fields if COLUMN_ID in f.get("metadata", {})}

    old, new = ids(version), ids(last)
    renames = {name: new[i] for i, name in old.items() if i in new and new[i] != name and name in df.columns}
    return df.withColumnsRenamed(renames) if renames else df


def _kind_rows(df: DataFrame, kind: str, files: Mapping[str, int]) -> DataFrame:
    """The rows of ``df`` (one Delta version) in ``files`` (``{log path: commit version}``) with
    ``_change_type`` = ``kind`` and ``_commit_version``."""
    paths = list(files)
    keys = file_keys(paths)
    depth = keys[paths[0]].count("/") + 1
    key = _file_key(df, depth)
    distinct = set(files.values())
    if len(distinct) == 1:
        version: Column = F.lit(distinct.pop()).cast(LongType())
    else:
        by_key = F.create_map(*[c for p, v in files.items() for c in (F.lit(keys[p]), F.lit(v))])
        version = F.element_at(by_key, key).cast(LongType())
    return (df.where(key.isin(sorted(set(keys.values()))))
            .select(*df.columns, F.lit(kind).alias(CHANGE_TYPE), version.alias(COMMIT_VERSION)))


def file_keys(paths: Sequence[str]) -> dict[str, str]:
    """``{log path: key}``: the shortest path suffix (in components) that names every file
    apart, as ``_metadata.file_path`` ends (Spark names a task's files alike in every directory
    of a partitioned write, so the file name alone may not). The log's paths and Spark's file
    paths are both URI-encoded, so their suffixes compare as they are.

    Raises:
        DeltaLogError: two files have the same path.
    """
    parts = {p: p.rstrip("/").split("/") for p in paths}
    deepest = max((len(v) for v in parts.values()), default=1)
    for depth in range(1, deepest + 1):
        keys = {p: "/".join(v[-depth:]) for p, v in parts.items()}
        if len(set(keys.values())) == len(keys):
            return keys
    raise DeltaLogError(f"the Delta log names a file twice among {sorted(paths)[:5]}")


