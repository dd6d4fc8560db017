"""Commit-info conventions of tsb commits on Delta tables.

Every commit that writes barrier ``n`` of job ``j`` to a table carries:

* custom commit metadata (``commitInfo`` keys, all values strings):

  - ``tsb.barrier``: the barrier id, e.g. ``"7"``;
  - ``tsb.job``: the job id;
  - ``tsb.inputs``: JSON object ``{table name: Delta version read}``;
  - ``tsb.ts``: the barrier timestamp in epoch milliseconds;
  - ``tsb.attempt``: the attempt id (uuid hex) whose staged files the commit adds;
  - ``tsb.files`` / ``tsb.bytes``: the number of live data files and their total size in
    bytes at the commit's version (:mod:`airflow_provider_tsb.delta.integrity`);
  - Delta's own ``userMetadata`` (``DESCRIBE HISTORY``): the tag (``tsb.barrier``, ``tsb.job``,
    ``tsb.inputs``, and ``tsb.ts`` / ``tsb.attempt`` when set) as one JSON object. A commit by
    Delta's own Spark writer (:mod:`airflow_provider_tsb.spark.delta_writer`) can carry no other
    ``commitInfo`` keys, so :func:`parse_tag` reads the tag from there when the keys are absent;

* an app transaction ``txn(appId=app_id(j, epoch), version=n)``.

The *epoch* of a table (table property ``tsb.epoch``, absent = 0) is bumped by every
:func:`airflow_provider_tsb.delta.restore.restore_to_barrier`. Because the app id carries the
epoch, a txn version left behind by a commit that a restore undid can never make a later
barrier look committed: after a restore the job writes under a fresh app id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from deltalake import CommitProperties, Transaction

BARRIER_KEY = "tsb.barrier"
JOB_KEY = "tsb.job"
INPUTS_KEY = "tsb.inputs"
TS_KEY = "tsb.ts"
ATTEMPT_KEY = "tsb.attempt"
#: Delta's own ``commitInfo.userMetadata`` (``DESCRIBE HISTORY``'s ``userMetadata`` column):
#: the barrier, job and input versions as one JSON object, for every Delta reader to see
USER_METADATA_KEY = "userMetadata"

#: Table property holding the restore epoch (decimal string; absent means 0).
EPOCH_PROPERTY = "tsb.epoch"
#: Table property: the barrier the table was last restored to (every barrier <= it is WRITTEN).
EPOCH_BASE_PROPERTY = "tsb.epoch.base_barrier"

#: Commit metadata of a RESTORE commit made by ``restore_to_barrier``.
RESTORE_BARRIER_KEY = "tsb.restore.barrier"
RESTORE_VERSION_KEY = "tsb.restore.version"
RESTORE_NEXT_EPOCH_KEY = "tsb.restore.next_epoch"
#: Commit metadata of the epoch-bump commit that follows a restore.
EPOCH_REASON_KEY = "tsb.epoch.reason"
#: Commit metadata of a truncation by ``truncate_table`` (a reprocess from barrier 1): the commit
#: removes every file and starts a new lineage (walks stop at it); it also carries
#: ``tsb.restore.next_epoch`` and is followed by an epoch-bump commit, like a restore.
TRUNCATE_KEY = "tsb.truncate"

#: Commit metadata of a schema-only commit (new nullable columns) made right before the data
#: commit of the barrier it names (``commit.evolve_table_schema``); it carries no barrier tag.
SCHEMA_BARRIER_KEY = "tsb.schema.barrier"

APP_ID_PREFIX = "tsb:"


def app_id(job_id: str, epoch: int) -> str:
    """Return the Delta txn appId of ``job_id`` in table epoch ``epoch``.

    ``tsb:<job_id>`` for epoch 0, ``tsb:<job_id>@<epoch>`` after restores.
    """
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}")
    return f"{APP_ID_PREFIX}{job_id}" if epoch == 0 else f"{APP_ID_PREFIX}{job_id}@{epoch}"


@dataclass(frozen=True)
class BarrierTag:
    """The tsb metadata of one commit (see module docstring)."""

    barrier: int
    job_id: str
    inputs: dict[str, int] = field(default_factory=dict)
    ts_ms: int | None = None
    attempt: str | None = None

    def to_metadata(self) -> dict[str, str]:
        """Return the ``custom_metadata`` dict (string values) for a commit."""
        meta = {
            BARRIER_KEY: str(self.barrier),
            JOB_KEY: self.job_id,
            INPUTS_KEY: json.dumps(dict(sorted(self.inputs.items())), separators=(",", ":")),
        }
        if self.ts_ms is not None:
            meta[TS_KEY] = str(self.ts_ms)
        if self.attempt is not None:
            meta[ATTEMPT_KEY] = self.attempt
        meta[USER_METADATA_KEY] = self.user_metadata()
        return meta

    def user_metadata(self) -> str:
        """The tag as Delta's ``userMetadata`` string (one JSON object, ``DESCRIBE HISTORY``)."""
        tag: dict[str, Any] = {BARRIER_KEY: self.barrier, JOB_KEY: self.job_id,
                               INPUTS_KEY: dict(sorted(self.inputs.items()))}
        if self.ts_ms is not None:
            tag[TS_KEY] = self.ts_ms
        if self.attempt is not None:
            tag[ATTEMPT_KEY] = self.attempt
        return json.dumps(tag, separators=(",", ":"))


