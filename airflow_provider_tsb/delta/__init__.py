"""Delta-table side of the data plane (pure delta-rs, no Spark).

Barrier tags on commits, restore-safe app ids, barrier look-ups, exactly-once commits of
files written elsewhere, and restore to a barrier.
"""

from airflow_provider_tsb.delta.barriers import (
    TableEpoch,
    barrier_of_version,
    committed_barrier,
    is_barrier_committed,
    iter_lineage,
    latest_written_barrier,
    root_version,
    table_epoch,
    version_of_barrier,
    versions_of_barriers,
)
from airflow_provider_tsb.delta.commit import CommitOutcome, StagedFile, commit_barrier_files
from airflow_provider_tsb.delta.conventions import BarrierTag, app_id, parse_tag
from airflow_provider_tsb.delta.restore import RestoreResult, finish_pending_restore, restore_to_barrier

__all__ = [
    "BarrierTag",
    "CommitOutcome",
    "RestoreResult",
    "StagedFile",
    "TableEpoch",
    "app_id",
    "barrier_of_version",
    "commit_barrier_files",
    "committed_barrier",
    "finish_pending_restore",
    "is_barrier_committed",
    "iter_lineage",
    "latest_written_barrier",
    "parse_tag",
    "restore_to_barrier",
    "root_version",
    "table_epoch",
    "version_of_barrier",
    "versions_of_barriers",
]
