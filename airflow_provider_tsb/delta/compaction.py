"""When a table's writer compacts its small files: the options both writers share.

A sink compacts inside a barrier's own commit (:mod:`airflow_provider_tsb.spark.outputs_compaction`);
a root table, written from outside the topology, in a ``dataChange = false`` commit of its own
right after an append (:func:`airflow_provider_tsb.delta.roots.append_rows`). Either way the
rule is Databricks' auto compaction (``delta.autoOptimize.autoCompact``: compact once a table
has ``minNumFiles`` files below the target size) and change readers skip the rearrangement
(Delta protocol "Add File and Remove File": ``dataChange = false``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: default :attr:`Compaction.min_files`
DEFAULT_MIN_FILES = 16
#: :attr:`Compaction.min_files` of an ``append`` sink's default compaction: Databricks' auto
#: compaction threshold (``spark.databricks.delta.autoCompact.minNumFiles``). A streaming append
#: sink gains a file per barrier and compacts once every 50; a higher threshold than a merge
#: sink's, whose reads of its own table grow with its files
APPEND_MIN_FILES = 50
#: default :attr:`Compaction.target_bytes` (128 MiB, Delta's ``OPTIMIZE`` target)
DEFAULT_TARGET_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class Compaction:
    """When a table's writer also compacts its small files: a sink's in the barrier's own commit
    (:mod:`airflow_provider_tsb.spark.outputs_compaction`), a root table's in a commit of its own
    right after an append (:func:`~airflow_provider_tsb.delta.roots.append_rows`).

    Attributes:
        min_files: compact once the table has at least this many files smaller than
            ``target_bytes`` (>= 2).
        target_bytes: bytes; files below it are small, and compaction writes one file per
            ``target_bytes`` of small files read (by their size on storage).

    Raises:
        ValueError: ``min_files`` < 2 or ``target_bytes`` < 1.
    """

    min_files: int = DEFAULT_MIN_FILES
    target_bytes: int = DEFAULT_TARGET_BYTES

    def __post_init__(self) -> None:
        if int(self.min_files) < 2:
            raise ValueError(f"Compaction(min_files={self.min_files!r}): compacting needs at least 2 files")
        if int(self.target_bytes) < 1:
            raise ValueError(f"Compaction(target_bytes={self.target_bytes!r}): a file size in bytes, >= 1")
