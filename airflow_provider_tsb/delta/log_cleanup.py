"""Metadata cleanup of a table's Delta log: delete the log files no kept version needs.

Delta protocol, "Metadata Cleanup": a checkpoint at version ``c`` plus the commits ``c+1 .. v``
reconstruct every version ``v >= c``, so once no reader needs a version below ``c``, the commit,
checksum and checkpoint files of the versions below ``c`` may be deleted (oldest first, so that
a cleanup cut short leaves a log that still starts at a loadable version).

Why it matters here: delta-rs lists the whole ``_delta_log`` of a local table at every commit and
every snapshot load, so a sink that commits a barrier a second pays for every commit it ever made
(``benchmarks/sink_commit_cost.py``). delta-rs's own cleanup (``DeltaTable.cleanup_metadata``, and
the post-commit hook) deletes by age, keeping ``delta.logRetentionDuration`` (30 days by default,
86,400 commits a day at one barrier a second), and it may delete the commits between an older
checkpoint and a version a lease still pins. Snapshot expiry knows the oldest version any kept
barrier, lease or reader job still needs (:mod:`airflow_provider_tsb.maintenance.expiry`);
:func:`cleanup_metadata` deletes below the newest complete checkpoint at or before it, and
nothing else. The files of the expired versions are gone by then (vacuum), so no version the log
loses could still be read.

A table whose ``delta.enableExpiredLogCleanup`` is ``false`` keeps its log (the Delta table
property that turns metadata cleanup off). The lineage walks of
:mod:`airflow_provider_tsb.delta.barriers` end at :func:`log_start`, where a cleaned-up log
starts; a commit missing above it is still a :class:`~airflow_provider_tsb.exceptions.DeltaLogError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from airflow_provider_tsb.delta.log import LOG_DIR, filesystem, normalize_location

#: ``<v:020d>.json`` (commit), ``.crc`` (checksum), ``.checkpoint.parquet`` (classic checkpoint),
#: ``.checkpoint.<part>.<parts>.parquet`` (multi-part), ``.checkpoint.<uuid>.json|parquet`` (V2),
#: ``<v:020d>.<w:020d>.compacted.json`` (log compaction) -- Delta protocol "Delta Log Entries"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKSUM = re.compile(r"^(\d{20})\.crc$")
_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_PART = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_V2 = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet)$")
_COMPACTED = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
#: the table property that turns metadata cleanup off (Delta protocol "Metadata Cleanup")
CLEANUP_PROPERTY = "delta.enableExpiredLogCleanup"


@dataclass
class LogFiles:
    """The files of one ``_delta_log`` directory, by version.

    Attributes:
        commits: ``{version: path}`` of the commit files.
        checkpoints: ``{version: paths}`` of the complete checkpoints (every part of a
            multi-part one present).
        others: ``(version, path)`` of the checksum files, the incomplete checkpoints' parts and
            the log compaction files (a compaction file's version is its last one).
    """

    commits: dict[int, str] = field(default_factory=dict)
    checkpoints: dict[int, list[str]] = field(default_factory=dict)
    others: list[tuple[int, str]] = field(default_factory=list)

    def start(self) -> int | None:
        """The oldest version the log can load (``None``: no commit and no checkpoint): the
        oldest commit when commit 0 is there or there is no checkpoint, else the oldest complete
        checkpoint (a commit missing above it is a lost commit, not a cleaned-up one)."""
        if 0 in self.commits or not self.checkpoints:
            return min(self.commits, default=None)
        return min(self.checkpoints)


def list_log(location: str) -> LogFiles:
    """The files of the ``_delta_log`` of the table at ``location`` (one listing).

    Raises:
        OSError: the object store refused the listing.
    """
    fs, root = filesystem(location)
    infos = fs.get_file_info(pafs.FileSelector(f"{root}/{LOG_DIR}", allow_not_found=True))
    out = LogFiles()
    parts: dict[int, dict[int, tuple[int, str]]] = {}
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        name = info.base_name
        if m := _COMMIT.match(name):
            out.commits[int(m[1])] = info.path
        elif m := (_CLASSIC.match(name) or _V2.match(name)):
            out.checkpoints.setdefault(int(m[1]), []).append(info.path)
        elif m := _PART.match(name):
            parts.setdefault(int(m[1]), {})[int(m[2])] = (int(m[3]), info.path)
        elif m := _CHECKSUM.match(name):
            out.others.append((int(m[1]), info.path))
        elif m := _COMPACTED.match(name):
            out.others.append((int(m[2]), info.path))
    for version, found in parts.items():
        paths = [p for _n, p in found.values()]
        if all(n == len(found) for n, _p in found.values()) and sorted(found) == list(range(1, len(found) + 1)):
            out.checkpoints.setdefault(version, []).extend(paths)
        else:
            out.others += [(version, p) for p in paths]
    return out


def log_start(location: str) -> int | None:
    """The oldest version the Delta log at ``location`` can load (:meth:`LogFiles.start`):
    ``0`` unless metadata cleanup deleted the commits before a checkpoint. ``None``: no log.

    Raises:
        OSError: the object store refused the listing.
    """
    return list_log(location).start()


@dataclass(frozen=True)
class LogCleanup:
    """What :func:`cleanup_metadata` did.

    Attributes:
        checkpoint: the checkpoint version the log now starts at (``None``: nothing to clean,
            no complete checkpoint at or before the oldest kept version, or cleanup is off).
        deleted: the log files deleted, oldest first (``dry_run``: that would be).
    """

    checkpoint: int | None
    deleted: tuple[str, ...]


def cleanup_metadata(location: str, oldest_kept: int, *, configuration: Mapping[str, str] | None = None,
                     dry_run: bool = False) -> LogCleanup:
    """Delete the commit, checksum and checkpoint files of the versions below the newest
    complete checkpoint at or before ``oldest_kept`` (module doc; Delta protocol "Metadata
    Cleanup"), oldest version first.

    Args:
        location: the table's location.
        oldest_kept: Delta version; every version from it on stays loadable.
        configuration: the table's properties (``DeltaTable.metadata().configuration``): with
            ``delta.enableExpiredLogCleanup=false`` nothing is deleted.
        dry_run: list only.

    Returns:
        A :class:`LogCleanup`.

    Raises:
        OSError: the object store refused the listing or a deletion (the files not yet deleted
            are deleted by the next cleanup; the log still starts at a loadable version).

    Example:
        >>> cleanup_metadata("/data/tsb/flights/flights_enriched", 1200)  # doctest: +SKIP
        LogCleanup(checkpoint=1199, deleted=('.../00000000000000000000.json', ...))
    """
    if str((configuration or {}).get(CLEANUP_PROPERTY, "true")).lower() == "false":
        return LogCleanup(None, ())
    files = list_log(location)
    below = [v for v in files.checkpoints if v <= oldest_kept]
    if not below:
        return LogCleanup(None, ())
    checkpoint = max(below)
    doomed = sorted([(v, p) for v, p in files.commits.items() if v < checkpoint]
                    + [(v, p) for v, paths in files.checkpoints.items() if v < checkpoint for p in paths]
                    + [(v, p) for v, p in files.others if v < checkpoint])
    if not dry_run:
        fs, _root = filesystem(normalize_location(location))
        for _version, path in doomed:
            try:
                fs.delete_file(path)
            except FileNotFoundError:
                continue  # another expiry deleted it meanwhile
    return LogCleanup(checkpoint, tuple(p for _v, p in doomed))


__all__ = ["CLEANUP_PROPERTY", "LogCleanup", "LogFiles", "cleanup_metadata", "list_log", "log_start"]
