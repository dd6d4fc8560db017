"""Live-file figures of a Delta version: recorded by every barrier commit, verified by readers.

A Delta version's content is the set of live data files delta-rs replays from the log (Delta
protocol "Action Reconciliation"). A commit file that lost a ``remove`` action (still valid JSON)
keeps a rewritten file live, and the version serves its rows twice; a lost ``add`` loses rows; a
commit replaced by a copy of another commit serves the other version's files. None of these is a
JSON error, so delta-rs loads the version without complaint.

Every barrier commit therefore records the number of live data files and their total size in
bytes at its version (:class:`TableFigures`): in its commit metadata (``tsb.files``,
``tsb.bytes``; :func:`figures_metadata`) and in the metastore's WRITTEN row of the barrier. The
commit metadata also records a digest of the live files' identities (``tsb.digest``,
:func:`file_digest`): counts and bytes miss an edit that keeps both, such as two same-size files
swapped between a merge's ``add`` and ``remove`` actions, or an ``add`` pointing to a same-size
copy of another file.
:func:`verify_version` recomputes them from the log and raises
:class:`~airflow_provider_tsb.exceptions.DeltaLogIntegrityError` on a mismatch. It is called by
the readers (:mod:`airflow_provider_tsb.read.version_reads`) for every version they serve and
by ``tsb check --integrity``; a (table, version) verified once is not verified again in the
process (a commit file is never rewritten by Delta writers).

Cost: the figures come from the ``add`` actions of the loaded snapshot
(``DeltaTable.get_add_actions``), O(live files) in memory; the snapshot load itself is the one
the read does anyway.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from deltalake import DeltaTable

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.delta.arrow_rows import stream_table
from airflow_provider_tsb.delta.commit_fold import UNKNOWN, CommitFold
from airflow_provider_tsb.exceptions import DeltaLogIntegrityError

if TYPE_CHECKING:
    import pyarrow as pa

#: commit metadata key: number of live data files at the commit's version (decimal string)
FILES_KEY = "tsb.files"
#: commit metadata key: total size in bytes of those files (decimal string)
BYTES_KEY = "tsb.bytes"

#: commit metadata key: the live files' digest (:func:`file_digest`, 64 hex digits)
DIGEST_KEY = "tsb.digest"
#: the digests are sums modulo 2**256 of SHA-256 values
_DIGEST_MOD = 1 << 256

#: verified (location, version, figures) kept per process before the memo starts over
MAX_VERIFIED = 100_000
#: {(normalized location, version, expected figures): (what was verified, whether figures were
#: compared)}: what was verified is a weak reference to the loaded snapshot (or table) the check
#: read, so a snapshot loaded again (evicted from the cache, reloaded after an edit) is verified again
_VERIFIED: dict[tuple[str, int, TableFigures | None], tuple[weakref.ref[Any], bool]] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class TableFigures:
    """Live data files of one Delta version.

    Attributes:
        files: number of live data files (``add`` actions after reconciliation).
        size_bytes: their total size, bytes (the ``size`` fields of those ``add`` actions).
        digest: :func:`file_digest` of those files, or ``None`` where none was recorded (the
            metastore's rows, a commit made before digests, a foreign writer).
    """

    files: int
    size_bytes: int
    digest: int | None = None

    def as_tuple(self) -> tuple[int, int]:
        """``(files, size_bytes)``."""
        return self.files, self.size_bytes

    def matches(self, found: TableFigures) -> bool:
        """Whether ``found`` (from the log) agrees with these recorded figures: the same count
        and bytes, and the same digest where both have one."""
        if self.as_tuple() != found.as_tuple():
            return False
        return self.digest is None or found.digest is None or self.digest == found.digest

    def __str__(self) -> str:
        digest = f", digest {self.digest:064x}"[:27] + "…" if self.digest is not None else ""
        return f"{self.files} files, {self.size_bytes} bytes{digest}"


def file_digest(files: Iterable[tuple[str, int]]) -> int:
    """The digest of a set of live data files ``(path, size in bytes)``: the sum modulo 2**256 of
    each file's SHA-256 over its path and its size. A sum, so a commit computes its version's
    digest from its base's in O(its own files): plus its ``add`` actions, minus its ``remove``
    actions (Delta protocol "Action Reconciliation"). A path counts fully URL-decoded: the log
    holds it percent-encoded (a Hive-escaped partition directory twice), a writer knows it as on
    storage, and both give one digest."""
    total = 0
    for path, size in files:
        total += int.from_bytes(hashlib.sha256(f"{_decoded(path)}\0{int(size)}".encode()).digest(), "big")
    return total % _DIGEST_MOD


def _decoded(path: str) -> str:
    """``path`` URL-decoded until nothing changes."""
    while True:
        once = unquote(path)
        if once == path:
            return path
        path = once


def figures_of(table: DeltaTable | pa.Table) -> TableFigures:
    """The live-file figures of a version (no data read).

    Args:
        table: a ``DeltaTable`` loaded at the version, or its add actions as an Arrow table
            (``DeltaTable.get_add_actions()``, e.g. :attr:`Snapshot.add_actions
            <airflow_provider_tsb.delta.snapshots.Snapshot.add_actions>`).
    """

    actions = stream_table(table.get_add_actions(flatten=False)) if isinstance(table, DeltaTable) else table
    if actions.num_rows == 0:
        return TableFigures(0, 0, 0)
    sizes = [int(s or 0) for s in actions.column("size_bytes").to_pylist()]
    paths = [str(p) for p in actions.column("path").to_pylist()]
    return TableFigures(len(sizes), sum(sizes), file_digest(zip(paths, sizes, strict=True)))


@dataclass(frozen=True)
class LiveFiles:
    """The live data files of one version: ``sizes`` ``{path as in the log: size in bytes}``."""

    sizes: Mapping[str, int]

    @property
    def figures(self) -> TableFigures:
        """Their :class:`TableFigures`."""
        return TableFigures(len(self.sizes), int(sum(self.sizes.values())), file_digest(self.sizes.items()))


def live_figures(location: str, version: int) -> TableFigures:
    """The live-file figures of Delta ``version`` of the table at ``location``, as
    :func:`figures_of` its snapshot gives them.

    Cost: flat in the table's history. The live files of the version computed last (this
    process) are moved forward with the ``add`` and ``remove`` actions of the commits since
    (Delta protocol "Action Reconciliation": the last action for a path wins; one commit-file
    read each, :class:`~airflow_provider_tsb.delta.commit_fold.CommitFold`); the snapshot is read
    the first time and in the fold's other cases (an older version, a re-created table, object
    stores). Used at barrier generation for the root tables (their ingestion commits record no
    figures), where a snapshot's cost grows with the log.

    Raises:
        TableNotFoundError, DeltaLogError: the version cannot be loaded.
    """
    return _LIVE_FILES.at(location, version).figures


def _live_files_step(live: LiveFiles, actions: list[Mapping[str, Any]], _key: str) -> LiveFiles:
    """The live files after one commit: each ``add`` makes its path live with its ``size``, each
    ``remove`` ends its path (an ``add`` without a size cannot be applied: :data:`UNKNOWN`)."""
    sizes = dict(live.sizes)
    for action in actions:
        if "add" in action:
            size = action["add"].get("size")
            if size is None:
                return UNKNOWN
            sizes[str(action["add"]["path"])] = int(size)
        elif "remove" in action:
            sizes.pop(str(action["remove"]["path"]), None)
    return LiveFiles(sizes)


def _live_files_from_snapshot(loc: str, version: int, _key: str) -> LiveFiles:
    """The live files of the version's snapshot (delta-rs gives the paths as the log holds them)."""
    from airflow_provider_tsb.delta.snapshots import snapshot_at

    actions = snapshot_at(loc, version).add_actions
    if actions.num_rows == 0:
        return LiveFiles({})
    paths, sizes = actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist()
    return LiveFiles({str(p): int(s or 0) for p, s in zip(paths, sizes, strict=True)})


