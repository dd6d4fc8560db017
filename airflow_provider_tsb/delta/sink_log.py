"""One read of a sink table's Delta log per barrier, shared by every look-up the barrier needs.

A barrier's run asks seven questions about each sink (is the barrier committed, the epoch, the
txn version, the version of the previous barrier, the committed attempt, the head barrier, the
commit's own version). Asked one by one of :mod:`airflow_provider_tsb.delta.barriers`, each
function would read the log again: the cached latest snapshot advanced and the newest commit
file read several times per sink and barrier. A :class:`SinkLog` is read once, when the
barrier starts (:meth:`SinkLog.read`), and answers them all from that read; commit files it
walks are kept for its lifetime (the barrier), so no commit file is read twice.

Read for a barrier (``SinkLog.read(..., barrier=n, previous=m)``), it also answers that
barrier's questions as it is read, as plain attributes: whether the barrier is committed, its
version and attempt, the previous barrier's version, the head; and, for a sink whose write plans
against the table's files (a merge, auto compaction), the table's :class:`Snapshot` at its
version. The commit protocol then asks the log nothing more: the look-ups a barrier needs are
passed in, read once.

Its answers describe the table at :attr:`SinkLog.version`. A commit made after it by another
attempt of the job (a zombie) does not make the barrier's commit wrong: the commit carries the
epoch-scoped txn (Delta protocol "Transaction Identifiers"), so delta-rs refuses it as a
conflicting transaction and the commit path reads the log again
(:func:`~airflow_provider_tsb.delta.commit.commit_barrier_files`).
"""

from __future__ import annotations

from typing import Any

from deltalake import DeltaTable

from airflow_provider_tsb.delta.barriers import TableEpoch, epoch_of, tagged_lineage, version_in_lineage
from airflow_provider_tsb.delta.conventions import app_id, parse_tag
from airflow_provider_tsb.delta.log import (
    commit_info,
    commit_info_of,
    normalize_location,
    read_commit_actions,
    shared_commit_reads,
    txn_version_of,
)
from airflow_provider_tsb.delta.snapshots import Snapshot, latest_table_or_none, snapshot_at


