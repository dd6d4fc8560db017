"""Withdrawn staging: the attempt directories of staged-file manifests no longer served.

A PROCESSED row serves its staged-file manifest to READ_COMMITTED readers. When the manifest
is withdrawn -- replaced by a rerun's PROCESSED, cleared by WRITTEN, by a failure or a
rollback -- its attempt directories are recorded in ``tsb_withdrawn_staging`` instead of being
deleted: a reader that resolved before the withdrawal may still read them. The writer job
deletes them later, after the staging grace period and once no lease taken before the
withdrawal pins the table (docs/design.md "Staged files: withdrawal before deletion").
Plain functions that take the caller's session, used by
:class:`~airflow_provider_tsb.metastore.table_states.TableStateManager`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from airflow_provider_tsb.metastore.models import LeaseRow, LeaseVersionRow, TableBarrierRow, WithdrawnStagingRow
from airflow_provider_tsb.metastore.records import now_ms


def manifest_dirs(manifest: Mapping[str, Any] | None) -> set[str]:
    """Attempt directories (relative to the table root) of a staged-file manifest's files.

    A partitioned sink's file lies in Hive-style ``col=value/`` directories below its attempt
    directory: those are stripped (one per partition value of the entry).
    """
    dirs = set()
    for entry in (manifest or {}).get("files") or []:
        path = entry["path"] if isinstance(entry, Mapping) else str(entry)
        if "://" not in path and not path.startswith("/") and "/" in path:
            folder = posixpath.dirname(path)
            values = entry.get("partition_values") if isinstance(entry, Mapping) else None
            for _ in values or ():
                folder = posixpath.dirname(folder)
            dirs.add(folder)
    return dirs


def withdraw(
    s: Session, table_id: int, row: TableBarrierRow, at_ms: int, keep: set[str] | frozenset[str] = frozenset()
) -> None:
    """Record the attempt directories of ``row``'s manifest as withdrawn at ``at_ms``."""
    for path in sorted(manifest_dirs(row.manifest) - set(keep)):
        if s.get(WithdrawnStagingRow, (table_id, path)) is None:
            s.add(
                WithdrawnStagingRow(
                    table_id=table_id, path=path, barrier_id=row.barrier_id, job_id=row.job_id, withdrawn_at_ms=at_ms
                )
            )


def due_rows(s: Session, table_id: int, grace_s: float, limit: int | None) -> list[WithdrawnStagingRow]:
    """The withdrawn directories of table ``table_id`` that are due, oldest withdrawal first (at
    most ``limit``): withdrawn over ``grace_s`` seconds ago and pinned by no live lease created
    before their withdrawal."""
    now = now_ms()
    leased = exists().where(
        LeaseVersionRow.table_id == table_id,
        LeaseRow.id == LeaseVersionRow.lease_id,
        LeaseRow.expires_at_ms > now,
        LeaseRow.created_at_ms <= WithdrawnStagingRow.withdrawn_at_ms,
    )
    query = (
        select(WithdrawnStagingRow)
        .where(
            WithdrawnStagingRow.table_id == table_id,
            WithdrawnStagingRow.withdrawn_at_ms <= now - int(grace_s * 1000),
            ~leased,
        )
        .order_by(WithdrawnStagingRow.withdrawn_at_ms)
    )
    return list(s.scalars(query.limit(limit) if limit is not None else query).all())


def has_withdrawn(s: Session, table_id: int) -> bool:
    """Whether withdrawn directories of table ``table_id`` wait for deletion (due or not)."""
    waiting = select(WithdrawnStagingRow.path).where(WithdrawnStagingRow.table_id == table_id).limit(1)
    return s.scalar(waiting) is not None