def figures_after(
    base: DeltaTable | TableFigures | None, adds: Iterable[tuple[str, int]], removes: Iterable[tuple[str, int]],
    *, overwrite: bool,
) -> TableFigures:
    """The figures a commit will give: ``base``'s live files (none for ``overwrite`` or a new
    table), minus the ``removes`` (live files of ``base``), plus the ``adds`` (new paths, a fresh
    attempt directory); each file as ``(path as in the log, size in bytes)``.

    Args:
        base: the version the commit is made on: its figures as recorded by its own commit
            (:func:`recorded_figures`, O(1)), or the loaded ``DeltaTable`` to count them from
            (:func:`figures_of`, O(live files)), or ``None`` for a new table. A base without a
            digest gives a result without one.
    """
    if base is None or overwrite:
        start = TableFigures(0, 0, 0)
    else:
        start = base if isinstance(base, TableFigures) else figures_of(base)
    added, removed = list(adds), list(removes)
    digest = None
    if start.digest is not None:
        digest = (start.digest + file_digest(added) - file_digest(removed)) % _DIGEST_MOD
    return TableFigures(start.files + len(added) - len(removed),
                        start.size_bytes + sum(int(s) for _, s in added) - sum(int(s) for _, s in removed), digest)


def figures_metadata(figures: TableFigures) -> dict[str, str]:
    """Commit metadata recording ``figures`` (string values, as Delta custom metadata)."""
    recorded = {FILES_KEY: str(figures.files), BYTES_KEY: str(figures.size_bytes)}
    if figures.digest is not None:
        recorded[DIGEST_KEY] = f"{figures.digest:064x}"
    return recorded


