"""JobRunManager on its own core: fencing tokens, heartbeats, per-barrier timings."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.exceptions import FencedError, UnknownJobError
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.job_runs import JobRunManager
from airflow_provider_tsb.metastore.registry import RegistryManager


def test_fencing_heartbeats_and_timings(core: MetastoreCore, registry: RegistryManager) -> None:
    runs = JobRunManager(core)
    assert runs.fencing_token("count_words") == 0
    old = runs.begin_attempt("count_words")
    start = runs.start_attempt("count_words", spark_session="session-2")
    assert (old, start.token, start.previous_spark_session) == (1, 2, None)
    assert runs.start_attempt("count_words").previous_spark_session == "session-2"
    with pytest.raises(FencedError, match="fencing token 1"):
        runs.check_fencing_token("count_words", old, barrier=4)
    runs.check_fencing_token("count_words", 3)
    runs.heartbeat("count_words", status="running", barrier=4)
    job = registry.job("count_words")
    assert (job.status, job.current_barrier) == ("running", 4) and job.last_heartbeat_ms is not None
    runs.record_job_barrier("count_words", 4, status="running", started_at_ms=10)
    runs.record_job_barrier("count_words", 4, status="succeeded", finished_at_ms=30)
    timing = runs.job_barriers(["count_words"], [4])[0]
    assert (timing.status, timing.started_at_ms, timing.finished_at_ms, timing.attempts) == ("succeeded", 10, 30, 1)
    assert runs.job_barrier_statuses("count_words", [4, 5]) == {4: "succeeded"}
    with pytest.raises(UnknownJobError):
        runs.heartbeat("nobody")
    with pytest.raises(UnknownJobError, match="'nobody' is not registered; cannot record its timing at barrier 4"):
        runs.record_job_barrier("nobody", 4, status="running", started_at_ms=10)