def parse_tag(commit_info: Mapping[str, Any] | None) -> BarrierTag | None:
    """Parse the tsb tag of a ``commitInfo`` dict; ``None`` if the commit is not a tsb commit.

    The tag is read from the ``tsb.*`` keys, else from the JSON object in ``userMetadata`` (a
    commit by Delta's own Spark writer, which takes no other keys); ``userMetadata`` that is not
    a tsb tag (a user's text) is no tag.
    """
    if not commit_info:
        return None
    if BARRIER_KEY not in commit_info:
        commit_info = _user_metadata_tag(commit_info.get(USER_METADATA_KEY))
        if commit_info is None:
            return None
    raw_inputs = commit_info.get(INPUTS_KEY)
    inputs: dict[str, int] = {}
    if raw_inputs:
        decoded = json.loads(raw_inputs) if isinstance(raw_inputs, str) else raw_inputs
        inputs = {str(k): int(v) for k, v in decoded.items()}
    ts = commit_info.get(TS_KEY)
    return BarrierTag(
        barrier=int(commit_info[BARRIER_KEY]),
        job_id=str(commit_info.get(JOB_KEY, "")),
        inputs=inputs,
        ts_ms=int(ts) if ts is not None else None,
        attempt=commit_info.get(ATTEMPT_KEY),
    )


def written_by_delta(commit_info: Mapping[str, Any] | None) -> bool:
    """Whether the commit is a barrier commit by Delta's own Spark writer: its tag is in
    ``userMetadata`` only (no ``tsb.*`` keys, so no ``tsb.files`` / ``tsb.digest`` either)."""
    return bool(commit_info) and BARRIER_KEY not in commit_info and _user_metadata_tag(
        commit_info.get(USER_METADATA_KEY)) is not None  # type: ignore[union-attr]


def _user_metadata_tag(raw: Any) -> dict[str, Any] | None:
    """The tsb tag held in a ``userMetadata`` string, or ``None`` (absent, not JSON, not a tag)."""
    if not isinstance(raw, str) or BARRIER_KEY not in raw:
        return None
    try:
        decoded = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(decoded, dict) or not isinstance(decoded.get(BARRIER_KEY), int):
        return None
    return decoded


def barrier_commit_properties(
    tag: BarrierTag, epoch: int, figures: Mapping[str, str] | None = None
) -> CommitProperties:
    """Commit properties of a barrier commit: custom metadata (plus ``figures``, the live-file
    figures of :func:`airflow_provider_tsb.delta.integrity.figures_metadata`) and the
    epoch-scoped txn."""
    return CommitProperties(
        custom_metadata={**tag.to_metadata(), **(figures or {})},
        app_transactions=[Transaction(app_id(tag.job_id, epoch), tag.barrier)],
    )


#: the directory under a sink's root where a job's executors stage each attempt's files (not
#: hidden, so that ``vacuum`` expires them once removed; the ``add`` paths point into it)
STAGING_DIR = "tsb_staging"


def staging_dir(job_id: str, epoch: int, barrier: int) -> str:
    """Directory (relative to the table root) holding all attempts of (job, epoch, barrier):
    ``tsb_staging/<job>/<epoch>/<barrier>``."""
    return f"{STAGING_DIR}/{job_id}/{epoch}/{barrier}"