def recorded_figures(commit_info: Mapping[str, Any] | None) -> TableFigures | None:
    """The figures a ``commitInfo`` dict records, or ``None`` (a commit made before tsb recorded
    figures, a restore, a foreign writer)."""
    if not commit_info or FILES_KEY not in commit_info or BYTES_KEY not in commit_info:
        return None
    try:
        digest = commit_info.get(DIGEST_KEY)
        return TableFigures(int(commit_info[FILES_KEY]), int(commit_info[BYTES_KEY]),
                            int(str(digest), 16) if digest is not None else None)
    except (TypeError, ValueError):
        return None


def integrity_error(
    table: str, barrier: int | None, version: int, expected: TableFigures, found: TableFigures
) -> DeltaLogIntegrityError:
    """The error for a version whose log does not give the recorded figures (names the table, the
    barrier, the version, both figures and what to do)."""
    if expected.digest is None:  # nothing to compare it with: the count and bytes differ
        found = TableFigures(found.files, found.size_bytes)
    return DeltaLogIntegrityError(
        f"table {table!r}, barrier {barrier}, Delta version {version}: the Delta log gives {found} but the "
        f"barrier's commit recorded {expected}; a commit file of the table's _delta_log was edited, lost an "
        "add or remove action, or was replaced by a copy of another commit, and reading it would serve wrong "
        "rows. Restore the table's _delta_log (e.g. from a backup), then run `tsb check --integrity "
        "--topology NAME` to verify every retained barrier",
        table=table, barrier=barrier, version=version, expected=expected.as_tuple(), found=found.as_tuple(),
    )


def verify_version(
    location: str, version: int, expected: TableFigures | None, *, name: str, barrier: int | None,
    table: DeltaTable | pa.Table | None = None,
) -> bool:
    """Verify that Delta ``version`` of the table at ``location`` has the ``expected`` figures.

    Verified once per loaded snapshot: later calls on the same snapshot (or ``table``) return at
    once; a snapshot loaded again, after the cache let it go or an edit, is verified again.

    Args:
        location: the table location.
        version: the Delta version served.
        expected: the recorded figures (the metastore's WRITTEN row); ``None``: those of the
            version's ``commitInfo`` (one log-file read), and nothing is verified when it
            records none (a commit made before tsb recorded figures, a restore, a foreign writer).
        name: the table name for the error; ``barrier``: the barrier served.
        table: the ``DeltaTable`` already loaded at ``version``, or its add actions (default:
            the cached :func:`~airflow_provider_tsb.delta.snapshots.snapshot_at`, which the
            Spark reader then uses too).

    Returns:
        Whether figures were compared (``False``: nothing recorded to compare with).

    Raises:
        DeltaLogIntegrityError: the log gives other figures (see :func:`integrity_error`).
        DeltaLogError: the version cannot be loaded (e.g. a truncated commit file).
    """
    from airflow_provider_tsb.delta.log import normalize_location
    from airflow_provider_tsb.delta.snapshots import snapshot_at

    loc, version = normalize_location(location), int(version)
    source: Any = table if table is not None else snapshot_at(loc, version)
    known = _VERIFIED.get((loc, version, expected))
    if known is not None and known[0]() is source:  # this very snapshot was verified before
        return known[1]
    wanted = expected
    if wanted is None or wanted.digest is None:  # the commit's own record holds the digest
        recorded = recorded_figures(_commit_info(loc, version, name))
        if wanted is None or (recorded is not None and recorded.as_tuple() == wanted.as_tuple()):
            wanted = recorded if recorded is not None else wanted
    if wanted is not None:
        found = figures_of(source.add_actions if table is None else source)
        if not wanted.matches(found):
            raise integrity_error(name, barrier, version, wanted, found)
    with _LOCK:
        if len(_VERIFIED) >= MAX_VERIFIED:  # a long-running api-server: forget, verify again
            _VERIFIED.clear()
        _VERIFIED[(loc, version, expected)] = (weakref.ref(source), wanted is not None)
    return wanted is not None


