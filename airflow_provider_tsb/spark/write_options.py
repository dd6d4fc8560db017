"""What a barrier's write is: :class:`WriteOptions` (how, as ``ReadOptions`` is for reads) and
:class:`WriteTarget` (where, and as which barrier of which job).

Like delta-rs's ``WriterProperties`` and ``CommitProperties``, options are one immutable object
passed whole, checked when made: :func:`~airflow_provider_tsb.spark.barrier_commit.write_barrier`
takes a target and options instead of fifteen keyword arguments, six of them a
:class:`~airflow_provider_tsb.spark.model.Sink` unpacked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from airflow_provider_tsb.delta.conventions import BarrierTag
from airflow_provider_tsb.spark.outputs_compaction import Compaction

SinkMode = Literal["append", "overwrite", "merge"]
SINK_MODES: tuple[str, ...] = ("append", "overwrite", "merge")
SinkWriter = Literal["staged", "delta"]
SINK_WRITERS: tuple[str, ...] = ("staged", "delta")
#: the environment variable naming the writer of every sink that declares none (``Sink.writer``)
WRITER_VARIABLE = "TSB_SINK_WRITER"


@dataclass(frozen=True)
class WriteOptions:
    """How a barrier's output is written to its sink table.

    Attributes:
        mode: ``append`` adds the rows; ``overwrite`` replaces the table; ``merge`` upserts (and
            deletes with ``delete_when``) by ``keys``, rewriting only the files that hold an
            affected key (:mod:`airflow_provider_tsb.spark.outputs_merge`).
        keys: key columns (``merge`` only).
        partition_by: partition columns of a table the write creates (an existing table's
            must be the same).
        max_files: coalesce the output to at most this many files (per partition written); an
            upserts-only merge that rewrites files writes their kept rows as up to as many more.
        delete_when: ``merge`` only: a Spark SQL condition on the output's rows that deletes
            their key.
        schema: the sink's declared Spark DDL (``Sink.schema``), for ``NOT NULL`` of new columns.
        compaction: rewrite the table's small files in the same commit
            (:mod:`airflow_provider_tsb.spark.outputs_compaction`); ``None``: never. With the
            ``delta`` writer: Delta's auto compaction (an ``OPTIMIZE`` commit after the
            barrier's, ``dataChange=false``) at ``compaction.min_files`` small files.
        writer: who writes and commits the barrier: ``staged`` (the executors stage Parquet
            files, PROCESSED is reported with their manifest, then one delta-rs commit) or
            ``delta`` (Delta's own Spark writer: ``DataFrameWriter`` / ``MERGE INTO`` with the
            application transaction ``txnAppId`` = the job, ``txnVersion`` = the barrier, and
            the tag in ``userMetadata``; :mod:`airflow_provider_tsb.spark.delta_writer`).

    Raises:
        ValueError: an unknown mode or writer, ``merge`` without keys, ``delete_when`` without
            ``merge``, ``max_files`` < 1.
    """

    mode: SinkMode = "append"
    keys: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    max_files: int | None = None
    delete_when: str | None = None
    schema: str | None = None
    compaction: Compaction | None = None
    writer: SinkWriter = "staged"

    def __post_init__(self) -> None:
        for name in ("keys", "partition_by"):
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        if self.mode not in SINK_MODES:
            raise ValueError(f"unknown sink mode {self.mode!r}: use append, overwrite or merge")
        if self.mode == "merge" and not self.keys:
            raise ValueError("a merge sink needs key columns: WriteOptions(mode='merge', keys=('id',))")
        if self.delete_when and self.mode != "merge":
            raise ValueError(f"delete_when={self.delete_when!r} needs mode 'merge', not {self.mode!r}")
        if self.max_files is not None and self.max_files < 1:
            raise ValueError(f"max_files={self.max_files!r}: at least 1 file")
        if self.writer not in SINK_WRITERS:
            raise ValueError(f"unknown sink writer {self.writer!r}: use 'staged' or 'delta' (${WRITER_VARIABLE})")

    @property
    def commit_mode(self) -> Literal["append", "overwrite"]:
        """The Delta commit's mode: ``overwrite`` for an overwrite sink, else ``append`` (a merge
        commits its rewritten files' ``remove`` actions with its ``add`` actions)."""
        return "overwrite" if self.mode == "overwrite" else "append"


@dataclass(frozen=True)
class WriteTarget:
    """Where one barrier's output goes, and as which barrier of which job.

    Attributes:
        table: the sink's table name (in reports and errors).
        location: the sink's table location.
        job_id: the writer job (the Delta txn app id stem, ``tsb.job``).
        barrier: the barrier id; a job writes its barriers in increasing order.
        inputs: ``{input table: Delta version read}``, recorded as ``tsb.inputs``.
        ts_ms: the barrier timestamp, epoch ms (``tsb.ts``).
    """

    table: str
    location: str
    job_id: str
    barrier: int
    inputs: Mapping[str, int] = field(default_factory=dict)
    ts_ms: int | None = None

    def tag(self, attempt: str | None = None) -> BarrierTag:
        """The commit's barrier tag (``tsb.*`` commit metadata) for the attempt ``attempt``."""
        return BarrierTag(barrier=self.barrier, job_id=self.job_id, inputs=dict(self.inputs), ts_ms=self.ts_ms,
                          attempt=attempt)