class SinkLog:
    """What a sink's Delta log says for one job, read once (module doc).

    Attributes:
        location: the normalized table location.
        job_id: the writer job.
        table: the cached latest ``DeltaTable`` (:func:`~airflow_provider_tsb.delta.snapshots.latest_table`)
            at :attr:`version`, or ``None`` when there is no table yet.
        epoch: the table's restore epoch (``TableEpoch(0, None)`` without a table).
        committed: the highest barrier of the job committed in the epoch (the txn version, or
            the barrier the table was restored to), or ``None``.
        newest_info: the ``commitInfo`` of :attr:`version` (``None`` without a table).
        snapshot: the table at :attr:`version` when read with ``snapshot=True`` (else ``None``).
        barrier: the barrier the log was read for (``None``: none), and its answers:
        holds_barrier: whether :attr:`barrier` is committed in the current epoch.
        barrier_version: the newest version tagged with it in the current lineage (``None``: not
            committed, or committed and then superseded or restored to).
        barrier_attempt: the attempt (``tsb.attempt``) of that commit, or ``None``.
        previous: the previous barrier the log was read for (``None``: none), and
        previous_version: its version in the current lineage (``None``: none).
        newest: ``(barrier, version)`` of the newest barrier in the table (:meth:`head`), read
            with :attr:`barrier` or :attr:`previous`.
    """

    def __init__(self, location: str, job_id: str, table: DeltaTable | None, *, barrier: int | None = None,
                 previous: int | None = None, snapshot: Snapshot | None = None) -> None:
        self.location = normalize_location(location)
        self.job_id = job_id
        self.table = table
        self.snapshot = snapshot
        self._infos: dict[int, dict[str, Any] | None] = {}
        self.version: int | None = table.version() if table is not None else None
        self.newest_info: dict[str, Any] | None = None
        self.barrier, self.previous = barrier, previous
        self.holds_barrier = False
        self.barrier_version: int | None = None
        self.barrier_attempt: str | None = None
        self.previous_version: int | None = None
        self.newest: tuple[int, int] | None = None
        if table is None or self.version is None:
            self.epoch, self.committed = TableEpoch(0, None), None
            return
        newest = read_commit_actions(self.location, self.version)
        self._infos[self.version] = self.newest_info = commit_info_of(newest)
        self.epoch = epoch_of(table.metadata().configuration or {}, self._infos[self.version] or {})
        app = app_id(job_id, self.epoch.epoch)
        # the newest commit is usually the job's previous barrier, whose txn answers without
        # the log replay of ``transaction_version`` (growing with the log)
        txn = txn_version_of(newest, app)
        if txn is None:
            txn = table.transaction_version(app)
        done = [b for b in (txn, self.epoch.base_barrier) if b is not None]
        self.committed = max(done) if done else None
        if barrier is not None or previous is not None:
            self._answer(barrier, previous)

    def _answer(self, barrier: int | None, previous: int | None) -> None:
        """Answer the barrier's questions (class doc) in one walk back along the lineage, which
        stops at the oldest barrier asked for (each commit file read once)."""
        with shared_commit_reads():
            tagged = []
            oldest = min(b for b in (barrier, previous) if b is not None)
            for version, tag in tagged_lineage(self.location, self.version):
                tagged.append((version, tag))
                if tag.barrier <= oldest:
                    break
        self.newest = (tagged[0][1].barrier, tagged[0][0]) if tagged else None
        if previous is not None:
            self.previous_version = version_in_lineage(tagged, previous)
        if barrier is not None and self.is_committed(barrier):
            self.holds_barrier = True
            self.barrier_version = version_in_lineage(tagged, barrier)
            self.barrier_attempt = next((t.attempt for v, t in tagged if v == self.barrier_version), None)

    @classmethod
    def read(cls, location: str, job_id: str, *, barrier: int | None = None, previous: int | None = None,
             snapshot: bool = False) -> SinkLog:
        """Read the log of the table at ``location`` for ``job_id``; with ``barrier`` and
        ``previous``, answer their questions as it is read (class doc).

        Args:
            barrier: the barrier the job is about to write.
            previous: the barrier before it (the sink's state its ``previous`` read reads).
            snapshot: also take the table's :class:`Snapshot` at its version (a merge or an
                auto compaction plans against its files).

        Cost: the cached latest snapshot advanced to the newest commit (two ``stat`` calls when
        nothing was committed since, else the new JSON commits) and one commit-file read; with
        ``barrier`` or ``previous``, the commits back to the older of them (usually one or two,
        read once per job run with :func:`~airflow_provider_tsb.delta.log.shared_commit_reads`);
        with ``snapshot``, the snapshot (free when cached).

        Raises:
            DeltaLogError: delta-rs cannot load the table.
        """
        table = latest_table_or_none(location)
        snap = snapshot_at(location, table.version()) if snapshot and table is not None else None
        return cls(location, job_id, table, barrier=barrier, previous=previous, snapshot=snap)

    @property
    def exists(self) -> bool:
        """Whether there is a Delta table at :attr:`location`."""
        return self.table is not None

    def commit_info(self, version: int) -> dict[str, Any] | None:
        """The ``commitInfo`` of ``version`` (``None`` when absent), read at most once."""
        if version not in self._infos:
            self._infos[version] = commit_info(self.location, version)
        return self._infos[version]

    def is_committed(self, barrier: int) -> bool:
        """Whether ``barrier`` of the job is committed (WRITTEN) in the current epoch."""
        return self.committed is not None and barrier <= self.committed

    def version_of(self, barrier: int) -> int | None:
        """The newest version tagged with ``barrier`` in the current lineage, or ``None``.

        Cost: a walk from :attr:`version` over the commits newer than the barrier (usually one
        or two commit files, each read once per :class:`SinkLog`).
        """
        if self.version is None:
            return None
        return version_in_lineage(tagged_lineage(self.location, self.version, read=self.commit_info), barrier)

    def head(self) -> tuple[int, int] | None:
        """``(barrier, version)`` of the newest barrier WRITTEN in the table, or ``None``."""
        if self.version is None:
            return None
        newest = next(tagged_lineage(self.location, self.version, read=self.commit_info), None)
        return (newest[1].barrier, newest[0]) if newest is not None else None

    def attempt_of(self, barrier: int) -> str | None:
        """The attempt id (``tsb.attempt``) of the commit holding ``barrier``, or ``None``."""
        version = self.version_of(barrier)
        tag = parse_tag(self.commit_info(version)) if version is not None else None
        return tag.attempt if tag is not None else None