def live_paths(table: DeltaTable) -> set[str]:
    """The paths (relative, as in the log) of the live data files of a loaded version."""

    actions = stream_table(table.get_add_actions(flatten=False))
    return {str(p) for p in actions.column("path").to_pylist()} if actions.num_rows else set()


def missing_files(location: str, paths: Iterable[str]) -> list[str]:
    """The ``paths`` (relative, as in the log) with no file under the table at ``location``: one
    ``stat`` each."""
    import pyarrow.fs as pafs

    from airflow_provider_tsb.delta.log import filesystem

    fs, root = filesystem(location)
    wanted = [str(p) for p in paths]
    infos = fs.get_file_info([f"{root}/{unquote(p)}" for p in wanted]) if wanted else []
    return [p for p, info in zip(wanted, infos, strict=True) if info.type == pafs.FileType.NotFound]


def missing_file_error(
    name: str, barrier: int | None, version: int, missing: str, newest: int
) -> DeltaLogIntegrityError:
    """The error for a data file of ``version`` that is gone while still live at the table's
    ``newest`` version: snapshot expiry deletes only files that no kept version and no version at
    or after the newest one references (:mod:`~airflow_provider_tsb.delta.vacuum`), so it did
    not remove this one."""
    return DeltaLogIntegrityError(
        f"table {name!r}, barrier {barrier}, Delta version {version}: data file {missing!r} is missing, and it is "
        f"live at the newest version {newest}, so snapshot expiry (vacuum) did not remove it: it was deleted "
        "outside tsb. Restore the file (e.g. from a backup), then run `tsb check --integrity --topology NAME`",
        table=name, barrier=barrier, version=version, expected=None, found=None,
    )


def _commit_info(location: str, version: int, name: str) -> dict[str, Any] | None:
    """The ``commitInfo`` of ``version``; DeltaLogError naming the table for a commit file that is
    not JSON (e.g. truncated)."""
    from airflow_provider_tsb.delta.log import commit_info
    from airflow_provider_tsb.exceptions import DeltaLogError

    try:
        return commit_info(location, version)
    except ValueError as exc:
        raise DeltaLogError(
            f"table {name!r}: commit file {version:020d}.json of the Delta log at {location!r} is not valid JSON "
            f"({exc}); restore the table's _delta_log, then run `tsb check --integrity`"
        ) from exc


def _forget_verified() -> None:
    with _LOCK:
        _VERIFIED.clear()


CACHES.on_clear("delta.integrity.verified", _forget_verified)


__all__ = [
    "BYTES_KEY",
    "DIGEST_KEY",
    "FILES_KEY",
    "LiveFiles",
    "TableFigures",
    "figures_after",
    "file_digest",
    "figures_metadata",
    "figures_of",
    "integrity_error",
    "live_figures",
    "live_paths",
    "missing_file_error",
    "missing_files",
    "recorded_figures",
    "verify_version",
]


_LIVE_FILES: CommitFold[LiveFiles] = CACHES.add(
    "delta.integrity.live_files", CommitFold(_live_files_step, _live_files_from_snapshot))
